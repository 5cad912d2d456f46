"""``async def`` tasks in the prefork pool: real ``taskq worker`` processes, real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator

import msgpack
import pytest
import redis

from taskq import App, current_job
from taskq.testing import drain
from taskq.worker.record import ChildRecord, WorkerRecord
from tests import async_tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = pytest.mark.integration

StartWorker = Callable[..., WorkerProcess]
APP = "tests.async_tasks"


@pytest.fixture
def aapp(redis_url: str) -> Iterator[App]:
    """``tests.async_tasks.app`` pointed at this test's Redis."""
    async_tasks.app.settings = async_tasks.app.settings.replace(redis_url=redis_url)
    yield async_tasks.app
    async_tasks.app.close()


def _children(worker: WorkerProcess) -> list[int]:
    """The pids of a worker master's children."""
    with open(f"/proc/{worker.pid}/task/{worker.pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _title(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode().strip()


def _children_record(r: redis.Redis) -> tuple[ChildRecord, ...]:
    """The children in the (one) worker's heartbeat record."""
    ids = r.zrange("tasks:workers", 0, -1)
    if not ids:
        return ()
    raw = r.hgetall(f"tasks:worker:{ids[0].decode()}")
    return WorkerRecord.from_fields({k.decode(): v.decode() for k, v in raw.items()}).children


def _pending(r: redis.Redis, stream: str = "tasks:normal") -> int:
    if not r.exists(stream):
        return 0
    return int(r.xinfo_groups(stream)[0]["pending"])


def test_twenty_one_second_naps_on_one_child_take_under_three_seconds(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: 20 async jobs of `await asyncio.sleep(1)`, waiting before the worker starts.
    for i in range(20):
        async_tasks.nap.delay(1.0, tag=str(i))
    # When: a worker with one child starts.
    w = start_worker("-A", APP, "-c", "1", "--async-concurrency", "20")
    wait_until(lambda: r.llen("started") >= 1, timeout_s=20, message="the first start")
    t0 = time.time()  # the first nap has started (the worker's start-up is not timed)
    # Then: they run at once in that child, and all end in under 3 s.
    wait_until(lambda: len(runs(r)) == 20, timeout_s=20, message="all 20 to end")
    done = runs(r)
    assert max(x["t"] for x in done) - t0 < 3.0
    assert sorted(x["tag"] for x in done) == sorted(str(i) for i in range(20))
    assert len({x["pid"] for x in done}) == 1 and done[0]["pid"] != w.pid
    assert max(x["t"] for x in done) - min(x["t"] for x in done) < 1.0  # concurrently
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="all acked")


def test_a_child_holds_no_more_jobs_than_it_can_start(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: 12 naps and a child that runs 5 at once.
    for i in range(12):
        async_tasks.nap.delay(1.5, tag=str(i))
    w = start_worker("-A", APP, "-c", "1", "--async-concurrency", "5")
    # Then: 5 run, 5 are pending (held by the child), and the title says so.
    wait_until(lambda: r.llen("started") == 5, message="five to start")
    assert _pending(r) == 5
    (child,) = wait_until(lambda: _children(w), message="the child")
    wait_until(lambda: "running 5/5 async jobs" in _title(child), message="the title")
    # The heartbeat record says how many it runs (and names the oldest).
    wait_until(lambda: _children_record(r) and _children_record(r)[0].jobs == 5, message="jobs")
    assert _children_record(r)[0].task == "tests.async_tasks.nap"
    wait_until(lambda: len(runs(r)) == 12, timeout_s=15, message="all to end")
    assert r.llen("started") == 12


def test_current_job_is_per_coroutine(start_worker: StartWorker, r: redis.Redis, aapp: App) -> None:
    jobs = [async_tasks.whoami.delay(str(i), 0.2 + 0.05 * (i % 3)) for i in range(10)]
    start_worker("-A", APP, "-c", "1")
    wait_until(lambda: len(runs(r)) == 10, message="ten runs")
    ids = {j.id for j in jobs}
    assert {x["job"] for x in runs(r)} == ids
    for x in runs(r):
        assert x["before"] == x["after"] == x["job"]


def test_results_of_async_tasks(start_worker: StartWorker, r: redis.Redis, aapp: App) -> None:
    jobs = [async_tasks.aadd.delay(i, 1, 0.1) for i in range(5)]
    start_worker("-A", APP, "-c", "1")
    assert [j.result(timeout=10) for j in jobs] == [i + 1 for i in range(5)]
    assert jobs[0].status().state == "succeeded"


def test_an_async_job_past_its_soft_limit_catches_it_and_is_retried(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: a task with a 0.3 s soft limit and max_retries=1, that sleeps 5 s.
    job = async_tasks.overstays.delay(5.0, tag="soft")
    async_tasks.nap.delay(1.0, tag="beside")
    w = start_worker("-A", APP, "-c", "1")
    # Then: the coroutine sees SoftTimeLimitExceeded, twice (first run and its retry), and
    # the job is dead-lettered; the coroutine beside it is not disturbed.
    wait_until(
        lambda: len([x for x in runs(r) if x["tag"] == "soft"]) == 2,
        message="two cancelled runs",
    )
    soft = [x for x in runs(r) if x["tag"] == "soft"]
    assert [(x["attempt"], x["caught"]) for x in soft] == [(1, True), (2, True)]
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="the dead letter")
    wait_until(lambda: job.status().state == "failed", message="its status")
    wait_until(lambda: [x["tag"] for x in runs(r)].count("beside") == 1, message="nap ran")
    assert "SoftTimeLimitExceeded" in w.output()


def test_a_loop_blocking_job_longer_than_the_visibility_timeout_runs_once(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: a visibility timeout of 1 s, a job that holds the loop (and the GIL) for 3.5 s,
    # and a second worker whose sweep would take the job if its lease lapsed.
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "1000", "TASKQ_SWEEP_INTERVAL_MS": "200"}
    async_tasks.blocks_loop.delay(3.5, tag="cpu")
    async_tasks.nap.delay(0.5, tag="beside")
    start_worker("-A", APP, "-c", "1", **env)
    wait_until(lambda: r.llen("started") >= 1, message="the job to start")
    start_worker("-A", APP, "-c", "1", **env)
    wait_until(lambda: len(runs(r)) == 2, timeout_s=15, message="both to end")
    # Had the other worker's sweep taken the job, the first run's (fenced) ack would have been
    # refused and a copy would wait in the retry set or the stream (pending or not) until its
    # own run ended: once both are empty, every run that will happen has happened.
    wait_until(
        lambda: r.xlen("tasks:normal") + r.zcard("tasks:retry:normal") == 0,
        message="no copy of the job left to run",
    )
    assert sorted(x["tag"] for x in runs(r)) == ["beside", "cpu"]
    assert r.lrange("started", 0, -1).count(b"cpu") == 1


def test_warm_shutdown_lets_ten_running_coroutines_finish(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    for i in range(10):
        async_tasks.nap.delay(1.5, tag=str(i))
    w = start_worker("-A", APP, "-c", "1", "--grace", "20")
    wait_until(lambda: r.llen("started") == 10, message="ten to start")
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    assert sorted(x["tag"] for x in runs(r)) == sorted(str(i) for i in range(10))
    assert r.xlen("tasks:normal") == 0


def test_warm_shutdown_past_the_grace_hands_the_coroutines_back_uncounted(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    for i in range(4):
        async_tasks.nap.delay(30, tag=str(i))
    w = start_worker("-A", APP, "-c", "1", "--grace", "0.5")
    wait_until(lambda: r.llen("started") == 4, message="four to start")
    w.signal(signal.SIGTERM)
    w.wait(20)
    assert r.xlen("tasks:normal") == 4 and _pending(r) == 0
    assert runs(r) == []
    for _, fields in r.xrange("tasks:normal"):
        assert msgpack.unpackb(fields[b"body"], raw=False)["retries"] == 0  # no attempt used


def test_sigkill_of_a_child_with_coroutines_running_loses_none(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: 8 coroutines running in the one child.
    for i in range(8):
        async_tasks.nap.delay(2.0, tag=str(i))
    w = start_worker("-A", APP, "-c", "1")
    wait_until(lambda: r.llen("started") == 8, message="eight to start")
    (child,) = _children(w)
    # When: the child is killed.
    os.kill(child, signal.SIGKILL)
    # Then: every job runs again (in the new child) and ends, each exactly once, on its
    # second attempt (a run lost with its child counts as an attempt).
    wait_until(lambda: len(runs(r)) == 8, timeout_s=20, message="all eight to end")
    done = runs(r)
    assert sorted(x["tag"] for x in done) == sorted(str(i) for i in range(8))
    assert {x["attempt"] for x in done} == {2} and child not in {x["pid"] for x in done}
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="all acked")


def test_hard_limit_replaces_the_child_and_hands_the_others_back_uncounted(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: three naps running, then a job that blocks the loop past its 1 s hard limit.
    for i in range(3):
        async_tasks.nap.delay(3.0, tag=str(i))
    w = start_worker("-A", APP, "-c", "1")
    wait_until(lambda: r.llen("started") == 3, message="three naps to start")
    async_tasks.hangs.delay(30, tag="hang")
    wait_until(lambda: "hard time limit" in w.output(), timeout_s=10, message="the kill")
    # Then: the naps run again on their first attempt; the hung job used one.
    wait_until(lambda: len(runs(r)) == 3, timeout_s=20, message="the naps to end")
    assert {x["attempt"] for x in runs(r)} == {1}
    assert "2 other running job(s)" in w.output() or "3 other running job(s)" in w.output()


def test_sync_and_async_tasks_in_one_worker(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    naps = [async_tasks.nap.delay(0.5, tag=f"a{i}") for i in range(6)]
    syncs = [async_tasks.sync_sleep.delay(0.2, tag=f"s{i}") for i in range(3)]
    sums = [async_tasks.sync_add.delay(i, i) for i in range(3)]
    start_worker("-A", APP, "-c", "2")
    wait_until(lambda: len(runs(r)) == 9, timeout_s=15, message="all to run")
    assert [j.result(timeout=10) for j in sums] == [0, 2, 4]
    assert sorted(x["tag"] for x in runs(r)) == sorted(
        [f"a{i}" for i in range(6)] + [f"s{i}" for i in range(3)]
    )
    assert len(naps) + len(syncs) == 9
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="all acked")


def test_cancel_terminate_stops_one_coroutine_only(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    victim = async_tasks.kept_nap.delay(5.0, tag="victim")
    async_tasks.kept_nap.delay(1.5, tag="bystander")
    w = start_worker("-A", APP, "-c", "1")
    wait_until(lambda: r.llen("started") == 2, message="both to start")
    (child,) = _children(w)
    victim.cancel(terminate=True)
    wait_until(lambda: victim.status().state == "cancelled", message="the cancel")
    wait_until(lambda: [x["tag"] for x in runs(r)] == ["bystander"], message="bystander ends")
    assert _children(w) == [child]  # the same child: only the coroutine was stopped
    assert "cancelled: interrupting it" in w.output()


def test_a_concurrency_limit_holds_for_async_jobs(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    for i in range(6):
        async_tasks.limited.delay(0.4, tag=str(i))
    start_worker("-A", APP, "-c", "1", "--async-concurrency", "10")
    wait_until(lambda: len(runs(r)) == 6, timeout_s=15, message="all six to run")
    spans = [(x["start"], x["end"]) for x in runs(r)]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2  # two at a time: neither one (no concurrency) nor more (no limit)


def test_jobs_fetched_behind_a_sync_job_go_back_at_once_for_another_child(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    # Given: a 2 s sync job first in the queue, then four short naps, and two children.
    async_tasks.sync_sleep.delay(2.0, tag="sync")
    for i in range(4):
        async_tasks.nap.delay(0.2, tag=f"a{i}")
    start_worker("-A", APP, "-c", "2")
    # Then: the naps do not wait for the sync job (whichever child fetched them with it).
    wait_until(lambda: len(runs(r)) == 5, timeout_s=15, message="all five to run")
    ended = {x["tag"]: x["t"] for x in runs(r)}
    assert all(ended[f"a{i}"] < ended["sync"] - 1.0 for i in range(4)), ended


def test_retry_from_an_async_task_runs_it_again_after_its_countdown(
    start_worker: StartWorker, r: redis.Redis, aapp: App
) -> None:
    job = async_tasks.retries_once.delay(4)
    start_worker("-A", APP, "-c", "1")
    assert job.result(timeout=10) == 40
    status = job.status()
    assert status.attempts == 2 and [e.error_type for e in status.errors] == ["Retry"]


def test_drain_runs_async_tasks_in_process_also_from_a_running_loop(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    seen: list[str | None] = []

    @app.task(name="inproc.anap")
    async def anap(i: int) -> None:
        await asyncio.sleep(0.01)
        job = current_job()
        seen.append(job.id if job else None)

    async def test_body() -> int:  # as an async test (pytest-asyncio, anyio) would call it
        jobs = [await anap.adelay(i) for i in range(3)]
        assert drain(app).ok == 3
        await app.aclose()
        return len({j.id for j in jobs} & set(seen))

    assert asyncio.run(test_body()) == 3
