"""Retries through the pending list, crash recovery, dead letters, delayed jobs, bad input,
and due times taken from the Redis clock rather than the caller's."""

from __future__ import annotations

import contextlib
import importlib
import math
import time
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taskq
from taskq import App
from taskq.keys import GROUP, RECOVER_CONSUMER
from taskq.message import Message
from taskq.testing import drain
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]


def dead_entries(r: redis.Redis, queue: str = "tasks") -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        for _id, fields in r.xrange(f"{queue}:deadletter")
    ]


DEAD_CONSUMER = "deadhost:1:0:1"
"""A child consumer of a worker on another host that vanished (nobody renews its leases)."""
FAULT_LINES = ("crashed", "maintenance step failed", "Traceback")
"""Worker log lines that mean a child or the master hit a bug."""


def hand_made_job(r: redis.Redis, task: str, *, job_id: str, **fields: Any) -> str:
    """XADD a job written with plain msgpack, as docs/protocol.md describes; returns its id."""
    body = msgpack.packb({"v": 1, "id": job_id, "task": task, "args": [], **fields})
    return str(r.xadd("tasks:normal", {"task": task, "body": body}).decode())


def faults(w: WorkerProcess) -> list[str]:
    return [line for line in w.output().splitlines() if any(f in line for f in FAULT_LINES)]


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def take_as_dead_consumer(r: redis.Redis, job: taskq.Job, *, idle_ms: int = 0) -> None:
    """Leave ``job`` pending under a consumer that vanished, idle for ``idle_ms`` already."""
    with contextlib.suppress(redis.ResponseError):  # BUSYGROUP
        r.xgroup_create("tasks:normal", GROUP, id="0", mkstream=True)
    [(_stream, [(entry_id, _fields)])] = r.xreadgroup(
        GROUP, DEAD_CONSUMER, {"tasks:normal": ">"}, count=1
    )
    assert entry_id.decode() == job.entry_id
    if idle_ms:
        r.xclaim("tasks:normal", GROUP, DEAD_CONSUMER, 0, [entry_id], idle=idle_ms, justid=True)


def fast_clock(monkeypatch: pytest.MonkeyPatch, ahead_ms: int) -> None:
    """Make taskq's ``now_ms`` in this process run ``ahead_ms`` fast (the system clock is not
    touched): every module that imported it gets the fast one."""
    real = taskq.message.now_ms

    def fast() -> int:
        return real() + ahead_ms

    for module in (
        "message",
        "broker.broker",
        "worker.finish",
        "worker.consumer",
        "testing",
        "task",
        "app",
    ):
        mod = importlib.import_module(f"taskq.{module}")
        if hasattr(mod, "now_ms"):
            monkeypatch.setattr(mod, "now_ms", fast)


