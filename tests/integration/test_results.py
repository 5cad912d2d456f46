"""Results and job status (issue 13), against real Redis servers and real worker processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from click.testing import CliRunner

from taskq import App, Job, JobNotFound, ResultTimeout, TaskFailed
from taskq.broker import Broker
from taskq.broker.fetching import READ_APART_FROM
from taskq.cli import main
from taskq.errors import ConfigError
from taskq.keys import GROUP
from taskq.message import Message
from taskq.results import FINAL, Completion
from taskq.testing import drain
from tests import tasks
from tests.conftest import ROOT, WorkerProcess, runs, wait_until, worker_env
from tests.redis_server import RedisServer

StartWorker = Callable[..., WorkerProcess]

WATCH_LUA = """local s = redis.call('HGET', KEYS[1], 'state')
if s and s ~= 'succeeded' and s ~= 'failed' and s ~= 'cancelled' and s ~= 'expired' then
  redis.call('HSET', KEYS[1], 'waited', '1')
end
return redis.call('HGETALL', KEYS[1])"""
"""The waiter's registration of docs/protocol.md ("Status records"), as a foreign reader
sends it."""


def _worker(start_worker: StartWorker, *args: str, **env: str) -> WorkerProcess:
    return start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning", *args, **env)


def test_result_is_the_return_value(task_app: App, start_worker: StartWorker) -> None:
    jobs = [tasks.add.delay(i, i) for i in range(20)]
    assert all(j.stores_result for j in jobs)
    _worker(start_worker)
    assert [j.result(timeout=20) for j in jobs] == [2 * i for i in range(20)]
    assert jobs[0].status().state == "succeeded"
    assert jobs[0].status().attempts == 1


def test_failure_raises_task_failed_with_the_remote_error(
    task_app: App, start_worker: StartWorker
) -> None:
    job = tasks.fails_stored.delay("no such thing")
    _worker(start_worker)
    with pytest.raises(TaskFailed) as caught:
        job.result(timeout=20)
    e = caught.value
    assert (e.job_id, e.type) == (job.id, "KeyError")
    assert "no such thing" in e.message
    assert "fails_stored" in e.traceback and "KeyError" in e.traceback
    status = job.status()
    assert status.state == "failed"
    assert [a.error_type for a in status.errors] == ["KeyError"]


def test_unknown_task_and_bad_arguments_fail_the_result(
    task_app: App, start_worker: StartWorker
) -> None:
    # given a job of a task no worker knows, and one whose arguments do not fit (sent as
    # another producer would: apply_async refuses them)
    unknown = task_app.enqueue(Message("tests.tasks.nope", (), result_ttl_s=60))
    misfit = task_app.enqueue(Message("tests.tasks.add", (1, 2, 3), result_ttl_s=60))
    _worker(start_worker)
    with pytest.raises(TaskFailed) as caught:
        unknown.result(timeout=20)
    assert caught.value.type == "Rejected" and "nope" in caught.value.message
    with pytest.raises(TaskFailed) as caught:
        misfit.result(timeout=20)
    assert caught.value.type == "TypeError"


def test_timeout(task_app: App) -> None:
    job = tasks.add.delay(1, 2)
    with pytest.raises(ResultTimeout):
        job.result(timeout=0.2)
    assert job.status().state == "waiting"


def test_result_of_a_job_that_stores_none_is_refused(task_app: App) -> None:
    job = tasks.echo.delay("x")
    assert not job.stores_result
    with pytest.raises(ConfigError, match="does not store its result"):
        job.result(timeout=0.1)


def test_several_waiters_on_one_job(task_app: App, start_worker: StartWorker) -> None:
    job = tasks.slow_add.delay(20, 22, 0.2)
    got: list[Any] = []

    def wait() -> None:
        got.append(task_app.job(job.id).result(timeout=30))

    threads = [threading.Thread(target=wait) for _ in range(8)]
    for t in threads:
        t.start()
    _until_waited(task_app, job.id)
    _worker(start_worker)
    for t in threads:
        t.join(35)
    assert got == [42] * 8
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        assert c.lrange(f"tasks:done:{job.id}", 0, -1) == [b"succeeded"]


def _until_waited(app: App, job_id: str) -> None:
    """Until a waiter has registered in the job's record (``watch.lua``)."""
    with redis.Redis.from_url(app.settings.redis_url) as c:
        wait_until(lambda: c.hexists(f"tasks:job:{job_id}", "waited"), message="a waiter")


