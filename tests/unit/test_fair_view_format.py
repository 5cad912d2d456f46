"""How a fair queue's keys are parsed and shown, without Redis: weights that are not
weights, members that are huge or not UTF-8, keys that are markup or terminal escapes,
and the Prometheus exposition of keys that are user data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from taskq.fairview import (
    INVALID_WEIGHT,
    KEY_SHOWN_BYTES,
    FairKey,
    FairStats,
    key_shown,
    weight_of,
)
from taskq.ops.inspect import QueueStats
from taskq.ops.render import printable, render_fair

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


@pytest.mark.parametrize(
    ("stored", "weight"),
    [(None, 1), (b"3", 3), (b"1000", 1000), (b"1001", INVALID_WEIGHT), (b"0", INVALID_WEIGHT),
     (b"-1", INVALID_WEIGHT), (b"2.0", INVALID_WEIGHT), (b"heavy", INVALID_WEIGHT),
     (b"\xd9\xa3", INVALID_WEIGHT), (b"9" * 5000, INVALID_WEIGHT)],
)  # fmt: skip
def test_a_stored_weight_is_one_or_invalid(stored: object, weight: int) -> None:
    assert weight_of(stored) == weight


def test_members_are_text_and_cut_when_huge() -> None:
    assert key_shown(b"tenant-42") == "tenant-42"
    assert key_shown(b"\xff\xfe") == "\ufffd\ufffd"
    assert key_shown(b"x" * KEY_SHOWN_BYTES) == "x" * KEY_SHOWN_BYTES
    assert key_shown(b"x" * (KEY_SHOWN_BYTES * 9)) == "x" * KEY_SHOWN_BYTES + "…"


def test_terminal_escapes_are_written_out() -> None:
    assert printable("tenant-42") == "tenant-42"
    assert printable("\x1b[2Ja\nb\tc") == "\\x1b[2Ja\\nb\\tc"


def test_the_text_view_lists_top_keys_with_weights() -> None:
    top = (
        FairKey("a", 3, 120),
        FairKey("\x1b]0;x\x07", INVALID_WEIGHT, 7),
        FairKey("b" * 99, 1, 1),
    )
    lines = render_fair("tasks", FairStats(True, 40, top))
    assert lines == [  # a weight column with "invalid" in it is text: left-aligned
        "tasks: fair, 40 active key(s), top 3 by waiting jobs:",
        "  " + "KEY".ljust(80) + "  WAITING  WEIGHT",
        "  " + "a".ljust(80) + "      120  3",
        "  " + "\\x1b]0;x\\x07".ljust(80) + "        7  invalid",
        "  " + "b" * 79 + "…" + "        1  1",
    ]
    assert render_fair("q", FairStats(False, 0, ())) == [
        "q: fair (not marked on: keys left waiting), 0 active key(s)"
    ]


def test_metric_label_values_are_escaped() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    from taskq.ops.queue_metrics import _fair_families

    nasty = 'a"b\\c\nd'
    top = (FairKey(nasty, 1, 5), FairKey("k…", 1, 4), FairKey("k…", 1, 3))
    stats = [
        QueueStats("tasks", (), 0, None, 0, 0, 0, 0, fair=FairStats(True, 3, top)),
        QueueStats("plain", (), 0, None, 0, 0, 0, 0),
    ]

    class Fair(Collector):
        def collect(self) -> Iterator[Metric]:
            return _fair_families(stats)

    registry = CollectorRegistry()
    registry.register(Fair())
    text = generate_latest(registry).decode()
    assert 'taskq_fair_active_keys{queue="tasks"} 3.0' in text
    assert 'taskq_fair_key_waiting{key="a\\"b\\\\c\\nd",queue="tasks"} 5.0' in text
    assert text.count('key="k…"') == 1  # a key shown twice is one series
    assert "plain" not in text
