"""Broker basics against a real server: groups, shared tasks, strict priority in one fetch,
lease renewal and fenced acks at any size, scripts that validate before they write."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import taskq
from taskq import App, BrokerRefused
from taskq.broker.scripts import script_sha
from taskq.keys import GROUP
from taskq.message import Message
from taskq.registry import SHARED
from taskq.testing import drain
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def _pending(r: redis.Redis) -> list[dict[str, object]]:
    return list(r.xpending_range("tasks:normal", "taskq", "-", "+", 5000))


def test_renew_and_fenced_acks_cover_more_than_a_thousand_pending_entries(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    """Only the first 1,000 pending entries of a consumer were once renewed and fenced,
    and renewal XCLAIMed only the first entry of each page at all."""
    app = make_app()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    app.enqueue_many(Message("tests.tasks.echo", (i,)) for i in range(1500))
    held = broker.fetch("w:1:a:0:1", 1000).deliveries + broker.fetch("w:1:a:0:1", 500).deliveries
    assert len(held) == 1500
    # Given: every entry has been idle for a while.
    wait_until(
        lambda: min(p["time_since_delivered"] for p in _pending(r)) >= 300,
        message="the entries to be idle",
    )
    # When: the master renews the consumer's leases.
    assert broker.renew(["w:1:a:0:1"]) == 1500
    # Then: all of them were renewed, the 1,001st and the last included.
    assert max(p["time_since_delivered"] for p in _pending(r)) < 300
    # And a fenced ack of all of them acks all of them.
    broker.fetch("w:1:a:0:1", 0, held, fence_acks=True, trim=True)
    assert r.xlen("tasks:normal") == 0


def test_a_script_refuses_bad_arguments_before_writing_anything(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    """The park script (park.lua) XCLAIMed, then failed on a non-numeric due time,
    leaving the job owned by the retry consumer with no due time. Scripts validate before
    they write."""
    app = make_app()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    app.enqueue(Message("tests.tasks.echo", (1,)))
    [d] = broker.fetch("w:1:a:0:1", 1).deliveries
    with pytest.raises(BrokerRefused, match="delay_ms"):
        broker.park(
            d,
            owner="w:1:a:0:1",
            task="t",
            body=b"",
            delay_ms="soon",  # type: ignore[arg-type]
        )
    [p] = _pending(r)
    assert p["consumer"] == b"w:1:a:0:1" and r.zcard("tasks:retry:normal") == 0


def test_group_creation_is_idempotent_and_a_lost_group_is_recreated(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    broker.ensure_groups()  # BUSYGROUP is not an error
    assert [g["name"] for g in r.xinfo_groups("tasks:high")] == [GROUP.encode()]
    # The stream (and its group) vanish; a job is added before any worker looks again.
    r.delete("tasks:normal")
    r.xadd("tasks:normal", {"task": "x", "body": b"\x80"})
    fetched = broker.fetch("c1", 10).deliveries
    assert [d.stream for d in fetched] == ["tasks:normal"]  # recreated at id 0
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 1


def test_one_fetch_takes_high_before_normal_before_low(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    for priority in ("low", "normal", "high", "low", "high"):
        r.xadd(f"tasks:{priority}", {"task": priority, "body": b"\x80"})
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    got = broker.fetch("c1", 3).deliveries
    # The first three are the batch; a lower stream read for the same batch may bring more,
    # which a consumer hands back (XREADGROUP's COUNT is per stream).
    assert [d.priority for d in got[:3]] == ["high", "high", "normal"]
    rest = got[3:] + broker.fetch("c1", 3).deliveries
    assert [d.priority for d in rest] == ["low", "low"]


def test_a_batch_is_acked_read_and_trimmed_without_the_fetch_script(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    # Given: 100 jobs waiting in one stream, and Redis knowing none of taskq's scripts.
    app = make_app()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    for i in range(100):
        r.xadd("tasks:normal", {"task": "x", "body": str(i).encode()})
    r.script_flush()
    r.config_resetstat()
    # When: a consumer takes them in batches of 40, acking each batch with the next fetch,
    # and the last fetch trims.
    first = broker.fetch("c1", 40).deliveries
    second = broker.fetch("c1", 40, first, fence_acks=False).deliveries
    third = broker.fetch("c1", 40, second, fence_acks=False).deliveries
    last = broker.fetch("c1", 40, third, fence_acks=False, trim=True, dirty=["tasks:normal"])
    # Then: every job came once, in order; all are acked, and the finished ones are gone.
    bodies = [d.body for d in first + second + third]
    assert bodies == [str(i).encode() for i in range(100)]
    assert last.deliveries == []
    assert r.xpending("tasks:normal", GROUP)["pending"] == 0
    assert r.xlen("tasks:normal") == 0
    # ... with no fetch script at all: the trim's script was loaded when Redis lacked it.
    stats = r.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 2  # the trim: NOSCRIPT, then again
    assert "cmdstat_eval" not in stats
    assert r.script_exists(script_sha("trim")) == [True]
    assert r.script_exists(script_sha("fetch")) == [False]


def test_a_short_batch_is_filled_from_the_lower_streams(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    # Given: a consumer whose last batch came from the high stream only.
    app = make_app()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    for _ in range(4):
        r.xadd("tasks:high", {"task": "h", "body": b"\x80"})
    assert len(broker.fetch("c1", 4).deliveries) == 4
    # When: two high jobs and many normal ones wait, and it asks for five.
    for priority in ("high", "high", *["normal"] * 10):
        r.xadd(f"tasks:{priority}", {"task": priority, "body": b"\x80"})
    got = broker.fetch("c1", 5).deliveries
    # Then: the two high ones, then three normal ones, read in the same call.
    assert [d.priority for d in got] == ["high", "high", "normal", "normal", "normal"]
    # And the next batch reads from the stream the last one ended in.
    assert [d.priority for d in broker.fetch("c1", 5).deliveries] == ["normal"] * 5


def test_shared_task_enqueues_through_the_current_app_and_any_app_runs_it(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    runs: list[int] = []

    @taskq.task(name="shared.double")
    def double(x: int) -> None:
        """Declared without any app, as a library would."""
        runs.append(x * 2)

    try:
        app = make_app().set_current()  # shared tasks enqueue through the current app
        job = double.delay(21)
        assert job.entry_id is not None and r.xlen("tasks:normal") == 1
        assert "shared.double" in app.registered()
        drain(app)
        assert runs == [42]
    finally:
        SHARED.tasks.pop("shared.double")  # keep the registry as other tests expect it