def test_only_a_job_someone_waits_for_writes_a_done_list(
    task_app: App, start_worker: StartWorker
) -> None:
    """The end pushes onto the done list only for a registered waiter, and a registered
    waiter is woken by that push, not by the end of its 5 s block (the job ends ~0.3 s
    after the worker starts)."""
    alone, waited = tasks.add.delay(1, 1), tasks.slow_add.delay(1, 2, 0.3)
    took: list[float] = []

    def wait() -> None:
        took.append(-1.0 if waited.result(timeout=30) != 3 else time.time())

    waiter = threading.Thread(target=wait)
    waiter.start()
    _until_waited(task_app, waited.id)
    _worker(start_worker)
    wait_until(lambda: alone.status().state in FINAL, timeout_s=20, message="the end")
    waiter.join(35)
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        assert (
            not c.exists(f"tasks:done:{alone.id}")
            and c.hget(f"tasks:job:{alone.id}", "state") == b"succeeded"
        )
        assert c.lrange(f"tasks:done:{waited.id}", 0, -1) == [b"succeeded"]
        finished_ms = int(c.hget(f"tasks:job:{waited.id}", "finished_ms") or 0)
    woke_after_s = took[0] - finished_ms / 1000  # (one machine: the same clock)
    assert -0.05 <= woke_after_s < 2.0  # well within one 5 s block


def test_a_waiter_survives_a_redis_sigkill_and_restart(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always")
    server.start()
    app = App(server.url, store_results=True)
    double = app.task(name="tests.results.double")(lambda x: 2 * x)
    try:
        job = double.delay(21)
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(job.result(timeout=60)))
        waiter.start()
        # given the waiter blocked in Redis, Redis dies and comes back from its AOF
        wait_until(lambda: _blocked_clients(server) == 1, message="the waiter to block")
        server.kill()
        server.start()
        # when a worker then runs the job, the waiter wakes with its result
        result = drain(app, timeout_s=20)
        assert result.ok == 1
        waiter.join(30)
        assert got == [42]
    finally:
        app.close()
        server.kill()


def _blocked_clients(server: RedisServer) -> int:
    with server.client() as c:
        return int(c.info("clients")["blocked_clients"])


def test_a_job_that_ran_twice_leaves_one_result(task_app: App) -> None:
    # given a job taken by consumer A, then claimed by B (as the sweep would) and run by both
    job = tasks.add.delay(1, 1)
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    [a] = broker.fetch("A", 1, fence_acks=False).deliveries
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        c.xclaim("tasks:normal", GROUP, "B", 0, [a.entry_id])
        c.eval(WATCH_LUA, 1, f"tasks:job:{job.id}")  # a waiter, so that the end pushes
        for consumer, value in (("B", 2), ("A", 3)):
            value_bytes = msgpack.packb(value)
            stored = Completion(job.id, True, 60_000, value_bytes, 1, 1.0, time.monotonic())
            other = Broker(broker.link, ["tasks"])
            other.fetch(consumer, 0, [a], completions={a: stored}, fence_acks=False)
        # then the first completion's result stands, and one done marker woke the waiters
        assert job.result(timeout=1) == 2
        assert c.lrange(f"tasks:done:{job.id}", 0, -1) == [b"succeeded"]


def test_fenced_acks_of_two_streams_end_only_the_records_of_the_jobs_still_held(
    task_app: App,
) -> None:
    # given jobs of two streams taken by A, one of each then claimed by B (as the sweep would)
    high = [tasks.add.apply_async((i, 10), priority="high") for i in range(2)]
    normal = [tasks.add.delay(i, 20) for i in range(2)]
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    taken = broker.fetch("A", 4, fence_acks=False).deliveries
    assert [d.record_id for d in taken] == [j.id for j in high + normal]
    lost = {(d.stream, d.entry_id) for d in (taken[0], taken[3])}  # (ids are per stream)
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        for stream, entry_id in lost:
            c.xclaim(stream, GROUP, "B", 0, [entry_id])
        # when A sends every ack, fenced, each with its result (acks of the two streams
        # interleaved, so that an ack's place differs from its place in its stream's XACK)
        acks = [taken[2], taken[0], taken[3], taken[1]]
        ends = {
            d: Completion(d.record_id or "", True, 60_000, msgpack.packb(i), 1, 1.0, 0.0)
            for i, d in enumerate(acks)
        }
        broker.fetch("A", 0, acks, completions=ends, fence_acks=True)
        # then the jobs A still held ended with their results and left A's pending list;
        # the two B holds kept their records open and stayed pending under B
        for i, d in enumerate(acks):
            record = c.hmget(f"tasks:job:{d.record_id}", "state", "result")
            if (d.stream, d.entry_id) in lost:
                assert record[0] != b"succeeded"
            else:
                assert record[0] == b"succeeded" and msgpack.unpackb(record[1]) == i
        pending = [
            (s, row["message_id"].decode(), row["consumer"].decode())
            for s in ("tasks:high", "tasks:normal")
            for row in c.xpending_range(s, GROUP, "-", "+", 10)
        ]
        assert sorted(pending) == sorted((s, e, "B") for s, e in lost)


