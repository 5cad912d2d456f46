"""Cancellation and expiry (issue 15, parts 4 and 5), against a real Redis and real workers:
waiting, scheduled, retrying and running jobs; across a worker restart; workflows; expiry."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
import redis
from click.testing import CliRunner

from taskq import App, JobCancelled, JobExpired, chain, chord, group
from taskq.cli import main
from taskq.errors import ConfigError
from taskq.job import Flow, Job
from taskq.keys import GROUP
from taskq.worker import cancels
from taskq.worker.aio import serve
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]


def _worker(start_worker: StartWorker, *args: str) -> WorkerProcess:
    return start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "info", *args)


def _ran(r: redis.Redis, job_id: str) -> bool:
    return any(run["job"] == job_id for run in runs(r))


def _sentinel_ran(r: redis.Redis) -> None:
    """Run a job through the worker and wait for it: the worker has been past the jobs
    enqueued before it (it reads in order)."""
    tasks.add.delay(0, 0).result(timeout=20)


def test_a_waiting_job_is_removed_and_never_runs(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job, kept = tasks.add.delay(1, 2), tasks.add.delay(3, 4)
    assert job.cancel() == "cancelled"
    assert job.status().state == "cancelled"
    assert job.cancel() == "cancelled"  # again: it had ended so
    _worker(start_worker)
    assert kept.result(timeout=20) == 7
    _sentinel_ran(r)
    assert not _ran(r, job.id)
    with pytest.raises(JobCancelled) as caught:
        job.result(timeout=1)
    assert caught.value.job_id == job.id and caught.value.type == "JobCancelled"
    assert r.hget("tasks:counts", "cancelled") == b"1"


def test_a_scheduled_job_is_removed_from_the_schedule(task_app: App, r: redis.Redis) -> None:
    job, other = (
        tasks.add.apply_async((1, 2), countdown=60),
        tasks.add.apply_async((5, 5), countdown=60),
    )
    assert job.status().state == "scheduled"
    assert job.cancel() == "cancelled"
    assert r.zcard("tasks:schedule") == 1  # only the other one is left
    assert other.status().state == "scheduled"
    assert job.status().state == "cancelled"


def test_a_retrying_job_is_removed_from_its_retry_set(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job = tasks.retry_later.delay(60)
    _worker(start_worker)
    wait_until(
        lambda: job.status().state == "retrying", 20, message="the job to wait out its retry"
    )
    assert r.zcard("tasks:retry:normal") == 1
    assert job.cancel() == "cancelled"
    assert r.zcard("tasks:retry:normal") == 0
    assert job.status().state == "cancelled"
    assert r.xlen("tasks:deadletter") == 0


def test_a_running_job_is_left_alone_without_terminate(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job = tasks.slow_add.delay(2, 3, 1.0)
    _worker(start_worker)
    wait_until(lambda: job.status().state == "running", 20, message="the job to start")
    assert job.cancel() == "running"
    assert job.result(timeout=20) == 5


def test_terminate_interrupts_a_running_job_which_is_neither_retried_nor_dead(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job = tasks.slow_add.delay(2, 3, 30.0)
    w = _worker(start_worker)
    wait_until(lambda: r.lrange("started", 0, -1) == [job.id.encode()], 20, message="the start")
    assert job.cancel(terminate=True) == "terminating"
    with pytest.raises(JobCancelled):
        job.result(timeout=20)
    assert job.status().state == "cancelled"
    assert not _ran(r, job.id)  # slow_add records only after its sleep: it never got there
    assert r.xlen("tasks:deadletter") == 0 and r.zcard("tasks:retry:normal") == 0
    _sentinel_ran(r)
    assert r.lrange("started", 0, -1) == [job.id.encode()]  # it did not run again
    assert "cancelled: interrupting it" in w.output()


@pytest.mark.slow
def test_a_job_that_ignores_the_interruption_has_its_child_killed(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job = tasks.holds_on.delay(60.0)
    w = _worker(start_worker)
    wait_until(lambda: r.lrange("started", 0, -1) == [job.id.encode()], 20, message="the start")
    assert job.cancel(terminate=True) == "terminating"
    wait_until(lambda: any(x.get("tag") == "holds_on_caught" for x in runs(r)), 10)
    with pytest.raises(JobCancelled):
        job.result(timeout=30)  # after the grace, SIGKILL; the master settles it as cancelled
    assert "did not stop when cancelled" in w.output()
    assert r.xlen("tasks:deadletter") == 0 and r.zcard("tasks:retry:normal") == 0
    assert tasks.add.delay(1, 1).result(timeout=20) == 2  # the child was replaced


@pytest.mark.slow
def test_a_cancel_outlives_the_worker_that_ran_the_job(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job = tasks.slow_add.delay(2, 3, 30.0)
    first = _worker(start_worker)
    wait_until(lambda: r.lrange("started", 0, -1) == [job.id.encode()], 20, message="the start")
    first.kill_all()  # the job stays pending under a dead worker
    assert job.cancel(terminate=True) == "terminating"
    _worker(start_worker)  # its sweep recovers the job: cancelled, not retried
    with pytest.raises(JobCancelled):
        job.result(timeout=30)
    assert r.lrange("started", 0, -1) == [job.id.encode()]
    assert r.xlen("tasks:deadletter") == 0


def test_cancelling_a_workflow_cancels_the_steps_not_run(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    flow = chain(tasks.add.s(1, 2), tasks.square.s(), tasks.tsum.si([1])).apply_async()
    outcomes = flow.cancel()
    assert list(outcomes.values()) == ["cancelled"] * 3
    _worker(start_worker)
    _sentinel_ran(r)
    with pytest.raises(JobCancelled):
        flow.result(timeout=5)
    assert [x for x in runs(r) if x["job"] in outcomes] == []


def test_a_later_step_cancelled_alone_stops_the_chain_there(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    first = tasks.add.s(1, 2)
    flow = chain(first, tasks.square.s(), tasks.tsum.si([1])).apply_async()
    steps = task_app.records.flow_steps(flow.queue, flow.id)
    second_id = steps[1][0]
    assert task_app.job(second_id).cancel() == "cancelled"
    _worker(start_worker)
    with pytest.raises(JobCancelled):
        flow.result(timeout=20)
    assert task_app.job(steps[0][0]).result(timeout=5) == 3  # the first step ran
    assert task_app.job(steps[2][0]).status().state == "cancelled"  # ended with the second


def test_a_waiting_first_step_cancelled_alone_ends_the_whole_chain(task_app: App) -> None:
    # given a chain of three whose first step waits in its stream
    flow = chain(tasks.add.s(1, 2), tasks.square.s(), tasks.tsum.si([1])).apply_async()
    first, second, third = (s[0] for s in task_app.records.flow_steps(flow.queue, flow.id))
    # when only that step is cancelled
    assert task_app.job(first).cancel() == "cancelled"
    # then the steps after it end with it, and the workflow's result answers at once
    assert [task_app.job(j).status().state for j in (second, third)] == ["cancelled"] * 2
    with pytest.raises(JobCancelled):
        flow.result(timeout=1)


def test_a_job_not_started_before_it_expires_does_not_run(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    stale, fresh = (
        tasks.add.apply_async((1, 1), expires=past),
        tasks.add.apply_async((2, 2), expires=600),
    )
    untracked = tasks.echo.apply_async(("late",), expires=past)
    _worker(start_worker)
    assert fresh.result(timeout=20) == 4
    with pytest.raises(JobExpired) as caught:
        stale.result(timeout=20)
    assert caught.value.type == "JobExpired"
    assert stale.status().state == "expired"
    wait_until(lambda: r.hget("tasks:counts", "expired") == b"2", 20, message="both counted")
    assert not _ran(r, stale.id) and not _ran(r, untracked.id)
    assert r.xlen("tasks:deadletter") == 0
    result = CliRunner().invoke(main, ["-A", "tests.tasks", "inspect", "--json"])
    assert result.exit_code == 0, result.output
    queue = next(q for q in json.loads(result.output)["queues"] if q["queue"] == "tasks")
    assert queue["expired"] == 2 and queue["cancelled"] == 0


def test_a_job_that_expires_in_its_batch_behind_a_long_job_does_not_run(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # One child takes both jobs in one fetch and decodes them together; the second expires
    # while the first runs, and is checked again at its turn.
    long = tasks.sleepy.delay(1.5, "long")
    soon = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    late = tasks.add.apply_async((3, 3), expires=soon)
    start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "2")
    with pytest.raises(JobExpired):
        late.result(timeout=20)
    assert late.status().state == "expired"
    assert _ran(r, long.id) and not _ran(r, late.id)


def test_cancel_on_the_command_line(task_app: App, r: redis.Redis) -> None:
    job = tasks.add.delay(1, 2)
    result = CliRunner().invoke(main, ["-A", "tests.tasks", "job", "cancel", job.id])
    assert result.exit_code == 0, result.output
    assert f"{job.id}: cancelled" in result.output
    again = CliRunner().invoke(main, ["-A", "tests.tasks", "job", "cancel", job.id])
    assert again.exit_code == 0 and f"{job.id}: cancelled" in again.output  # idempotent
    shown = CliRunner().invoke(main, ["-A", "tests.tasks", "job", job.id, "--json"])
    assert shown.exit_code == 1 and json.loads(shown.output)["state"] == "cancelled"
    # a job with no record anywhere: its tombstone waits for it
    unknown = CliRunner().invoke(main, ["-A", "tests.tasks", "job", "cancel", "0" * 32])
    assert unknown.exit_code == 0 and f"{'0' * 32}: requested" in unknown.output


def test_bad_input(task_app: App) -> None:
    with pytest.raises(ConfigError, match="expires"):
        tasks.add.apply_async((1, 2), expires="soon")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expires"):
        tasks.add.apply_async((1, 2), expires=float("nan"))
    assert tasks.echo.delay("x").cancel() == "cancelled"  # results off: found by its id


@pytest.mark.slow
def test_jobs_cancelled_in_a_childs_batch_never_start(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given a child that fetched eight jobs in one batch and runs the first
    jobs = [tasks.slow_add.delay(i, 0, 1.0 if i == 0 else 0.2) for i in range(8)]
    start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "8")
    wait_until(lambda: r.lrange("started", 0, -1) == [jobs[0].id.encode()], 20, message="job 0")
    assert r.xpending("tasks:normal", GROUP)["pending"] == 8
    # when five jobs still waiting in the batch are cancelled with terminate=True
    assert [j.cancel(terminate=True) for j in jobs[3:]] == ["terminating"] * 5
    # then they never start and end cancelled; the others run
    assert [j.result(timeout=20) for j in jobs[:3]] == [0, 1, 2]
    for j in jobs[3:]:
        with pytest.raises(JobCancelled):
            j.result(timeout=20)
        assert j.status().state == "cancelled"
    started = {x.decode() for x in r.lrange("started", 0, -1)}
    assert started == {j.id for j in jobs[:3]}


def test_a_job_cancelled_in_its_batch_never_starts_in_process(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given one consumer's batch of three recorded jobs, whose first cancels the other two
    app = make_app(queue="batch", store_results=True)
    later: list[Job] = []
    ran: list[int] = []

    @app.task
    def first() -> None:
        assert [j.cancel(terminate=True) for j in later] == ["terminating"] * 2

    @app.task
    def after(n: int) -> None:
        ran.append(n)

    first.delay()
    later += [after.delay(1), after.delay(2)]
    monkeypatch.setattr(cancels, "START_CHECK_HOLDS_S", 0.0)  # read again at every turn
    broker = app.broker_for(["batch"])
    options = ConsumerOptions(prefetch=8, burst=True)
    serve(Consumer(broker, Executor(app), name="w:0:1", options=options))
    # then neither started, and both ended cancelled
    assert ran == []
    assert [j.status().state for j in later] == ["cancelled", "cancelled"]


def test_a_job_cancelled_in_a_batch_that_is_handed_back_ends_cancelled(
    task_app: App, r: redis.Redis
) -> None:
    # given a job a child fetched, cancelled with terminate=True before its turn
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    job = tasks.add.delay(1, 2)
    [d] = broker.fetch("w:0:1", 1).deliveries
    assert job.cancel(terminate=True) == "terminating"
    # when its batch goes back (revoked, the child stopping or dying), it ends cancelled
    Finisher(broker, Executor(task_app)).hand_back(d, owner="w:0:1")
    assert job.status().state == "cancelled"
    assert r.xlen("tasks:normal") == 0 and not broker.pending_of("w:0:1")


def _chord_of_two() -> Flow:
    header = group(tasks.add.s(1, 1), tasks.add.s(2, 2))
    return chord(header, tasks.tsum.s()).on_error(tasks.errback.s()).apply_async()


def test_cancelling_a_chord_cancels_its_header_jobs_too(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given a chord whose header jobs wait in their stream
    flow = _chord_of_two()
    # when the workflow is cancelled
    outcomes = flow.cancel()
    # then its body and both header jobs end as cancelled, none runs, no errback starts
    assert list(outcomes.values()) == ["cancelled"] * 3
    assert r.xlen("tasks:normal") == 0
    _worker(start_worker)
    _sentinel_ran(r)
    assert [x for x in runs(r) if x["job"] in outcomes or x.get("tag") == "errback"] == []
    with pytest.raises(JobCancelled):
        flow.result(timeout=5)


def test_a_header_job_cancelled_alone_ends_the_chord_body(task_app: App) -> None:
    flow = _chord_of_two()
    steps = [job_id for job_id, _queue in task_app.records.flow_steps(flow.queue, flow.id)]
    headers = [job_id for job_id in steps if job_id != flow.jobs[0].id]
    assert len(headers) == 2
    assert task_app.job(headers[0]).cancel() == "cancelled"
    assert flow.status().state == "cancelled"  # the body will never get its header's result
    with pytest.raises(JobCancelled):
        flow.result(timeout=1)


def test_a_cancel_while_running_starts_no_error_callback(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given a running job with an error callback
    running = tasks.slow_add.apply_async((2, 3, 30.0), link_error=tasks.errback.s())
    _worker(start_worker)
    wait_until(lambda: r.lrange("started", 0, -1) == [running.id.encode()], 20, message="start")
    # when it is cancelled with terminate=True, and then another job fails for good
    assert running.cancel(terminate=True) == "terminating"
    with pytest.raises(JobCancelled):
        running.result(timeout=20)
    failing = tasks.fails_stored.apply_async(("boom",), link_error=tasks.errback.s())
    # then only the failure started its error callback: a cancel is what its caller chose
    wait_until(lambda: [x for x in runs(r) if x.get("tag") == "errback"], 20, message="errback")
    _sentinel_ran(r)
    assert [x["failed"] for x in runs(r) if x.get("tag") == "errback"] == [failing.id]


def test_a_cancel_releases_only_a_lock_of_its_own_queue(task_app: App, r: redis.Redis) -> None:
    # given a waiting job whose record (which whoever may write the queue can write) names a
    # key that is not a lock of its queue, holding the job's id
    job = tasks.add.delay(1, 1)
    r.set("victim", job.id)
    r.hset(f"tasks:job:{job.id}", "unique", "victim")
    # when it is cancelled, then it ends and that key stays
    assert job.cancel() == "cancelled"
    assert r.get("victim") == job.id.encode()
