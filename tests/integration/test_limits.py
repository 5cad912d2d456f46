"""Global rate limits (issue 15, part 3), against a real Redis and real worker processes."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis

from taskq import App, JobCancelled
from taskq.broker import Delivery
from taskq.errors import ConfigError
from taskq.limits import Rate
from taskq.ops.inspect import Inspector
from taskq.testing import drain
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor, Prepared
from taskq.worker.finish import Finisher
from taskq.worker.limiter import Limiter
from taskq.worker.outcome import OK, Outcome
from taskq.worker.scoreboard import Scoreboard
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]
WINDOW_S = 0.95
"""Windows checked a little under the limit's second: starts are stamped by the task, a few
ms after the slot the limit gave them."""


def _worker(start_worker: StartWorker, concurrency: int = 2) -> WorkerProcess:
    args = ("-A", "tests.tasks", "-c", str(concurrency), "--loglevel", "warning")
    return start_worker(*args)


def _tagged(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    return [x for x in runs(r) if x.get("tag") == tag]


def _held(app: App) -> int:
    [q] = Inspector(app.reader, ["tasks"]).queue_stats()
    return q.held


def _most_in_a_window(times: list[float]) -> int:
    times = sorted(times)
    return max(sum(1 for u in times if t <= u < t + WINDOW_S) for t in times)


@pytest.mark.slow
def test_a_rate_limit_holds_across_two_workers(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    tasks.limited.map(range(25))
    _worker(start_worker)
    _worker(start_worker)
    wait_until(lambda: len(_tagged(r, "limited")) == 25, 30, message="all 25 limited jobs")
    starts = [x["t"] for x in _tagged(r, "limited")]
    assert _most_in_a_window(starts) <= 5
    assert max(starts) - min(starts) >= 3.5  # 25 jobs at 5/s: four seconds at least
    assert all(x["attempt"] == 1 for x in _tagged(r, "limited"))  # deferral uses no attempt
    assert sorted(x["n"] for x in _tagged(r, "limited")) == list(range(25))
    assert r.xlen("tasks:deadletter") == 0


def test_other_tasks_flow_past_a_limited_backlog(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    tasks.limited.map(range(20))
    for i in range(10):
        tasks.echo.delay(i)
    _worker(start_worker)
    wait_until(lambda: len([x for x in runs(r) if "value" in x]) == 10, 20, message="echo jobs")
    echo_done = max(x["t"] for x in runs(r) if "value" in x)
    limited = sorted(x["t"] for x in _tagged(r, "limited"))
    assert len(limited) < 20 or limited[10] > echo_done  # the backlog did not hold them up
    wait_until(lambda: len(_tagged(r, "limited")) == 20, 30, message="the limited backlog")


def test_a_limited_backlog_is_deferred_a_batch_at_a_time(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    tasks.limited.map(range(300))  # 5/s: all but the first wait for later slots
    r.config_resetstat()
    _worker(start_worker, concurrency=1)
    wait_until(lambda: r.zcard("tasks:schedule") >= 290, 30, message="the backlog deferred")
    # limit.lua runs one ZREMRANGEBYSCORE per call (the heartbeat's the only other one): a
    # call per batch of deferrals, not one per job.
    calls = r.info("commandstats")["cmdstat_zremrangebyscore"]["calls"]
    assert calls < 60, calls
    assert r.xlen("tasks:normal") <= 10  # they left the stream


def test_a_limit_per_key(task_app: App, r: redis.Redis, start_worker: StartWorker) -> None:
    for n in range(5):
        tasks.per_customer.delay("a", n)
        tasks.per_customer.delay("b", n)
    _worker(start_worker)
    wait_until(lambda: len(_tagged(r, "per_customer")) == 10, 30, message="both customers")
    for customer in ("a", "b"):
        starts = [x["t"] for x in _tagged(r, "per_customer") if x["customer"] == customer]
        assert _most_in_a_window(starts) <= 2
    by_start = sorted(_tagged(r, "per_customer"), key=lambda x: x["t"])
    assert {x["customer"] for x in by_start[:4]} == {"a", "b"}  # keys do not wait for each other


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100/s", (100, 1000)), ("20/m", (20, 60_000)), ("1000/h", (1000, 3_600_000)),
     ("5/10s", (5, 10_000)), ("3/min", (3, 60_000)), ("7 / day", (7, 86_400_000))],
)  # fmt: skip
def test_rates_parse(text: str, expected: tuple[int, int]) -> None:
    assert tuple(Rate.parse(text)) == expected


@pytest.mark.parametrize("text", ["5/fortnight", "0/s", "abc", "5/0s", "-1/s", "5/ms", ""])
def test_bad_rates_fail_at_decoration(make_app: Callable[..., App], text: str) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match="rate_limit"):
        app.task(rate_limit=text)(lambda: None)


def test_limit_key_needs_a_rate(make_app: Callable[..., App]) -> None:
    with pytest.raises(ConfigError, match="limit_key needs a rate_limit or a concurrency_limit"):
        make_app().task(limit_key=lambda: "k")(lambda: None)


def _exclusive(r: redis.Redis) -> list[dict[str, Any]]:
    return sorted(_tagged(r, "exclusive"), key=lambda x: x["start"])


def test_a_concurrency_limit_of_one_never_overlaps(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    tasks.exclusive.map(range(8))
    for i in range(5):
        tasks.echo.delay(i)
    _worker(start_worker, concurrency=4)
    wait_until(lambda: len(_exclusive(r)) == 8, 30, message="the eight exclusive jobs")
    runs_ = _exclusive(r)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(runs_))
    assert all(x["attempt"] == 1 for x in runs_)
    echo_done = max(x["t"] for x in runs(r) if "value" in x)
    assert echo_done < runs_[3]["start"]  # the other task's jobs did not queue behind them
    assert r.zcard("tasks:running:tests.tasks.exclusive") == 0
    assert r.zcard("tasks:held:tests.tasks.exclusive") == 0


@pytest.mark.slow
def test_a_sigkilled_childs_slot_comes_back(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    tasks.exclusive.delay(0, 30.0)  # holds the slot until its child is killed
    _worker(start_worker, concurrency=4)
    pid = int(wait_until(lambda: r.lindex("started", 0), 20, message="the first start"))
    for n in range(1, 4):  # only now: enqueued with job 0, one of them could win the slot
        tasks.exclusive.delay(n)
    wait_until(lambda: r.zcard("tasks:held:tests.tasks.exclusive") == 3, 10, message="waiters")
    assert _held(task_app) == 3  # out of every stream, but inspect shows them
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: {x["n"] for x in _exclusive(r)} == {0, 1, 2, 3}, 30, message="all four")
    assert _held(task_app) == 0
    runs_ = _exclusive(r)
    assert [x["attempt"] for x in runs_ if x["n"] == 0] == [2]  # the killed run counted
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(runs_))
    assert r.xlen("tasks:deadletter") == 0


def test_bad_concurrency_limits(make_app: Callable[..., App]) -> None:
    app = make_app()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="concurrency_limit"):
            app.task(concurrency_limit=bad)(lambda: None)  # type: ignore[arg-type]


def test_a_job_waiting_for_a_slot_can_be_cancelled(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    first = tasks.exclusive_stored.delay(1, 2.0)
    _worker(start_worker, concurrency=2)
    running = "tasks:running:tests.tasks.exclusive_stored"
    wait_until(lambda: r.zcard(running) == 1, 20, message="the first job to take the slot")
    second = tasks.exclusive_stored.delay(2, 0.0)
    held = "tasks:held:tests.tasks.exclusive_stored"
    wait_until(lambda: r.zcard(held) == 1, 20, message="the second job to wait for the slot")
    assert second.status().state == "waiting"
    assert _held(task_app) == 1
    assert second.cancel() == "cancelled"
    assert r.zcard(held) == 0
    assert _held(task_app) == 0
    assert first.result(timeout=20) == 1
    with pytest.raises(JobCancelled):
        second.result(timeout=1)
    assert [x["n"] for x in _tagged(r, "exclusive_stored")] == [1]


# -- concurrency slots and stale deliveries (in-process: one consumer's steps) -------------

EXCLUSIVE_RUNNING = "tasks:running:tests.tasks.exclusive_stored"
EXCLUSIVE_HELD = "tasks:held:tests.tasks.exclusive_stored"


def _take(app: App, d: Delivery, owner: str) -> bool:
    """One consumer's ``slot.lua`` call for a fetched job: whether it may start."""
    p = Executor(app).prepare(d)
    assert isinstance(p, Prepared)
    return Limiter(app.broker_for(["tasks"]), owner, app.settings).took_slot(p, lambda f: f())