def test_a_batch_fetch_after_recorded_jobs_ends_them_then_reads_in_priority_order(
    task_app: App,
) -> None:
    # given a batch of jobs that keep records, taken (so the next fetch carries their ends)
    first = tasks.add.starmap((i, 1) for i in range(READ_APART_FROM))
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    taken = broker.fetch("A", READ_APART_FROM, fence_acks=False).deliveries
    assert [d.record_id for d in taken] == [j.id for j in first]
    later = tasks.add.starmap((i, 2) for i in range(READ_APART_FROM))
    urgent = tasks.add.apply_async((0, 0), priority="high")
    # when the next batch fetch sends their acks and results
    ends = {
        d: Completion(d.record_id or "", True, 60_000, msgpack.packb(i + 1), 1, 1.0, 0.0)
        for i, d in enumerate(taken)
    }
    got = broker.fetch("A", READ_APART_FROM, taken, completions=ends, fence_acks=False)
    # then every job of the first batch ended with its result and left the pending list,
    # and the batch read the high stream first (a read of two streams may bring more than
    # asked: the consumer keeps the first ones and hands the rest back)
    assert [j.result(timeout=1) for j in first] == [i + 1 for i in range(READ_APART_FROM)]
    read = [d.record_id for d in got.deliveries]
    assert read[0] == urgent.id and read[1:] == [j.id for j in later][: len(read) - 1]
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        assert c.xpending("tasks:normal", GROUP)["pending"] == len(read) - 1


@pytest.mark.parametrize("countdown_s", [None, 0.05])
def test_a_caller_chosen_id_enqueued_again_starts_a_fresh_record(
    task_app: App, r: redis.Redis, countdown_s: float | None
) -> None:
    # given a job with a chosen id that ended, with a waiter's done list
    first = tasks.fails_stored.apply_async(("boom",), job_id="nightly")
    with pytest.raises(ResultTimeout):
        first.result(timeout=0.01)  # registers as a waiter: the end writes the done list
    drain(task_app, timeout_s=10)
    with pytest.raises(TaskFailed):
        first.result(timeout=1)
    assert r.exists("tasks:done:nightly")
    # when a new job is enqueued with that id (now, or with a countdown)
    again = tasks.add.apply_async((2, 3), job_id="nightly", countdown=countdown_s)
    # then it has a record of its own: no old attempts, no old end for waiters to wake on
    status = again.status()
    assert status.state in ("waiting", "scheduled") and status.attempts == 0
    assert not r.exists("tasks:done:nightly")
    with pytest.raises(ResultTimeout):
        again.result(timeout=0.2)
    drain(task_app, timeout_s=10, wait_for_retries=True)
    assert again.result(timeout=1) == 5


@pytest.mark.slow
def test_a_job_rerun_after_its_worker_froze_leaves_one_result(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # given a job running on worker A, whose processes all freeze
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "1500", "TASKQ_SWEEP_INTERVAL_MS": "500"}
    a = _worker(start_worker, **env)
    job = tasks.slow_add.delay(2, 3, 2.0)
    wait_until(lambda: r.llen("started") == 1, message="the job to start on A")
    os.killpg(a.pid, signal.SIGSTOP)
    try:
        # when B's sweep recovers it and B runs it to the end
        _worker(start_worker, **env)
        assert job.result(timeout=30) == 5
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    # then A finishes its run too, and its fenced ack stores nothing
    wait_until(lambda: len(runs(r)) == 2, timeout_s=15, message="A's run to finish")
    assert job.result(timeout=1) == 5
    assert r.lrange(f"tasks:done:{job.id}", 0, -1) == [b"succeeded"]
    status = job.status()
    assert status.attempts == 2
    assert [e.error_type for e in status.errors] == ["WorkerLost"]