@pytest.mark.slow
@pytest.mark.parametrize("queue", ["q" * 60, "ж" * 30], ids=["60-ascii", "30-cyrillic"])
def test_job_that_kills_its_child_on_a_long_queue_name_runs_three_times_then_dead_letters(
    queue: str, task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """The scoreboard truncated stream names to 64 bytes, so a crash on a long
    queue name was taken for a job that never started and handed back uncounted, for ever."""
    # Given: a job that kills its child, on a queue whose stream names are over 64 bytes.
    assert len(f"{queue}:normal".encode()) > 64
    job = tasks.crash.apply_async(("long",), queue=queue)
    # When: a worker serves that queue.
    start_worker("-A", "tests.tasks", "-c", "1", "-Q", queue)
    # Then: every crash counts as an attempt: 3 runs (max_retries=2), then a WorkerLost dead letter.
    wait_until(
        lambda: r.xlen(f"{queue}:deadletter") or len(runs(r)) > 3,
        timeout_s=20,
        message="a dead letter (or a fourth run)",
    )
    assert [x["attempt"] for x in runs(r)] == [1, 2, 3]
    [dead] = dead_entries(r, queue)
    assert dead["job_id"] == job.id and dead["error_type"] == "WorkerLost"
    assert dead["stream"] == f"{queue}:normal" and dead["attempts"] == "3"


@pytest.mark.slow
def test_child_killed_by_a_realtime_signal_is_a_lost_run_and_the_master_keeps_serving(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """A child killed by signal 40 (no signal.Signals member) crashed the master
    in pool._describe (ValueError), called from _reap."""
    # Given: a job whose child kills itself with real-time signal 40 (max_retries=1).
    job = tasks.signals_itself.delay(40)
    # When: a worker runs it.
    w = start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(
        lambda: r.xlen("tasks:deadletter") or w.proc.poll() is not None,
        timeout_s=15,
        message="a dead letter (or the master exiting)",
    )
    # Then: the master is still up; both runs counted; the dead letter names signal 40.
    assert w.proc.poll() is None, f"the master exited: {w.output()[-2000:]}"
    assert [x["attempt"] for x in runs(r)] == [1, 2]
    [dead] = dead_entries(r)
    assert dead["job_id"] == job.id and dead["error_type"] == "WorkerLost"
    assert "40" in dead["error"] or "SIGRTMIN+6" in dead["error"], dead["error"]
    # And: the pool still serves.
    tasks.echo.delay("after")
    wait_until(lambda: any(x.get("value") == "after" for x in runs(r)), message="a later job")
    assert faults(w) == []


def test_failure_on_attempt_601_is_parked_with_the_capped_backoff(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    """The backoff 4.0 ** (attempt - 1) raised OverflowError from attempt 513 on,
    crashing the child and then failing the master's maintenance step over and over."""
    # Given: a job (max_retries=10_000) that already used 600 attempts, and fails.
    entry_id = hand_made_job(
        r, "tests.tasks.fails_with_many_retries", job_id="many-1", args=["x"], retries=600
    )
    # When: a worker runs it (visibility timeout long enough to keep the sweep out of it).
    w = start_worker("-A", "tests.tasks", "-c", "1", TASKQ_VISIBILITY_TIMEOUT_MS="20000")
    wait_until(lambda: runs(r), message="the run")

    def parked() -> float | None:
        found = r.zrange("tasks:retry:normal", 0, -1, withscores=True)
        score = found[0][1] if found else None
        return score if score is not None and score > redis_ms(r) + 60_000 else None

    wait_until(lambda: parked() or faults(w), timeout_s=5, message="the job to be parked")
    # Then: it is parked for the capped backoff (600 s, +/-25%), nothing crashed, it ran once.
    assert faults(w) == []
    [(member, score)] = r.zrange("tasks:retry:normal", 0, -1, withscores=True)
    assert 0.75 * 600_000 - 5_000 <= score - redis_ms(r) <= 1.25 * 600_000
    assert msgpack.unpackb(member.split(b"\n", 3)[3], raw=False)["retries"] == 601
    assert r.xlen("tasks:normal") == 0 and entry_id
    assert [x["attempt"] for x in runs(r)] == [601]


@pytest.mark.parametrize("countdown", ["5", math.inf, math.nan], ids=["str", "inf", "nan"])
def test_retry_with_a_bad_countdown_is_parked_or_dead_lettered_never_half_moved(
    countdown: object, task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """``Retry(countdown="5")`` made park.lua XCLAIM the entry to taskq:retry and
    then fail its ZADD (no retry-set member); ``inf`` / ``nan`` crashed the child."""
    # Given: a task that raises Retry with a countdown that is not a finite number.
    job = tasks.retries_with_countdown.delay(countdown)
    # When: a worker runs it.
    w = start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: runs(r), message="the first run")

    def state() -> tuple[str, float | None]:
        pipe = r.pipeline(transaction=True)  # one atomic snapshot of pending list + retry set
        pipe.xpending_range("tasks:normal", GROUP, job.entry_id, job.entry_id, 1)
        pipe.zrange("tasks:retry:normal", 0, -1, withscores=True)
        pipe.xlen("tasks:deadletter")
        pending, parked, n_dead = pipe.execute()
        # Then (always): the job is in exactly one place, never pending and parked at once.
        assert not (pending and parked), "pending and parked at once"
        if n_dead:
            return "dead", None
        if parked:
            return "parked", parked[0][1]
        return ("pending" if pending else "gone"), None

    def settled() -> tuple[str, float | None] | None:
        now = state()
        return now if now[0] in ("parked", "dead") else None

    where, score = wait_until(settled, timeout_s=5, message="the job to be parked or dead-lettered")
    # Then: no child crashed; parked with a sane due time, or dead-lettered with a clear error.
    assert faults(w) == []
    if where == "parked":
        assert score is not None and math.isfinite(score)
        assert redis_ms(r) - 5_000 <= score <= redis_ms(r) + 7 * 86_400_000
    else:
        [dead] = dead_entries(r)
        assert dead["job_id"] == job.id
        assert dead["error_type"] != "WorkerLost" and dead["error"], dead


def test_retry_with_a_bad_countdown_is_an_ordinary_failure(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.bad_retry.delay()
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="the dead letter")
    [(_, dead)] = r.xrange("tasks:deadletter")
    assert dead[b"error_type"] == b"ConfigError" and b"countdown" in dead[b"error"]
    assert [x["attempt"] for x in runs(r)] == [1, 2, 3]


def test_non_retryable_error_with_a_non_utf8_message_is_dead_lettered_after_one_run(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """A message with lone surrogates made redis-py refuse the dead-letter write,
    crashing the child; the job was then retried as WorkerLost."""
    # Given: a dont_autoretry_for=(ValueError,) task whose ValueError text is not UTF-8.
    job = tasks.rejects_undecodable.delay()
    # When: a worker runs it.
    w = start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(
        lambda: r.xlen("tasks:deadletter") or len(runs(r)) > 1,
        timeout_s=10,
        message="a dead letter (or a second run)",
    )
    # Then: one run, dead-lettered as the ValueError it was, with a readable error.
    assert len(runs(r)) == 1
    [dead] = dead_entries(r)
    assert dead["job_id"] == job.id and dead["error_type"] == "ValueError"
    assert "bad" in dead["error"] and "bytes" in dead["error"]
    assert "ValueError" in dead["traceback"]
    assert faults(w) == []


@pytest.mark.slow
def test_retrying_error_with_a_non_utf8_message_is_parked_then_dead_lettered(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """The same, for a task that is retried: parked on each failure, and its last
    failure dead-lettered as itself (RuntimeError), not as a crashed child."""
    # Given: an always failing task whose RuntimeError text is not UTF-8.
    job = tasks.fails_undecodable.delay()
    # When: a worker runs it to the end of its retries (max_retries=2, backoff 100 ms).
    w = start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter"), timeout_s=15, message="a dead letter")
    # Then: three runs, each failure recorded by the child itself, none of them a crash.
    assert [x["attempt"] for x in runs(r)] == [1, 2, 3]
    [dead] = dead_entries(r)
    assert dead["job_id"] == job.id and dead["error_type"] == "RuntimeError"
    assert "bad" in dead["error"] and dead["attempts"] == "3"
    assert faults(w) == []


@pytest.mark.slow
def test_crash_recovery_is_not_slowed_by_many_parked_retries(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """The sweep (sweep.lua) XAUTOCLAIMed from every consumer, the retry pseudo-consumer
    included, so 20,000 parked retries delayed a crashed worker's job by many sweeps. Parked
    retries now wait outside the stream and its pending list altogether."""
    # Given: 20,000 failed jobs parked for an hour ...
    n, stream = 20_000, "tasks:normal"
    r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    due = redis_ms(r) + 3_600_000
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        body = Message("tests.tasks.echo", ("parked",), retries=1).encode()
        member = b"%d\n1\ntests.tasks.echo\n%s" % (redis_ms(r) + i, body)
        pipe.zadd("tasks:retry:normal", {member: due})
    pipe.set("tasks:due", due)
    pipe.execute()
    # ... and one job taken just now by a consumer that then vanished.
    job = tasks.echo.delay("orphan")
    take_as_dead_consumer(r, job)
    taken = time.monotonic()
    # When: a worker runs (visibility timeout 1 s, sweep every 0.5 s).
    start_worker(
        "-A",
        "tests.tasks",
        "-c",
        "1",
        TASKQ_VISIBILITY_TIMEOUT_MS="1000",
        TASKQ_SWEEP_INTERVAL_MS="500",
    )
    # Then: the orphan runs about one visibility timeout after it was taken (1 s + a few
    # sweeps + worker start-up), however many retries are parked; the parked ones stay parked.
    wait_until(lambda: runs(r), timeout_s=6, message="the orphan to be recovered and run")
    assert time.monotonic() - taken >= 0.9
    assert [(x["value"], x["attempt"]) for x in runs(r)] == [("orphan", 2)]
    wait_until(lambda: r.zcard("tasks:retry:normal") == n, message="only the parked ones left")


def test_job_with_negative_retries_is_dead_lettered_as_malformed_and_never_runs(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    """``retries: -7`` in a body was accepted and bought the job extra attempts."""
    # Given: a hand-made job whose body claims -7 attempts used.
    entry_id = hand_made_job(r, "tests.tasks.echo", job_id="neg-1", args=["x"], retries=-7)
    # When: a worker reads it.
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") or runs(r), message="a dead letter (or a run)")
    # Then: it never ran and is dead-lettered as malformed.
    assert runs(r) == []
    [dead] = dead_entries(r)
    assert dead["error_type"] == "Rejected" and "retries" in dead["error"], dead["error"]
    assert dead["entry_id"] == entry_id and r.xlen("tasks:normal") == 0


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


def test_job_recovered_by_a_sweeper_with_a_fast_clock_runs_on_time(
    task_app: App, start_worker: StartWorker, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep made a recovered job due at the sweeper's ``now``: a sweeper 10
    minutes fast delayed it by 10 minutes for every healthy worker."""
    # Given: a job pending under a vanished consumer, idle past the visibility timeout.
    job = tasks.echo.delay("recovered")
    take_as_dead_consumer(r, job, idle_ms=60_000)
    # When: a sweeper whose clock is 10 minutes fast recovers it ...
    fast_clock(monkeypatch, 600_000)
    broker = task_app.broker_for(["tasks"])
    [recovered] = broker.recover("tasks", min_idle_ms=3_000)
    Finisher(broker, Executor(task_app)).recover(recovered, owner=RECOVER_CONSUMER)
    # ... and a worker with a correct clock serves the queue.
    start_worker("-A", "tests.tasks", "-c", "1")
    # Then: the job runs at once.
    wait_until(lambda: runs(r), timeout_s=5, message="the recovered job to run")
    assert [(x["value"], x["attempt"]) for x in runs(r)] == [("recovered", 2)]


def test_retry_parked_by_a_worker_with_a_fast_clock_runs_on_time(
    task_app: App, start_worker: StartWorker, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed job was parked until the parking worker's ``now`` + backoff."""
    # Given: a job that fails once (Retry(countdown=0.05)), run by a consumer 10 minutes fast.
    tasks.flaky.delay(2)
    with monkeypatch.context() as m:
        fast_clock(m, 600_000)
        assert drain(task_app, max_jobs=1).retried == 1
    # When: a worker with a correct clock serves the queue.
    start_worker("-A", "tests.tasks", "-c", "1")
    # Then: the retry runs 50 ms (not 10 minutes) after the failure.
    wait_until(lambda: len(runs(r)) == 2, timeout_s=5, message="the retry to run")
    assert [x["attempt"] for x in runs(r)] == [1, 2]


def test_fetch_from_a_fast_clock_does_not_deliver_delayed_jobs_early(
    task_app: App, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fetch (fetch.lua) promoted delayed jobs (and retries) due by the caller's clock."""
    # Given: a job delayed by a minute.
    tasks.echo.apply_async(("later",), countdown=60)
    # When: a consumer whose clock is 10 minutes fast fetches.
    fast_clock(monkeypatch, 600_000)
    broker = task_app.broker_for(["tasks"])
    broker.ensure_groups()
    fetched = broker.fetch("fast-clock-host:1:0:2", 1).deliveries
    broker.promote(force=True)
    # Then: nothing is delivered 59 s early; the job is still waiting in the schedule.
    assert fetched == []
    assert r.zcard("tasks:schedule") == 1 and r.xlen("tasks:normal") == 0


def test_always_failing_job_runs_three_times_with_growing_gaps_then_dead_letters(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    job = tasks.always_fails.delay("x")
    start_worker("-A", "tests.tasks", "-c", "2", TASKQ_RETRY_BACKOFF_MS="300")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, timeout_s=20, message="dead letter")
    attempts = [x for x in runs(r) if x["job"] == job.id]
    assert [x["attempt"] for x in attempts] == [1, 2, 3]
    gap1 = attempts[1]["t"] - attempts[0]["t"]
    gap2 = attempts[2]["t"] - attempts[1]["t"]
    assert 0.2 <= gap1 < gap2, (gap1, gap2)  # ~0.3 s, then ~1.2 s (factor 4, +/-25%)
    [dead] = dead_entries(r)
    assert dead["task"] == "tests.tasks.always_fails" and dead["job_id"] == job.id
    assert dead["error_type"] == "RuntimeError" and dead["error"] == "boom x"
    assert "Traceback" in dead["traceback"] and dead["attempts"] == "3"
    assert dead["stream"] == "tasks:normal"  # each retry is a fresh entry: a new entry id
    assert int(dead["first_failure_ms"]) < int(dead["last_failure_ms"])
    assert dead["worker"].count(":") == 4  # host:pid:random:child index:child pid
    assert msgpack.unpackb(r.xrange("tasks:deadletter")[0][1][b"body"], raw=False)["id"] == job.id
    # Gone from the source stream, its pending list and the retry set.
    assert r.xlen("tasks:normal") == 0 and r.xinfo_groups("tasks:normal")[0]["pending"] == 0
    assert r.zcard("tasks:retry:normal") == 0


def test_flaky_job_succeeds_on_retry_and_leaves_nothing_behind(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.flaky.delay(3)
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.llen("runs") == 3, message="three runs")
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="ack")
    assert [x["attempt"] for x in runs(r)] == [1, 2, 3]
    assert r.xlen("tasks:deadletter") == 0 and r.zcard("tasks:retry:normal") == 0


def test_exceptions_marked_not_retryable_dead_letter_at_once(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.rejects.delay("v")
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="dead letter")
    assert r.llen("runs") == 1 and dead_entries(r)[0]["error_type"] == "ValueError"


def test_job_that_kills_its_worker_three_times_is_dead_lettered(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    job = tasks.crash.delay("segv")
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, timeout_s=30, message="dead letter")
    assert [x["attempt"] for x in runs(r) if x["job"] == job.id] == [1, 2, 3]
    dead = dead_entries(r)[0]
    assert dead["error_type"] == "WorkerLost" and "SIGKILL" in dead["error"]


def test_jobs_of_a_vanished_consumer_are_recovered_after_the_visibility_timeout(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a consumer on another host took a job and vanished (no master renews its lease).
    tasks.echo.delay("orphan")
    r.xgroup_create("tasks:normal", GROUP, id="0", mkstream=True)
    r.xreadgroup(GROUP, "gone-host:1:0:2", {"tasks:normal": ">"}, count=1)
    started = time.monotonic()
    # When: a worker runs with a 1 s visibility timeout.
    start_worker(
        "-A",
        "tests.tasks",
        "-c",
        "1",
        TASKQ_VISIBILITY_TIMEOUT_MS="1000",
        TASKQ_SWEEP_INTERVAL_MS="200",
    )
    # Then: the job runs once, as attempt 2, not before the timeout.
    wait_until(lambda: runs(r), timeout_s=15, message="the recovered job")
    assert time.monotonic() - started >= 0.9
    assert [(x["value"], x["attempt"]) for x in runs(r)] == [("orphan", 2)]


def test_delayed_jobs_run_once_when_due_with_several_workers(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    for _ in range(3):
        start_worker("-A", "tests.tasks", "-c", "2")
    # Up first, so that the lateness below is the promotion's, not the workers' start-up.
    wait_until(lambda: r.zcard("tasks:workers") == 3, 20, message="three workers up")
    due_at = time.time() + 1.0
    jobs = [tasks.echo.apply_async((i,), eta=due_at) for i in range(50)]
    assert r.zcard("tasks:schedule") == 50
    # Promotion moves a job out of the schedule in the same step as it adds it to the stream,
    # so once both are empty no duplicate can still appear: every copy would have run.
    wait_until(
        lambda: r.llen("runs") >= 50 and r.zcard("tasks:schedule") == r.xlen("tasks:normal") == 0,
        timeout_s=20,
        message="50 delayed jobs run, and nothing left to run",
    )
    done = runs(r)
    assert sorted(x["job"] for x in done) == sorted(j.id for j in jobs)
    assert min(x["t"] for x in done) >= due_at - 0.01
    assert max(x["t"] for x in done) - due_at < 2.0  # documented accuracy: block_ms + load
    assert r.zcard("tasks:schedule") == 0


def test_attempt_count_survives_a_worker_restart(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.always_fails.delay("r")
    w = start_worker("-A", "tests.tasks", "-c", "1", TASKQ_RETRY_BACKOFF_MS="60000")
    wait_until(lambda: r.zcard("tasks:retry:normal") == 1, message="first failure parked")
    w.stop()
    # Make the retry due now and start a fresh worker: it must know this is attempt 2.
    [member] = r.zrange("tasks:retry:normal", 0, -1)
    r.zadd("tasks:retry:normal", {member: 0})
    r.delete("tasks:due")  # the full housekeeping pass finds it all the same
    start_worker("-A", "tests.tasks", "-c", "1", TASKQ_RETRY_BACKOFF_MS="60000")
    wait_until(lambda: r.llen("runs") == 2, message="second attempt")
    assert [x["attempt"] for x in runs(r)] == [1, 2]


@st.composite
def garbage(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    """Entries that must never run: not msgpack, wrong schema, unknown task, bad args, v2."""
    valid_id = st.text(min_size=1, max_size=8)
    ints = st.integers(-(2**63), 2**64 - 1)
    body = st.one_of(
        st.binary(max_size=40).filter(lambda b: not _decodes(b)),
        st.builds(msgpack.packb, st.one_of(ints, st.lists(ints), st.text())),
        st.builds(lambda i: msgpack.packb({"v": 1, "id": i, "task": "no.such.task"}), valid_id),
        st.builds(lambda i: msgpack.packb({"v": 2, "id": i, "task": "tests.tasks.echo"}), valid_id),
        st.builds(
            lambda i, n: msgpack.packb(
                {"v": 1, "id": i, "task": "tests.tasks.echo", "args": list(range(n + 2))}
            ),
            valid_id,
            st.integers(0, 3),
        ),
    )
    return draw(
        st.lists(
            st.tuples(st.sampled_from(["high", "normal", "low"]), body), min_size=1, max_size=8
        )
    )


def _decodes(raw: bytes) -> bool:
    try:
        msgpack.unpackb(raw)
    except Exception:
        return False
    return True


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(entries=garbage())
def test_garbage_is_dead_lettered_while_good_jobs_keep_flowing(
    entries: list[tuple[str, bytes]], make_app: Callable[..., App], r: redis.Redis
) -> None:
    r.flushall()
    app = make_app()
    good: list[int] = []

    @app.task(name="tests.tasks.echo")
    def echo(value: int) -> None:
        good.append(value)

    for i, (priority, body) in enumerate(entries):
        echo.delay(i)
        r.xadd(f"tasks:{priority}", {"task": "junk", "body": body})
    drain(app)
    assert sorted(good) == list(range(len(entries)))
    # Every garbage entry, and only those, is dead-lettered once (one handed back between two
    # reads has a new entry id, and its body says how many attempts it used).
    dead = dead_entries(r)
    assert len(dead) == len(entries)
    assert all(d["error_type"] in ("Rejected", "TypeError") and d["error"] for d in dead)
    assert sum(r.xlen(f"tasks:{p}") for p in ("high", "normal", "low")) == 0


def test_a_parked_retry_waits_outside_the_stream_with_its_attempts_in_the_body(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app(retry_backoff_ms=60_000)

    @app.task
    def fail() -> None:
        raise RuntimeError("x")

    job = fail.delay()
    drain(app)
    # Nothing of it is left in the stream or its pending list...
    assert r.xlen("tasks:normal") == 0 and r.xinfo_groups("tasks:normal")[0]["pending"] == 0
    # ...it waits in the retry set: "<first failure ms>\n<priority>\n<task>\n<body>".
    [(member, due)] = r.zrange("tasks:retry:normal", 0, -1, withscores=True)
    first, priority, task, body = member.split(b"\n", 3)
    assert (priority, task) == (b"1", fail.name.encode())
    assert msgpack.unpackb(body, raw=False)["retries"] == 1 and int(first) <= due
    assert due > time.time() * 1000 + 40_000 and int(r.get("tasks:due")) == due
    assert msgpack.unpackb(body, raw=False)["id"] == job.id
    # The finished consumer was forgotten: it had nothing pending.
    assert r.xinfo_consumers("tasks:normal", GROUP) == []


def test_forgetting_consumers_never_drops_pending_entries(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def t() -> None: ...

    t.delay()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    r.xreadgroup(GROUP, "holder", {"tasks:normal": ">"}, count=1)
    r.xgroup_createconsumer("tasks:normal", GROUP, "empty")
    assert broker.forget_consumers(idle_ms=0) == 1  # only "empty"
    assert broker.forget_consumer("holder") == 0
    names = {c["name"].decode() for c in r.xinfo_consumers("tasks:normal", GROUP)}
    assert names == {"holder"}
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 1


BAD_FIELDS: list[tuple[dict[str, bytes], str]] = [
    ({"job": b"\xff\xfejob"}, "entry field 'job' is not a job id: b'\\xff\\xfejob'"),
    ({"job": b"two words"}, "entry field 'job' is not a job id: b'two words'"),
    ({"job": b"j" * 300}, "entry field 'job' is not a job id: b'" + "j" * 40 + "'... (300 bytes)"),
    ({"ff": b"soon"}, "entry field 'ff' is not a time in ms: b'soon'"),
    ({"ff": b"-5"}, "entry field 'ff' is not a time in ms: b'-5'"),
    ({"ff": b"1.5"}, "entry field 'ff' is not a time in ms: b'1.5'"),
    ({"ff": b"1e12"}, "entry field 'ff' is not a time in ms: b'1e12'"),
    ({"ff": b"9" * 30}, "entry field 'ff' is not a time in ms: b'" + "9" * 30 + "'"),
    ({"ff": b"\xd9\x00"}, "entry field 'ff' is not a time in ms: b'\\xd9\\x00'"),
    ({"body": None}, "entry has no 'body' field"),  # (None: the field is left out)
]
"""Stream entries with one bad field each (their body a good job), and the reason each is
dead-lettered with (after ``malformed entry: ``)."""


def add_bad_entries(r: redis.Redis, stream: str = "tasks:normal") -> list[str]:
    """XADD every entry of :data:`BAD_FIELDS`, each with a good ``tests.tasks.echo`` body
    (the value ``bad <i>``); returns their entry ids."""
    ids = []
    for i, (bad, _reason) in enumerate(BAD_FIELDS):
        body = tasks.app.encode(tasks.echo.message((f"bad {i}",), {}))
        fields = {"task": b"tests.tasks.echo", "body": body, **bad}
        ids.append(r.xadd(stream, {k: v for k, v in fields.items() if v is not None}).decode())
    return ids


def assert_bad_entries_dead_lettered(r: redis.Redis, ids: list[str]) -> None:
    """Each entry of ``ids`` (added by :func:`add_bad_entries`) is dead-lettered once, with
    its reason, and never ran."""
    dead = {d["entry_id"]: d for d in dead_entries(r) if d["entry_id"] in ids}
    assert sorted(dead) == sorted(ids)
    for entry_id, (_bad, reason) in zip(ids, BAD_FIELDS, strict=True):
        got = dead[entry_id]
        assert (got["error_type"], got["error"]) == ("Rejected", f"malformed entry: {reason}")
        assert got["attempts"] == "0" and got["stream"] == "tasks:normal"
    assert not [x for x in runs(r) if str(x.get("value", "")).startswith("bad ")]


def test_entries_with_a_bad_field_are_dead_lettered_alone_in_a_batch_of_good_jobs(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: bad entries between good jobs, so that every fetched batch mixes them.
    tasks.echo.delay("good -1")
    ids = []
    for i, entry_id in enumerate(add_bad_entries(r)):
        ids.append(entry_id)
        tasks.echo.delay(f"good {i}")
    # When: one child fetches them in batches.
    w = start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "4")
    # Then: every good job runs, every bad entry is dead-lettered with its reason.
    good = {f"good {i}" for i in range(-1, len(BAD_FIELDS))}
    wait_until(lambda: len(dead_entries(r)) == len(BAD_FIELDS), 20, message="the bad entries")
    wait_until(lambda: {x.get("value") for x in runs(r)} >= good, 20, message="the good jobs")
    assert_bad_entries_dead_lettered(r, ids)
    assert sorted(x["value"] for x in runs(r)) == sorted(good)
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="the stream to drain")
    assert "crashed" not in w.output() and "died" not in w.output(), w.output()


def test_an_entry_whose_job_field_names_another_job_leaves_that_record_alone(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    ran: list[str] = []

    @app.task(name="tests.tasks.echo", result_ttl_s=60)
    def echo(value: str) -> str:
        ran.append(value)
        return value

    # Given: another job's status record, and an entry whose `job` field names it.
    r.hset("tasks:job:victim-1", mapping={"state": "waiting", "task": "tests.tasks.echo"})
    body = app.encode(echo.message(("forged",), {}))
    r.xadd("tasks:normal", {"task": "tests.tasks.echo", "body": body, "job": "victim-1"})
    # When: a worker takes the entry.
    drain(app)
    # Then: it is dead-lettered, and the other job's record is as it was.
    [dead] = dead_entries(r)
    assert dead["error"] == "malformed entry: its 'job' field names another job than its body"
    assert ran == []
    assert r.hgetall("tasks:job:victim-1") == {b"state": b"waiting", b"task": b"tests.tasks.echo"}
