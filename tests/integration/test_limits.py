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
from taskq.errors import ConfigError
from taskq.limits import Rate
from taskq.ops.inspect import Inspector
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