def test_status_waiting_running_retrying_succeeded(
    task_app: App, start_worker: StartWorker
) -> None:
    job = tasks.fails_then_adds.delay(3, 4, 0.5)
    assert job.status().state == "waiting"
    _worker(start_worker)
    running = wait_until(lambda: _state(job, "running"), message="running")
    assert running.attempts == 1 and running.worker and running.started_ms
    retrying = wait_until(lambda: _state(job, "retrying"), message="retrying")
    assert retrying.due_ms is not None and retrying.attempts == 1
    assert [e.error_type for e in retrying.errors] == ["Retry"]
    assert job.result(timeout=20) == 7
    done = job.status()
    assert (done.state, done.attempts, done.worker) == ("succeeded", 2, None)
    assert done.enqueued_ms is not None and done.started_ms is not None
    assert done.finished_ms is not None
    assert done.enqueued_ms <= done.started_ms <= done.finished_ms
    assert (done.args, dict(done.kwargs or {})) == ((3, 4, 0.5), {})


def test_a_job_taken_reads_as_running_before_its_master_marks_it(task_app: App) -> None:
    """The take writes nothing to the record; the status read finds the pending entry."""
    job = tasks.add.delay(1, 2)
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        before = c.hgetall(f"tasks:job:{job.id}")
        broker = task_app.broker_for(["tasks"])
        broker.ensure_groups()
        [taken] = broker.fetch("w1:0:123", 1, fence_acks=False).deliveries
        assert taken.record_id == job.id
        assert c.hgetall(f"tasks:job:{job.id}") == before  # (state waiting)
        s = job.status()
        seconds, micros = c.time()
    assert (s.state, s.worker, s.attempts) == ("running", "w1:0:123", 1)
    assert s.started_ms is not None and 0 <= seconds * 1000 + micros // 1000 - s.started_ms < 5000


def test_the_master_marks_a_running_job_in_its_record(
    task_app: App, start_worker: StartWorker
) -> None:
    job = tasks.slow_add.delay(1, 2, 3.0)
    _worker(start_worker)
    key = f"tasks:job:{job.id}"
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        wait_until(lambda: c.hget(key, "state") == b"running", message="the master's mark")
        record = c.hgetall(key)
        seconds, micros = c.time()
        [pending] = c.xpending_range("tasks:normal", GROUP, "-", "+", 10)
        assert pending["message_id"].decode() == job.entry_id
        assert record[b"worker"] == pending["consumer"]  # the child that runs it
        started_ms = int(record[b"started_ms"])
        assert 0 <= seconds * 1000 + micros // 1000 - started_ms < 3000
        running = job.status()
        assert (running.state, running.started_ms, running.attempts) == ("running", started_ms, 1)
    assert job.result(timeout=20) == 3


def _state(job: Any, state: str) -> Any:
    s = job.status()
    return s if s.state == state else None


def test_status_of_a_scheduled_job(task_app: App) -> None:
    job = tasks.add.apply_async((1, 2), countdown=60)
    s = job.status()
    assert s.state == "scheduled"
    assert s.due_ms is not None and s.enqueued_ms is not None
    assert 59_000 <= s.due_ms - s.enqueued_ms <= 61_000


def test_unknown_job(task_app: App) -> None:
    handle = task_app.job("0" * 32)
    assert handle.status().state == "unknown"
    with pytest.raises(ConfigError, match="invalid job id"):
        task_app.job("has spaces")


def test_records_expire(task_app: App, start_worker: StartWorker, r: redis.Redis) -> None:
    job = tasks.short_lived.delay(9)
    _worker(start_worker)
    assert job.result(timeout=20) == 9
    assert 0 < r.pttl(f"tasks:job:{job.id}") <= 1000
    assert 0 < r.pttl(f"tasks:done:{job.id}") <= 1000
    wait_until(lambda: job.status().state == "unknown", timeout_s=5, message="expiry")
    with pytest.raises(JobNotFound):
        job.result(timeout=1)


