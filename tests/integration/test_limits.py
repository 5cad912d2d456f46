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
from taskq.broker.limits import ADMITTED, DEFERRED, LOST, admit
from taskq.errors import BrokerError, ConfigError
from taskq.limits import Rate
from taskq.ops.inspect import Inspector
from taskq.results import JobStatus
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


@pytest.mark.parametrize(
    "text",
    ["5/fortnight", "0/s", "abc", "5/0s", "-1/s", "5/ms", "", "1/1000000000000d",
     "1000001/s", "1/367d", "1/" + "9" * 5000 + "s"],
)  # fmt: skip
def test_bad_rates_fail_at_decoration(make_app: Callable[..., App], text: str) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match="rate_limit"):
        app.task(rate_limit=text)(lambda: None)


def test_an_out_of_range_rate_names_the_task_and_the_bound(make_app: Callable[..., App]) -> None:
    with pytest.raises(ConfigError, match=r"task 'sync'.*at most 1,000,000 starts.*366 days"):
        make_app().task(name="sync", rate_limit="1/1000000000000d")(lambda: None)


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


@pytest.mark.slow
def test_a_rate_whose_spacing_is_not_a_whole_ms_runs_each_job_once(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # Given: 6 jobs of a task limited to 3/s (333.3 ms apart) that keeps a status record
    jobs = tasks.thirds.map(range(6))
    w = _worker(start_worker)
    # When: the worker admits and defers them
    wait_until(
        lambda: all(j.status().state == "succeeded" for j in jobs), 30, message="all 6 succeed"
    )
    # Then: each ran once, at most 3 in any second, and no child crashed
    assert sorted(x["n"] for x in _tagged(r, "thirds")) == list(range(6))
    assert _most_in_a_window([x["t"] for x in _tagged(r, "thirds")]) <= 3
    assert "died" not in w.output() and "Traceback" not in w.output()
    assert r.xlen("tasks:deadletter") == 0


def _pending(app: App, n: int) -> list[Delivery]:
    got = app.broker.fetch("c1", n).deliveries
    assert len(got) == n
    return got


def _admit(app: App, got: list[Delivery], *, starts: int = 3, window_ms: int = 1000) -> list[int]:
    jobs = [(d, f"{d.record_id}:1", d.body or b"") for d in got]
    return admit(
        app.broker.link,
        jobs,
        task=tasks.thirds.name,
        owner="c1",
        limit_key="tasks:limit:thirds",
        starts=starts,
        window_ms=window_ms,
        record_ttl_ms=60_000,
    )


def _whole(value: Any) -> bool:
    return float(value) == int(float(value)) and "." not in str(value)


def test_deferred_slots_due_times_and_expiries_are_whole_ms(task_app: App, r: redis.Redis) -> None:
    # Given: 5 pending jobs of a 3/s task that keeps records
    got = _pending(task_app, len(tasks.thirds.map(range(5))))
    # When: they are admitted at once
    verdicts = _admit(task_app, got)
    # Then: the first runs, the others wait in the schedule at whole-ms slots
    assert verdicts == [ADMITTED, DEFERRED, DEFERRED, DEFERRED, DEFERRED]
    slots = [s for _m, s in r.zrange("tasks:limit:thirds", 0, -1, withscores=True)]
    assert [b - a for a, b in itertools.pairwise(slots)] == [333, 333, 334, 333]
    assert all(s == int(s) for _m, s in r.zrange("tasks:schedule", 0, -1, withscores=True))
    assert _whole(r.get("tasks:due").decode())
    for d in got[1:]:
        record = r.hgetall(f"tasks:job:{d.record_id}")
        assert record[b"state"] == b"scheduled" and _whole(record[b"due_ms"].decode())
    assert r.xlen("tasks:normal") == 1  # the deferred ones left their stream


@pytest.mark.parametrize(
    ("starts", "window_ms"), [(0, 1000), (3, 0), (3, 1.5), (10**7, 1000), (3, 10**15)]
)
def test_the_limit_script_refuses_bad_numbers_before_any_write(
    task_app: App, r: redis.Redis, starts: int, window_ms: int
) -> None:
    got = _pending(task_app, len(tasks.thirds.map(range(2))))
    before = {k: r.dump(k) for k in r.keys("*")}
    with pytest.raises(BrokerError, match="refused: limit: "):
        _admit(task_app, got, starts=starts, window_ms=window_ms)
    assert {k: r.dump(k) for k in r.keys("*")} == before


def test_the_limit_script_refuses_a_key_of_the_wrong_type_before_any_write(
    task_app: App, r: redis.Redis
) -> None:
    got = _pending(task_app, len(tasks.thirds.map(range(2))))
    r.set(f"tasks:job:{got[1].record_id}", "not a hash")
    before = {k: r.dump(k) for k in r.keys("*")}
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        _admit(task_app, got, starts=1)
    assert {k: r.dump(k) for k in r.keys("*")} == before


@pytest.mark.parametrize(
    ("due", "expected_ms"), [(b"%d.25", 1), (b"%d", 0), (b"soon", -1), (b"nan", -1)]
)
def test_a_due_key_is_read_as_untrusted(
    task_app: App, r: redis.Redis, due: bytes, expected_ms: int
) -> None:
    seconds, micros = r.time()
    now_ms = seconds * 1000 + micros // 1000 + 60_000
    r.set("tasks:due", due.replace(b"%d", b"%d" % now_ms) if b"%d" in due else due)
    due_in_ms = task_app.broker.fetch("c1", 1).due_in_ms
    if expected_ms < 0:
        assert due_in_ms == -1  # not 0, which would promote in a tight loop
    else:
        assert 59_000 <= due_in_ms <= 60_001 + expected_ms


def test_a_fractional_due_ms_in_a_record_reads_rounded_up() -> None:
    raw = {b"state": b"scheduled", b"due_ms": b"2000.4"}
    assert JobStatus.from_record("j", raw, now_ms=1000).due_ms == 2001
    garbage = {b"state": b"scheduled", b"due_ms": b"1e400"}
    assert JobStatus.from_record("j", garbage, now_ms=1000).due_ms is None


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
    assert not c.process(d)
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


def test_a_stale_delivery_takes_no_start_of_the_rate(task_app: App, r: redis.Redis) -> None:
    # given a job of a rate-limited task fetched by one consumer, then handed back (a fresh
    # entry, which another consumer will run)
    task_app.broker.ensure_groups()
    tasks.thirds.delay(1)
    [stale] = _pending(task_app, 1)
    Finisher(task_app.broker, Executor(task_app)).hand_back(stale, owner="c1")
    # when the first consumer reaches its stale delivery, limit.lua refuses it and writes
    # nothing: no start of the window is used up by a run that will not happen
    assert _admit(task_app, [stale]) == [LOST]
    assert not r.exists("tasks:limit:thirds")
