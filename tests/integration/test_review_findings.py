"""Regression tests for the failures an adversarial review reproduced (one test per finding).

Each test observes real worker processes and Redis state only: run records, pending lists,
retry sets, dead-letter entries and worker logs.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis

import taskq
from taskq import App
from taskq.keys import GROUP, PRIORITIES, RECOVER_CONSUMER
from taskq.message import Message
from taskq.testing import drain
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]

DEAD_CONSUMER = "deadhost:1:0:1"
"""A child consumer of a worker on another host that vanished (nobody renews its leases)."""
FAULT_LINES = ("crashed", "maintenance step failed", "Traceback")
"""Worker log lines that mean a child or the master hit a bug."""


# -- helpers ---------------------------------------------------------------------------------


def dead_entries(r: redis.Redis, queue: str = "tasks") -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        for _id, fields in r.xrange(f"{queue}:deadletter")
    ]


def hand_made_job(r: redis.Redis, task: str, *, job_id: str, **fields: Any) -> str:
    """XADD a job written with plain msgpack, as docs/protocol.md describes; returns its id."""
    body = msgpack.packb({"v": 1, "id": job_id, "task": task, "args": [], **fields})
    return str(r.xadd("tasks:normal", {"task": task, "body": body}).decode())


def starts(r: redis.Redis) -> list[dict[str, Any]]:
    """The start records ``tests.tasks.sleepy_traced`` pushes before it sleeps, oldest first."""
    return [msgpack.unpackb(x, raw=False) for x in r.lrange("starts", 0, -1)]


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(x) for x in out.stdout.split()]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaps counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


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


# -- finding 1: a stream name past 64 bytes ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("queue", ["q" * 60, "ж" * 30], ids=["60-ascii", "30-cyrillic"])
def test_job_that_kills_its_child_on_a_long_queue_name_runs_three_times_then_dead_letters(
    queue: str, task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 1: the scoreboard truncated stream names to 64 bytes, so a crash on a long
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


# -- finding 2: only the master dies ---------------------------------------------------------


@pytest.mark.slow
def test_children_of_a_killed_master_stop_before_another_worker_takes_their_job(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 2: when only the master was SIGKILLed its children kept running jobs whose
    leases nobody renewed, so another worker ran the same job at the same time."""
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "2000", "TASKQ_SWEEP_INTERVAL_MS": "200"}
    # Given: worker A's child is running a long job.
    a = start_worker("-A", "tests.tasks", "-c", "1", **env)
    tasks.sleepy_traced.delay(6.0, tag="long")
    [first] = wait_until(lambda: starts(r), message="the job to start on worker A")
    child = first["pid"]
    assert child in children(a.pid)
    try:
        # When: only A's master is SIGKILLed (not its process group), and worker B starts.
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        start_worker("-A", "tests.tasks", "-c", "1", "--grace", "0.5", **env)
        # Then: A's child goes at once, before the job's lease (2 s) can lapse ...
        wait_until(
            lambda: not alive(child),
            timeout_s=2.0,
            message=f"worker A's child (pid {child}) to exit after its master was killed",
        )
        gone_at = time.time()
        # ... and B recovers the job only after that, so the two runs never overlap.
        later = wait_until(
            lambda: len(starts(r)) >= 2 and starts(r), timeout_s=10, message="B to recover it"
        )
        assert [s["job"] for s in later] == [first["job"]] * 2
        assert later[1]["pid"] != child and later[1]["start"] > gone_at
        assert [x for x in runs(r) if x["pid"] == child] == []  # A's run never finished
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


# -- finding 3: a signal outside signal.Signals ----------------------------------------------