def test_forget(task_app: App) -> None:
    job = tasks.add.delay(1, 1)
    drain(task_app)
    assert job.result(timeout=1) == 2
    assert job.forget()
    assert job.status().state == "unknown"


def test_result_of_a_forgotten_job_from_its_id(task_app: App) -> None:
    # given a job whose record was forgotten, then a handle made from its id alone
    job = tasks.add.delay(1, 1)
    drain(task_app)
    assert job.forget()
    handle = task_app.job(job.id)
    # then result() says Redis has no record of it, as for an expired record
    with pytest.raises(JobNotFound, match=job.id):
        handle.result(timeout=1)
    assert handle.status().state == "unknown"


def test_every_record_key_has_a_ttl(task_app: App, start_worker: StartWorker) -> None:
    ended = [
        tasks.add.delay(1, 2),
        tasks.fails_stored.delay("x"),
        task_app.enqueue(tasks.add.message((1,), {})),
    ]
    tasks.add.apply_async((5, 5), countdown=30)

    def wait(job: Job) -> None:
        with contextlib.suppress(TaskFailed):
            job.result(timeout=30)

    waiters = [threading.Thread(target=wait, args=(j,)) for j in ended]
    for t in waiters:
        t.start()
    for j in ended:
        _until_waited(task_app, j.id)
    _worker(start_worker)
    for t in waiters:
        t.join(35)
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        keys = [k for k in c.keys("tasks:*") if b":job:" in k or b":done:" in k]
        assert len(keys) == 7  # 4 records, 3 done lists (each job was waited for)
        assert all(c.pttl(k) > 0 for k in keys)


