"""Failure modes found in review: outages mid-loop, shutdown leases, poison members, OOM."""

from __future__ import annotations

import signal
from collections.abc import Callable

import msgpack
import pytest
import redis

from taskq import App, BrokerRefused, keys
from taskq.message import Message
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]


def _idle(r: redis.Redis) -> bool:
    clients = r.client_list()
    return any(c.get("cmd") == "xreadgroup" for c in clients)


def test_dropped_connections_do_not_run_jobs_twice(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "3")
    wait_until(lambda: _idle(r), message="the worker to block in XREADGROUP")
    r.client_kill_filter(_type="normal", skipme=True)  # cut every worker connection
    tasks.echo.map(range(3))
    wait_until(lambda: r.llen("runs") >= 3, message="3 runs")
    # An empty stream holds no entry, pending or waiting: a copy that could run again
    # (handed back, or still running) would be an entry of it.
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="acks")
    assert sorted(x["value"] for x in runs(r)) == [0, 1, 2]
    assert "Traceback" not in w.output()


@pytest.mark.slow
def test_warm_shutdown_keeps_leases_so_no_other_worker_steals_the_job(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "2000", "TASKQ_SWEEP_INTERVAL_MS": "200"}
    a = start_worker("-A", "tests.tasks", "-c", "1", "--grace", "20", **env)
    tasks.sleepy.delay(5.0, tag="long")
    wait_until(lambda: r.llen("started") == 1, message="the job to start")
    start_worker("-A", "tests.tasks", "-c", "1", **env)  # a sweeper that would steal it
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0
    # Had the other worker stolen the job, A's (fenced) ack would have been refused and the
    # entry would stay until the thief's run ended: once the stream is empty, every run that
    # will happen has happened.
    wait_until(lambda: r.xlen("tasks:normal") == 0, timeout_s=15, message="the job acked")
    assert [x["tag"] for x in runs(r)] == ["long"]
    assert r.xlen("tasks:deadletter") == 0


def test_malformed_schedule_member_is_dead_lettered_and_jobs_keep_flowing(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    r.zadd("tasks:schedule", {b"9\nbogus": 0, b"no newline at all": 0})
    tasks.echo.apply_async(("after",), countdown=0.2)
    tasks.echo.delay("now")
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.llen("runs") == 2, message="both good jobs")
    dead = r.xrange("tasks:deadletter")
    assert len(dead) == 2
    assert all(b"malformed schedule member" in f[b"error"] for _, f in dead)
    assert r.zcard("tasks:schedule") == 0


def test_hand_back_keeps_the_stream_and_unknown_fields(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # A foreign producer's job on the high stream, without "priority", with an extension field.
    body = msgpack.packb(
        {"v": 1, "id": "ext-1", "task": "tests.tasks.sleepy", "args": [30], "x_trace": "abc"}
    )
    r.xadd("tasks:high", {"task": "tests.tasks.sleepy", "body": body})
    w = start_worker("-A", "tests.tasks", "-c", "1", "--grace", "0.3")
    wait_until(lambda: r.llen("started") == 1, message="the job to start")
    w.signal(signal.SIGTERM)
    w.wait(20)
    [(_, fields)] = r.xrange("tasks:high")
    back = msgpack.unpackb(fields[b"body"], raw=False)
    assert back["x_trace"] == "abc" and back["id"] == "ext-1" and back["retries"] == 0


def test_a_redis_out_of_memory_makes_workers_wait_not_crash(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a job that will fail, so its worker must write (park it) while Redis is full.
    tasks.always_fails.delay("oom")
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "1")
    try:
        w = start_worker("-A", "tests.tasks", "-c", "1")
        wait_until(lambda: "Redis unavailable" in w.output(), message="the OOM to be noticed")
    finally:
        r.config_set("maxmemory", "0")
    # Then: once Redis has room again the job's fate is recorded, and nothing crashed.
    wait_until(
        lambda: r.xlen("tasks:deadletter") + r.zcard("tasks:retry:normal") == 1,
        message="the job to be parked or dead-lettered",
    )
    assert "crashed" not in w.output() and "died" not in w.output()


# -- found in the hardening review (issue 10): the suspected faults, each confirmed or ruled
# -- out by a test -------------------------------------------------------------------------


def test_a_worker_with_another_visibility_timeout_is_refused_at_start(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Workers that disagree about the lease length could sweep (and then ack, unfenced)
    each other's running jobs. The first worker claims its timeout for the queue."""
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.get("tasks:visibility") == b"3000", message="the claimed timeout")
    other = start_worker("-A", "tests.tasks", "-c", "1", TASKQ_VISIBILITY_TIMEOUT_MS="9000")
    assert other.wait(20) == 1
    assert "visibility_timeout_ms=3000" in other.output()
    assert "Traceback" not in other.output()


def test_renew_and_fenced_acks_cover_more_than_a_thousand_pending_entries(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    """Suspected: only the first 1,000 pending entries of a consumer were renewed and
    fenced. Also caught: renewal XCLAIMed only the first entry of each page at all."""
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


def _pending(r: redis.Redis) -> list[dict[str, object]]:
    return list(r.xpending_range("tasks:normal", "taskq", "-", "+", 5000))


def test_a_script_refuses_bad_arguments_before_writing_anything(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    """Suspected: park.lua XCLAIMed, then failed on a non-numeric due time, leaving the job
    owned by the retry consumer with no due time. Scripts validate before they write."""
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


def test_retry_with_a_bad_countdown_is_an_ordinary_failure(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.bad_retry.delay()
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="the dead letter")
    [(_, dead)] = r.xrange("tasks:deadletter")
    assert dead[b"error_type"] == b"ConfigError" and b"countdown" in dead[b"error"]
    assert [x["attempt"] for x in runs(r)] == [1, 2, 3]


def test_worker_ids_differ_for_the_same_host_and_pid() -> None:
    """Suspected: ``host:pid`` collided across containers with their own PID namespace and
    the same host name, so one master handed back another's live jobs."""
    ids = {keys.worker_id("web", 1) for _ in range(50)}
    assert len(ids) == 50
    assert all(keys.worker_of(keys.consumer_name(i, 0, 7)) == i for i in ids)