@pytest.mark.slow
def test_child_killed_by_a_realtime_signal_is_a_lost_run_and_the_master_keeps_serving(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 3: a child killed by signal 40 (no signal.Signals member) crashed the master
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


# -- finding 4: the backoff overflows, and bad countdowns ------------------------------------


def test_failure_on_attempt_601_is_parked_with_the_capped_backoff(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 4: the backoff 4.0 ** (attempt - 1) raised OverflowError from attempt 513 on,
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
    """Finding 4: ``Retry(countdown="5")`` made park.lua XCLAIM the entry to taskq:retry and
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


# -- finding 5: exception messages that are not UTF-8 ----------------------------------------


def test_non_retryable_error_with_a_non_utf8_message_is_dead_lettered_after_one_run(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 5: a message with lone surrogates made redis-py refuse the dead-letter write,
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
    """Finding 5: the same, for a task that is retried: parked on each failure, and its last
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


# -- finding 6: the sweep walks every parked retry -------------------------------------------


@pytest.mark.slow
def test_crash_recovery_is_not_slowed_by_many_parked_retries(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 6: sweep.lua XAUTOCLAIMed from every consumer, the retry pseudo-consumer
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


# -- finding 7: negative retries -------------------------------------------------------------


def test_job_with_negative_retries_is_dead_lettered_as_malformed_and_never_runs(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 7: ``retries: -7`` in a body was accepted and bought the job extra attempts."""
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


# -- finding 8: a blocking read takes a job from each stream ---------------------------------


def _blocked_readers(r: redis.Redis) -> int:
    return sum(
        1 for c in r.client_list() if c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "")
    )


def _most_held(r: redis.Redis) -> tuple[int, str]:
    """The most entries pending under one child consumer, across the three streams."""
    held: dict[str, int] = {}
    for p in PRIORITIES:
        for c in r.xinfo_consumers(f"tasks:{p}", GROUP):
            name = c["name"].decode()
            held[name] = held.get(name, 0) + int(c["pending"])
    return max(((n, c) for c, n in held.items()), default=(0, ""))


@pytest.mark.slow
def test_blocking_read_takes_at_most_prefetch_jobs_across_the_priority_streams(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """Finding 8: XREADGROUP's COUNT is per stream, so one child with --prefetch 1 took a
    high, a normal and a low job in one blocking read while the other child sat idle.

    What it checks: with 2 children and --prefetch 1, no child ever holds more than one job
    (XINFO CONSUMERS pending, summed over the three streams), and the three 2 s jobs start
    on both children, the third as soon as one of the first two is done.

    How it gets there: both children block in XREADGROUP (TASKQ_BLOCK_MS=5000, so they stay
    there). Cutting their connections makes each re-issue that XREADGROUP after a 25-75 ms
    backoff; the three jobs are added in one MULTI before that, so the re-issued read finds
    all three streams non-empty, which is the state that triggered the bug.
    """
    # Given: a 2-child worker, both children blocked in XREADGROUP.
    w = start_worker("-A", "tests.tasks", "-c", "2", "--prefetch", "1", TASKQ_BLOCK_MS="5000")
    wait_until(lambda: _blocked_readers(r) == 2, message="both children blocked in XREADGROUP")
    # When: their connections drop, and a job lands on each priority before they read again.
    r.client_kill_filter(_type="normal", skipme=True)
    pipe = r.pipeline(transaction=True)
    for p in PRIORITIES:
        body = tasks.sleepy_traced.message((2.0,), {"tag": p}, priority=p).encode()
        pipe.xadd(f"tasks:{p}", {"task": "tests.tasks.sleepy_traced", "body": body})
    pipe.execute()
    # Then: no child holds more than one job (seen twice in a row, so that a fix that hands
    # extra entries straight back is not flagged for a moment's overlap) ...
    deadline, over = time.monotonic() + 1.5, 0
    while time.monotonic() < deadline:
        most, consumer = _most_held(r)
        over = over + 1 if most > 1 else 0
        assert over < 2, f"{consumer} holds {most} jobs with --prefetch 1"
        time.sleep(0.05)
    # ... and the three start within ~2 s on the two children: none waits behind another.
    got = wait_until(lambda: len(starts(r)) == 3 and starts(r), timeout_s=8, message="3 starts")
    assert len({s["pid"] for s in got}) == 2
    assert max(s["start"] for s in got) - min(s["start"] for s in got) < 2.8, got
    assert "Traceback" not in w.output()


# -- finding 9: due times from the caller's clock --------------------------------------------


def test_job_recovered_by_a_sweeper_with_a_fast_clock_runs_on_time(
    task_app: App, start_worker: StartWorker, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 9: the sweep made a recovered job due at the sweeper's ``now``: a sweeper 10
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
    """Finding 9: a failed job was parked until the parking worker's ``now`` + backoff."""
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
    """Finding 9: fetch.lua promoted delayed jobs (and retries) due by the caller's clock."""
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