def _live(r: redis.Redis, worker: str) -> None:
    """A heartbeat of ``worker`` far ahead: its slots count as held by a live worker."""
    r.zadd("tasks:workers", {worker: 10**15})


def test_a_stale_delivery_takes_no_slot(task_app: App, r: redis.Redis) -> None:
    # given a job fetched by one consumer, then handed back (a fresh entry) and run elsewhere
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    job = tasks.exclusive_stored.delay(1, 0.0)
    [stale] = broker.fetch("wa:0:1", 1).deliveries
    Finisher(broker, Executor(task_app)).hand_back(stale, owner="wa:0:1")
    drain(task_app)
    assert job.result(timeout=5) == 1 and r.zcard(EXCLUSIVE_RUNNING) == 0
    # when the first consumer reaches its stale delivery, slot.lua refuses it
    assert not _take(task_app, stale, "wa:0:1")
    assert r.zcard(EXCLUSIVE_RUNNING) == 0 and r.zcard(EXCLUSIVE_HELD) == 0


def test_a_job_of_a_revoked_batch_takes_no_slot(task_app: App, r: redis.Redis) -> None:
    # given a child's listed batch whose rest the master revoked and handed back
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    tasks.exclusive_stored.delay(1, 0.0)
    board = Scoreboard(1)
    c = Consumer(broker, Executor(task_app), name="wa:0:1", options=ConsumerOptions(),
                 slot=board.slot(0))  # fmt: skip
    [d] = broker.fetch(c.name, 1).deliveries
    c.slot.list_batch([(broker.stream_position[d.stream], d.entry_id)])  # type: ignore[union-attr]
    assert [e for _, e in board.revoke_rest(0, board.read(0))] == [d.entry_id]
    # (the master hands it back later: the entry is still pending under the child)
    # when the child reaches it, it skips it without taking the task's slot
    assert not c._process(d)
    assert r.zcard(EXCLUSIVE_RUNNING) == 0 and not _tagged(r, "exclusive_stored")
    assert [x.entry_id for x in broker.pending_of(c.name)] == [d.entry_id]  # the master's now