def test_job_handle_from_another_process(task_app: App, start_worker: StartWorker) -> None:
    job = tasks.add.delay(40, 2)
    _worker(start_worker)
    code = "import sys; from taskq import App; print(App().job(sys.argv[1]).result(timeout=20))"
    out = subprocess.run(
        [sys.executable, "-c", code, job.id],
        env=worker_env(task_app.settings.redis_url),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "42"


def test_results_off_writes_no_per_job_keys(task_app: App, r: redis.Redis) -> None:
    # given jobs of tasks that store no results: plain, failing, delayed and retried
    for i in range(5):
        tasks.echo.delay(i)
    tasks.rejects.delay("x")
    tasks.flaky.delay(2)
    tasks.echo.apply_async(("later",), countdown=0.05)
    drain(task_app, wait_for_retries=True, timeout_s=20)
    keys = {k.decode() for k in r.keys("*")}
    assert not [k for k in keys if ":job:" in k or ":done:" in k]
    assert keys <= {
        "tasks:high",
        "tasks:normal",
        "tasks:low",
        "tasks:deadletter",
        "runs",
    }


def test_a_result_readable_with_plain_redis_and_msgpack(task_app: App) -> None:
    job = tasks.add.delay(2, 2)
    with redis.Redis.from_url(task_app.settings.redis_url) as c:
        seen = c.eval(WATCH_LUA, 1, f"tasks:job:{job.id}")  # registered, not ended yet
        assert dict(zip(seen[::2], seen[1::2], strict=True))[b"state"] == b"waiting"
        drain(task_app)
        record = c.hgetall(f"tasks:job:{job.id}")
        assert record[b"state"] == b"succeeded"
        assert msgpack.unpackb(record[b"result"]) == 4
        assert msgpack.unpackb(record[b"args"]) == [[2, 2], {}]
        assert record[b"task"] == b"tests.tasks.add" and record[b"attempts"] == b"1"
        assert c.blmove(f"tasks:done:{job.id}", f"tasks:done:{job.id}", 1, "LEFT", "LEFT")


def test_results_that_cannot_be_stored_fail_the_job(
    task_app: App, start_worker: StartWorker
) -> None:
    obj = tasks.returns_object.delay()
    big = tasks.returns_bytes.delay(task_app.settings.max_result_bytes + 1)
    fine = tasks.returns_bytes.delay(10)
    _worker(start_worker)
    with pytest.raises(TaskFailed) as caught:
        obj.result(timeout=20)
    assert caught.value.type == "UnserializableResult" and "object" in caught.value.message
    with pytest.raises(TaskFailed) as caught:
        big.result(timeout=20)
    assert caught.value.type == "ResultTooLarge" and "max_result_bytes" in caught.value.message
    assert fine.result(timeout=20) == b"x" * 10  # the child lived on


def test_app_wide_results_and_ttl(make_app: Callable[..., App]) -> None:
    app = make_app(store_results=True, result_ttl_s=120)
    square = app.task(name="tests.results.square")(lambda x: x * x)
    off = app.task(name="tests.results.off", store_result=False)(lambda: None)
    job = square.delay(7)
    assert not off.delay().stores_result
    drain(app)
    assert job.result(timeout=1) == 49
    with redis.Redis.from_url(app.settings.redis_url) as c:
        assert 110_000 < c.pttl(f"tasks:job:{job.id}") <= 120_000


def test_delayed_and_bulk_jobs_store_results(task_app: App) -> None:
    later = tasks.add.apply_async((1, 1), countdown=0.05)
    many = tasks.add.starmap((i, 1) for i in range(50))
    drain(task_app, wait_for_retries=True, timeout_s=20)
    assert later.result(timeout=1) == 2
    assert [j.result(timeout=1) for j in many] == [i + 1 for i in range(50)]


def test_a_retried_dead_letter_is_waited_on_again(task_app: App) -> None:
    job = tasks.fails_stored.delay("once")
    drain(task_app)
    assert job.status().state == "failed"
    from taskq.ops.deadletters import Deadletters

    moved, _ = Deadletters.for_app(task_app, "tasks").retry(None)
    assert moved == 1
    assert job.status().state == "waiting"
    with pytest.raises(ResultTimeout):
        job.result(timeout=0.1)
    drain(task_app)
    with pytest.raises(TaskFailed):
        job.result(timeout=1)
    assert [e.attempt for e in job.status().errors] == [1]


def test_eager_mode_returns_results(make_app: Callable[..., App]) -> None:
    app = make_app(eager=True)
    pair = app.task(name="tests.results.pair", store_result=True)(lambda a, b: (a, b))
    plain = app.task(name="tests.results.plain")(lambda: "value")
    job = pair.delay(1, 2)
    assert job.result() == (1, 2)  # as a worker would store it: a tuple stays a tuple
    assert job.status().state == "succeeded"
    assert plain.delay().result() == "value"


# -- taskq job ----------------------------------------------------------------------------


def _cli(url: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["-A", "tests.tasks", "--redis-url", url, *args])


def test_cli_job_shows_status_and_result(task_app: App) -> None:
    url = task_app.settings.redis_url
    job = tasks.fails_then_adds.delay(1, 2, 0.0)
    drain(task_app, wait_for_retries=True, timeout_s=20)
    out = _cli(url, "job", job.id)
    assert out.exit_code == 0, out.output
    assert f"job {job.id}: succeeded" in out.output
    assert "tests.tasks.fails_then_adds" in out.output and "(1, 2, 0.0)" in out.output
    assert "attempt 1 failed" in out.output and "Retry" in out.output
    assert "result    3" in out.output
    data = json.loads(_cli(url, "job", job.id, "--json").output)
    assert (data["state"], data["result"], data["attempts"]) == ("succeeded", 3, 2)
    assert data["errors"][0]["error_type"] == "Retry"


def test_cli_job_wait_exit_codes(task_app: App, start_worker: StartWorker) -> None:
    url = task_app.settings.redis_url
    ok, bad, slow = tasks.add.delay(1, 1), tasks.fails_stored.delay("x"), tasks.add.delay(0, 0)
    out = _cli(url, "job", slow.id, "--wait", "--timeout", "0.2")
    assert out.exit_code == 2 and "still waiting" in out.output
    _worker(start_worker)
    assert _cli(url, "job", ok.id, "--wait", "--timeout", "20").exit_code == 0
    failed = _cli(url, "job", bad.id, "--wait", "--timeout", "20")
    assert failed.exit_code == 1 and "KeyError" in failed.output


def test_cli_job_errors_are_one_line(task_app: App) -> None:
    url = task_app.settings.redis_url
    out = _cli(url, "job", "bad id")
    assert out.exit_code != 0 and "invalid job id" in out.output
    assert "Traceback" not in out.output
    missing = _cli(url, "job", "f" * 32)
    assert missing.exit_code == 1 and "no record of job" in missing.output
    down = _cli("redis://127.0.0.1:1/0", "job", "f" * 32)
    assert down.exit_code == 1 and "cannot reach Redis" in down.output
    assert len(down.output.strip().splitlines()) == 1
