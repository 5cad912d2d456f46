"""Cancelling jobs that keep no status record (results off): found by their id where they
wait, or stopped by a tombstone at their worker, before they start and while they run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from taskq import App
from taskq.broker.control import read_audit
from taskq.testing import drain
from taskq.worker import cancels
from taskq.worker.aio import serve
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from tests import async_tasks, tasks
from tests.conftest import WorkerProcess, runs, wait_until


def test_a_waiting_job_without_a_record_is_found_and_never_runs(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()  # results off
    ran: list[int] = []

    @app.task
    def work(n: int) -> None:
        ran.append(n)

    first, job, last = work.delay(1), work.delay(2), work.delay(3)
    assert not job.stores_result
    assert job.cancel() == "cancelled"
    assert app.job(job.id).status().state == "cancelled"  # from any process, by id
    drain(app)
    assert ran == [1, 3]
    assert job.status().state == "cancelled"
    assert r.hget("tasks:counts", "cancelled") == b"1"
    assert first.status().state != "cancelled" and last.status().state != "cancelled"
    assert 0 < r.pttl("tasks:ended") <= app.settings.result_ttl_s * 1000


def test_delayed_and_retrying_jobs_without_a_record_leave_their_sets(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task(max_retries=3, retry_backoff_ms=60_000)
    def fails() -> None:
        raise RuntimeError("again")

    later = fails.apply_async(countdown=60)
    assert later.cancel() == "cancelled"
    assert r.zcard("tasks:schedule") == 0
    retrying = fails.delay()
    drain(app)  # its first run fails: it waits out its backoff in the retry set
    assert r.zcard("tasks:retry:normal") == 1
    assert app.job(retrying.id).cancel() == "cancelled"
    assert r.zcard("tasks:retry:normal") == 0


def test_a_delivered_job_without_a_record_is_stopped_by_its_tombstone(
    make_app: Callable[..., App], r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given jobs a child fetched in one batch, the later ones cancelled while the first runs
    app = make_app()
    later: list[str] = []
    ran: list[int] = []

    @app.task
    def first() -> None:
        assert [app.job(j).cancel() for j in later] == ["requested"] * 2

    @app.task
    def after(n: int) -> None:
        ran.append(n)

    first.delay()
    later += [after.delay(1).id, after.delay(2).id]
    monkeypatch.setattr(cancels, "MARKS_EVERY_S", 0.0)  # read the tombstones at every turn
    broker = app.broker_for(["tasks"])
    serve(
        Consumer(
            broker, Executor(app), name="w:0:1", options=ConsumerOptions(prefetch=8, burst=True)
        )
    )
    # then neither started: both ended cancelled, and their tombstones went with them
    assert ran == []
    assert [app.job(j).status().state for j in later] == ["cancelled", "cancelled"]
    assert r.hlen("tasks:cancelled") == 0
    assert r.hget("tasks:counts", "cancelled") == b"2"


def test_a_handed_back_job_without_a_record_ends_cancelled(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def work() -> None:
        pass

    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    job = work.delay()
    [d] = broker.fetch("w:0:1", 1).deliveries
    assert job.cancel() == "requested"  # delivered: not in its stream's undelivered part
    Finisher(broker, Executor(app)).hand_back(d, owner="w:0:1")
    assert job.status().state == "cancelled"
    assert r.xlen("tasks:normal") == 0 and not broker.pending_of("w:0:1")


def test_a_job_with_no_trace_keeps_its_tombstone_a_week(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    assert app.job("f" * 32).cancel(terminate=True) == "requested"
    assert r.hget("tasks:cancelled", "f" * 32).endswith(b"|1")
    assert 6 * 86_400_000 < r.pttl("tasks:cancelled") <= 7 * 86_400_000


@pytest.mark.slow
def test_a_running_job_without_a_record_is_interrupted_with_terminate(
    task_app: App, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given a job of an app with results off, running on a real worker
    start_worker("-A", "tests.tasks", "-c", "1", "--loglevel", "info")
    job = tasks.sleepy.delay(30, "long")
    assert not job.stores_result
    wait_until(lambda: r.lrange("started", 0, -1) == [b"long"], 20, message="the job to start")
    # when it is cancelled with terminate=True
    assert job.cancel(terminate=True) == "requested"
    # then its worker interrupts it: it ends cancelled, and the worker runs the next job
    wait_until(lambda: job.status().state == "cancelled", 10, message="the job to end cancelled")
    assert r.hget("tasks:counts", "cancelled") == b"1"
    tasks.sleepy.delay(0, "next")
    wait_until(lambda: b"next" in r.lrange("started", 0, -1), 20, message="the next job")


@pytest.mark.slow
def test_an_async_job_without_a_record_cancelled_while_it_waits_never_starts(
    redis_url: str, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given async jobs of an app with results off, two running at their task's limit and a
    # third waiting behind them for a slot (delivered, out of its stream)
    async_tasks.app.settings = async_tasks.app.settings.replace(redis_url=redis_url)
    start_worker("-A", "tests.async_tasks", "-c", "1", "--loglevel", "info")
    for tag in ("a", "b"):
        async_tasks.limited.delay(3.0, tag)
    job = async_tasks.limited.delay(0, "c")
    held = f"tasks:held:{async_tasks.limited.name}"
    wait_until(lambda: r.zcard(held) == 1, 20, message="the third job to wait for a slot")
    # when it is cancelled there
    assert not job.stores_result and job.cancel() == "requested"
    # then the asyncio runner does not start it when a slot frees: it ends cancelled
    wait_until(lambda: job.status().state == "cancelled", 20, message="the job to end cancelled")
    wait_until(lambda: len(runs(r)) == 2, 10, message="the two running jobs to end")
    assert sorted(x["tag"] for x in runs(r)) == ["a", "b"]
    assert r.hlen("tasks:cancelled") == 0 and r.hget("tasks:counts", "cancelled") == b"1"
    async_tasks.app.close()


def test_a_cancel_appends_its_audit_entry_in_its_own_step(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def work() -> None:
        pass

    job = work.delay()
    with r.monitor() as monitor:
        assert job.cancel() == "cancelled"
        # (a cancel that finds nothing to remove is audited as before: 'requested')
        assert app.job("f" * 32).cancel() == "requested"
        audits: list[dict[str, str]] = []
        while len(audits) < 2:
            command = monitor.next_command()
            if command["command"].startswith("XADD tasks:audit"):
                audits.append(command)
    # then each entry was written by the cancel's script itself (in its step, not after it)
    assert [c["client_type"] for c in audits] == ["lua", "lua"]
    entries = read_audit(app.link, ["tasks"])
    assert [e.detail for e in entries] == [
        {"job_id": job.id, "terminate": False, "outcome": "cancelled"},
        {"job_id": "f" * 32, "terminate": False, "outcome": "requested"},
    ]
    assert {e.action for e in entries} == {"cancel"} and {e.user for e in entries} == {"default"}


@pytest.mark.slow
def test_a_running_async_job_without_a_record_is_interrupted_with_terminate(
    redis_url: str, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given a coroutine of an app with results off, running beside another one
    async_tasks.app.settings = async_tasks.app.settings.replace(redis_url=redis_url)
    start_worker("-A", "tests.async_tasks", "-c", "1", "--loglevel", "info")
    job, other = async_tasks.nap.delay(30, "long"), async_tasks.nap.delay(1, "other")
    wait_until(lambda: r.llen("started") == 2, 20, message="both to start")
    # when it is cancelled with terminate=True
    assert job.cancel(terminate=True) == "requested"
    # then only its coroutine is interrupted: it ends cancelled, the other one runs to its end
    wait_until(lambda: job.status().state == "cancelled", 10, message="the job to end cancelled")
    wait_until(lambda: len(runs(r)) == 1, 10, message="the other job to end")
    assert [x["job"] for x in runs(r)] == [other.id]
    assert r.hlen("tasks:cancelled") == 0
    async_tasks.app.close()