def test_a_job_held_for_a_slot_never_brings_back_an_expired_record(
    task_app: App, r: redis.Redis
) -> None:
    # given the task's one slot held by a live worker, and a job whose record expired
    _live(r, "wlive")
    r.zadd(EXCLUSIVE_RUNNING, {"wlive|another-job": 1})
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    job = tasks.exclusive_stored.delay(2, 0.0)
    [d] = broker.fetch("wa:0:1", 1).deliveries
    assert job.forget()
    # when it waits for the slot, no record without a TTL is written for it
    assert not _take(task_app, d, "wa:0:1")
    assert r.zcard(EXCLUSIVE_HELD) == 1
    assert not r.exists(f"tasks:job:{job.id}")


def test_a_purged_running_jobs_slot_is_freed_when_its_worker_stops(
    task_app: App, r: redis.Redis
) -> None:
    # given a running job of a limited task (worker wa, alive) purged by hand mid-run
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    _live(r, "wa")
    tasks.exclusive_stored.delay(1, 0.0)
    [d] = broker.fetch("wa:0:1", 1).deliveries
    assert _take(task_app, d, "wa:0:1")
    task_app.operators.purge_waiting("tasks", include_pending=True)
    # when its run ends, its end's writes are fenced off with the entry: the slot stays
    finisher = Finisher(broker, Executor(task_app))
    p = Executor(task_app).prepare(d)
    assert isinstance(p, Prepared)
    finisher.record(Outcome(OK, d, p.msg, 1, result=b"\x01"), owner="wa:0:1")
    broker.fetch("wa:0:1", 0, finisher.take_acks(), completions=finisher.completions,
                 fence_acks=True)  # fmt: skip
    assert r.zrange(EXCLUSIVE_RUNNING, 0, -1) == [f"wa|{p.msg.id}".encode()]
    tasks.exclusive_stored.delay(2, 0.0)
    [waits] = broker.fetch("wb:0:1", 1).deliveries
    assert not _take(task_app, waits, "wb:0:1")  # held: the slot is still taken
    # then once worker wa stops beating, the next take of a slot of the task frees it
    r.zrem("tasks:workers", "wa")
    tasks.exclusive_stored.delay(3, 0.0)
    [third] = broker.fetch("wb:0:1", 1).deliveries
    assert _take(task_app, third, "wb:0:1")
    assert r.zrange(EXCLUSIVE_RUNNING, 0, -1) != [f"wa|{p.msg.id}".encode()]
