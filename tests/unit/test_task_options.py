"""apply_async argument checks and what the returned Job says."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from taskq import App
from taskq.apply import due_time
from taskq.errors import ConfigError


def test_naive_eta_is_utc() -> None:
    naive = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(seconds=60)
    due, in_ms = due_time(None, naive)
    assert in_ms is None and due is not None and abs(due - (time.time() + 60) * 1000) < 2000


def test_aware_eta_and_timestamp() -> None:
    later = datetime.now(timezone(timedelta(hours=-5))) + timedelta(seconds=30)
    due, _ = due_time(None, later)
    assert due is not None and abs(due - (time.time() + 30) * 1000) < 2000
    assert due_time(None, time.time() + 10)[0] is not None
    assert due_time(None, time.time() - 10) == (None, None)
    assert due_time(-5, None) == (None, None)


def test_countdown_is_relative() -> None:
    due, in_ms = due_time(2.5, None)
    assert in_ms == 2500 and due is not None and abs(due - (time.time() + 2.5) * 1000) < 2000


@pytest.mark.parametrize(
    ("countdown", "eta"),
    [
        (float("inf"), None),
        (float("nan"), None),
        ("10", None),
        (None, "2030-01-01"),
        (None, float("nan")),
        (1, time.time() + 5),
    ],
)
def test_bad_countdown_or_eta_is_refused(countdown: object, eta: object) -> None:
    with pytest.raises(ConfigError):
        due_time(countdown, eta)  # type: ignore[arg-type]


@pytest.mark.parametrize("option", ["time_limit_s", "soft_time_limit_s"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), 10**9, "5", True])
def test_a_time_limit_out_of_range_is_refused_at_declaration(option: str, value: object) -> None:
    app = App(eager=True)
    with pytest.raises(ConfigError, match=rf"task 'job': {option} must be"):
        app.task(name="job", **{option: value})(lambda: None)


def test_a_time_limit_in_range_is_kept() -> None:
    t = App(eager=True).task(time_limit_s=0.5, soft_time_limit_s=86_400)(lambda: None)
    assert (t.options.time_limit_s, t.options.soft_time_limit_s) == (0.5, 86_400)


@pytest.mark.parametrize("ttl", [0, -1, 2**62, 10 * 365 * 24 * 3600 + 1, 1.5, True])
def test_a_result_ttl_out_of_range_is_refused_at_declaration_and_in_settings(ttl: object) -> None:
    # a TTL past ten years would be refused in every body: it is refused where it is set
    with pytest.raises(ConfigError, match="result_ttl_s must be"):
        App(eager=True).task(name="job", result_ttl_s=ttl)(lambda: None)
    with pytest.raises(ConfigError, match="result_ttl_s must be"):
        App(eager=True, result_ttl_s=ttl)
