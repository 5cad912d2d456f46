"""The prefork worker as operators run it: real processes, real signals, real Redis.

Supervision of the children, shutdown and leases, Redis outages, how the children take jobs
(prefetch, strict priority) and how soon due jobs reach their streams while they are busy.
"""

from __future__ import annotations

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

from taskq import App, keys
from taskq.keys import GROUP, PRIORITIES
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.integration

StartWorker = Callable[..., WorkerProcess]


def starts(r: redis.Redis) -> list[dict[str, Any]]:
    """The start records ``tests.tasks.sleepy_traced`` pushes before it sleeps, oldest first."""
    return [msgpack.unpackb(x, raw=False) for x in r.lrange("starts", 0, -1)]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaps counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


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


def _idle(r: redis.Redis) -> bool:
    clients = r.client_list()
    return any(c.get("cmd") == "xreadgroup" for c in clients)


BOUND_S = 0.05
"""How late a due job may enter its stream (maintenance.HOUSEKEEPING_S)."""
SLACK_S = 0.25
"""Scheduling noise on a loaded 2-core CI machine, on top of the bound."""


def warm_up(r: redis.Redis, n: int = 300) -> None:
    """Short jobs first, so both children's batches have grown (adaptive prefetch)."""
    tasks.stamp.starmap([("warm",)] * n)
    wait_until(lambda: r.llen("runs") >= n, timeout_s=20, message="the warm-up jobs")
    r.delete("runs")


@pytest.mark.slow
def test_children_of_a_killed_master_stop_before_another_worker_takes_their_job(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """When only the master was SIGKILLed its children kept running jobs whose
    leases nobody renewed, so another worker ran the same job at the same time."""
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "2000", "TASKQ_SWEEP_INTERVAL_MS": "200"}
    # Given: worker A's child is running a long job.
    a = start_worker("-A", "tests.tasks", "-c", "1", **env)
    tasks.sleepy_traced.delay(6.0, tag="long")
    [first] = wait_until(lambda: starts(r), message="the job to start on worker A")
    child = first["pid"]
    assert child in _children(a.pid)
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


@pytest.mark.slow
def test_blocking_read_takes_at_most_prefetch_jobs_across_the_priority_streams(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    """XREADGROUP's COUNT is per stream, so one child with --prefetch 1 took a
    high, a normal and a low job in one blocking read while the other child sat idle.

    What it checks: with 2 children and --prefetch 1, once both children run a job each
    holds that one job only (XINFO CONSUMERS pending, summed over the three streams) and the
    third waits for whichever is free first, so the three 2 s jobs start on both children,
    the third as soon as one of the first two is done.

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
    # Then: once two jobs run, their children hold nothing else (a child hands back what it
    # read beyond its prefetch before it starts a job; with the fault, one child held all
    # three and the second start came 2 s later, from that same child) ...
    wait_until(lambda: len(starts(r)) >= 2, timeout_s=5, message="two jobs to start")
    most, consumer = _most_held(r)
    assert most == 1, f"{consumer} holds {most} jobs with --prefetch 1"
    # ... and the three start within ~2 s on the two children: none waits behind another.
    got = wait_until(lambda: len(starts(r)) == 3 and starts(r), timeout_s=8, message="3 starts")
    assert len({s["pid"] for s in got}) == 2
    assert max(s["start"] for s in got) - min(s["start"] for s in got) < 2.8, got
    assert "Traceback" not in w.output()


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


def test_worker_ids_differ_for_the_same_host_and_pid() -> None:
    """Ids of the form ``host:pid`` collided across containers with their own PID namespace and
    the same host name, so one master handed back another's live jobs."""
    ids = {keys.worker_id("web", 1) for _ in range(50)}
    assert len(ids) == 50
    assert all(keys.worker_of(keys.consumer_name(i, 0, 7)) == i for i in ids)


@pytest.mark.slow
def test_short_jobs_never_wait_in_the_child_of_a_long_one(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a worker with two children, both with grown batches.
    start_worker("-A", "tests.tasks", "-c", "2")
    warm_up(r)
    # When: behind a backlog of short jobs (so that the children take full batches), a 2 s
    # job and then 100 short ones: some child's batch holds the long job with short ones
    # behind it.
    batch = [tasks.stamp.message(("pre",), {}) for _ in range(500)]
    batch.append(tasks.sleepy.message((2.0,), {"tag": "long"}))
    batch += [tasks.stamp.message((f"s{i}",), {}) for i in range(100)]
    task_app.enqueue_many(batch)
    wait_until(lambda: len(runs(r)) >= 601, timeout_s=20, message="every job")
    done = runs(r)
    [long] = [x for x in done if x.get("tag") == "long"]
    short = [x for x in done if str(x.get("tag", "")).startswith("s")]
    # Then: every short job ran while the long one still ran ...
    assert len(short) == 100
    assert max(x["t"] for x in short) < long["end"], "a short job waited for the long one"
    # ... and none of them in the long job's child after the long job started.
    assert not [x for x in short if x["pid"] == long["pid"] and x["start"] >= long["start"]]


@pytest.mark.slow
def test_priority_holds_across_children_and_within_batches(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: jobs of every priority waiting before the worker starts.
    task_app.enqueue_many(
        [
            tasks.stamp_delivery.message((), {}, priority=p)
            for p in ("low", "normal", "high")
            for _ in range(60)
        ]
    )
    # When: a worker with two children drains them.
    start_worker("-A", "tests.tasks", "-c", "2")
    wait_until(lambda: len(runs(r)) >= 180, timeout_s=20, message="every job")
    # Then: each child ran high before normal before low (each fetch takes high first) ...
    rank = {"high": 0, "normal": 1, "low": 2}
    done = runs(r)
    for pid in {x["pid"] for x in done}:
        order = [rank[x["priority"]] for x in done if x["pid"] == pid]
        assert order == sorted(order), f"child {pid} ran {order}"
    # ... and no job was delivered while one of a higher priority waited in its stream, by
    # Redis' clock: delivered after that one was added and before it was delivered. (Not
    # start times: a child may start its last high job well after the other child took its
    # low batch, as long as that job was delivered first. Within one ms the order is unknown.)
    assert all(isinstance(x["delivered_ms"], int) for x in done)
    waited = [
        (x["priority"], x["delivered_ms"], y["priority"], y["added_ms"], y["delivered_ms"])
        for x in done
        for y in done
        if rank[y["priority"]] < rank[x["priority"]]
        and y["added_ms"] < x["delivered_ms"] < y["delivered_ms"]
    ]
    assert waited == []


@pytest.mark.slow
def test_due_jobs_arrive_within_the_bound_under_a_steady_stream(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    start_worker("-A", "tests.tasks", "-c", "2")
    warm_up(r, 50)
    stop = threading.Event()

    def steady() -> None:  # ~200 new jobs a second, well within the two children's pace
        while not stop.is_set():
            tasks.stamp.delay("steady")
            time.sleep(0.005)

    feeder = threading.Thread(target=steady, daemon=True)
    feeder.start()
    try:
        due_at = time.time() + 1.0
        tasks.stamp.apply_async(("delayed",), countdown=1.0)
        tasks.flaky_once.delay(0.5)  # fails at once, Retry(countdown=0.5), then succeeds
        failed_at = time.time()
        wait_until(
            lambda: {"delayed", "retried"} <= {x.get("tag") for x in runs(r)},
            timeout_s=10,
            message="the delayed job and the retry",
        )
    finally:
        stop.set()
        feeder.join(5)
    done = {x.get("tag"): x for x in runs(r) if x.get("tag") in ("delayed", "retried")}
    assert due_at <= done["delayed"]["start"] <= due_at + BOUND_S + SLACK_S
    assert failed_at + 0.5 <= done["retried"]["start"] + 0.05
    assert done["retried"]["start"] <= failed_at + 0.5 + BOUND_S + SLACK_S


def test_job_built_by_hand_from_the_protocol_doc_is_executed(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a job written with plain redis-py and msgpack, as docs/protocol.md describes.
    body = msgpack.packb(
        {"v": 1, "id": "hand-1", "task": "tests.tasks.echo", "args": ["by hand"], "kwargs": {}}
    )
    r.execute_command("XADD", "tasks:normal", "*", "task", "tests.tasks.echo", "body", body)
    # When: a worker runs.
    start_worker("-A", "tests.tasks", "-c", "1")
    # Then: it ran once, and the stream is empty (acked and deleted).
    wait_until(lambda: runs(r), message="the hand-made job to run")
    assert [(x["job"], x["value"], x["attempt"]) for x in runs(r)] == [("hand-1", "by hand", 1)]
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="XLEN 0 after ack")


def test_strict_priority_with_one_child(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    for priority in ("low", "normal", "high"):
        tasks.echo.starmap([(priority,)] * 100) if priority == "normal" else [
            tasks.echo.apply_async((priority,), priority=priority) for _ in range(100)
        ]
    start_worker("-A", "tests.tasks", "-c", "1", "--loglevel", "warning")
    wait_until(lambda: r.llen("runs") == 300, timeout_s=30, message="300 jobs")
    order = [x["value"] for x in runs(r)]
    assert order == ["high"] * 100 + ["normal"] * 100 + ["low"] * 100


def test_four_children_run_four_jobs_at_once(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    for i in range(4):
        tasks.sleepy.delay(2.0, tag=str(i))
    start_worker("-A", "tests.tasks", "-c", "4")
    wait_until(lambda: r.llen("runs") == 4, timeout_s=20, message="4 sleepy jobs")
    spans = [(x["start"], x["end"]) for x in runs(r)]
    assert len({x["pid"] for x in runs(r)}) == 4
    latest_start = max(s for s, _ in spans)
    earliest_end = min(e for _, e in spans)
    assert latest_start < earliest_end, f"jobs did not overlap: {spans}"


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(x) for x in out.stdout.split()]


def test_killed_child_is_replaced(start_worker: StartWorker, r: redis.Redis, task_app: App) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "2")
    first = wait_until(
        lambda: len(_children(w.pid)) == 2 and _children(w.pid), message="2 children"
    )
    os.kill(first[0], signal.SIGKILL)
    wait_until(
        lambda: len(set(_children(w.pid)) - set(first)) == 1 and len(_children(w.pid)) == 2,
        message="a new child",
    )
    # The pool still serves.
    tasks.echo.delay("after")
    wait_until(lambda: runs(r), message="a job after the respawn")


def test_warm_shutdown_finishes_the_running_job_and_exits_0(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "1")
    tasks.sleepy.delay(1.5, tag="warm")
    wait_until(lambda: r.llen("started") == 1, message="the job to start")
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    assert [x["tag"] for x in runs(r)] == ["warm"]
    assert r.xlen("tasks:normal") == 0  # acked and deleted before exit


def _busy(r: redis.Redis) -> bool:
    info = r.xinfo_groups("tasks:normal") if r.exists("tasks:normal") else []
    return bool(info) and info[0]["pending"] > 0


def _cold_shutdown_during_a_job(
    start_worker: StartWorker, r: redis.Redis, app_module: str = "tests.tasks"
) -> WorkerProcess:
    """A worker of one child stopped by SIGTERM with ``--grace 0.5`` while a 30 s job runs,
    once it has exited (within 20 s)."""
    w = start_worker("-A", app_module, "-c", "1", "--grace", "0.5")
    tasks.sleepy.delay(30, tag="cold")
    wait_until(lambda: r.llen("started") == 1, message="the job to start")
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    return w


def test_cold_shutdown_hands_the_job_back_without_using_an_attempt(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    _cold_shutdown_during_a_job(start_worker, r)
    # The job is waiting again at once (not pending), with its attempt not used up.
    entries = r.xrange("tasks:normal")
    assert len(entries) == 1
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 0
    body = msgpack.unpackb(entries[0][1][b"body"], raw=False)
    assert body["retries"] == 0 and body["task"] == "tests.tasks.sleepy"


def test_second_signal_is_a_cold_shutdown(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "1", "--grace", "60")
    tasks.sleepy.delay(30, tag="cold")
    wait_until(lambda: r.llen("started") == 1, message="the job to start")
    w.signal(signal.SIGINT)
    wait_until(lambda: "warm shutdown" in w.output(), message="warm shutdown log")
    w.signal(signal.SIGINT)
    w.wait(20)
    assert r.xlen("tasks:normal") == 1 and r.xinfo_groups("tasks:normal")[0]["pending"] == 0


@pytest.mark.slow
def test_long_cpu_bound_job_keeps_its_lease_and_runs_once(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    # Visibility timeout 2 s, a job that holds the GIL for 6.5 s, and a second worker whose
    # sweep would steal the job if its lease lapsed.
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "2000", "TASKQ_SWEEP_INTERVAL_MS": "200"}
    tasks.spin.delay(6.5)
    start_worker("-A", "tests.tasks", "-c", "1", **env)
    wait_until(lambda: _busy(r), message="the job to start")
    start_worker("-A", "tests.tasks", "-c", "1", **env)
    wait_until(lambda: r.llen("runs") >= 1, timeout_s=20, message="the spin job")
    # Had the lease lapsed, the other worker would have stolen the entry, the first worker's
    # (fenced) ack would be refused and the entry would stay until the second run ended: once
    # the stream is empty, every run that will happen has happened.
    wait_until(lambda: r.xlen("tasks:normal") == 0, timeout_s=20, message="the job acked")
    assert r.llen("runs") == 1


def test_hard_time_limit_kills_and_counts_a_failure(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "1", "--time-limit", "0.5")
    job = tasks.sleepy.delay(30, tag="stuck")
    wait_until(lambda: r.zcard("tasks:retry:normal") == 1, message="the job parked for retry")
    assert "hard time limit exceeded" in w.output()
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 0  # out of the stream, parked
    assert job.id in w.output()


def test_soft_time_limit_raises_inside_the_task(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "1")
    tasks.overruns.delay(5)
    wait_until(lambda: runs(r), message="the soft limit handler")
    assert runs(r)[0]["tag"] == "soft"
    wait_until(lambda: "SoftTimeLimitExceeded" in w.output(), message="the failure log line")


def test_max_tasks_per_child_recycles(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    tasks.echo.map(range(6))
    start_worker("-A", "tests.tasks", "-c", "1", "--max-tasks-per-child", "2")
    wait_until(lambda: r.llen("runs") == 6, message="6 jobs")
    assert len({x["pid"] for x in runs(r)}) == 3


def test_process_titles_show_role_queue_and_state(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "2")

    def titles() -> list[str]:
        pids = [w.pid, *_children(w.pid)]
        return [_cmdline(p) for p in pids]

    wait_until(lambda: any("child 2/2 [tasks] idle" in t for t in titles()), message="titles")
    wait_until(
        lambda: any(t.startswith("taskq: master tests.tasks [tasks]") for t in titles()),
        message="the master's title",
    )
    tasks.sleepy.delay(3, tag="title")
    wait_until(  # the task, without the job's entry id (set once for a run of the same task)
        lambda: any(t.endswith("[tasks] running tests.tasks.sleepy") for t in titles()),
        message="a running title",
    )


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
    except FileNotFoundError:
        return ""


def test_missing_app_module_is_one_line(redis_url: str, tmp_path: Any) -> None:
    from tests.conftest import ROOT, worker_env

    out = subprocess.run(
        [sys.executable, "-m", "taskq", "worker", "-A", "no_such_module_xyz"],
        cwd=ROOT,
        env=worker_env(redis_url),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [
        "Error: cannot import app module 'no_such_module_xyz': No module named 'no_such_module_xyz'"
    ]


def test_unreachable_redis_is_one_line_for_the_worker() -> None:
    from tests.conftest import ROOT, worker_env

    out = subprocess.run(
        [sys.executable, "-m", "taskq", "worker", "-A", "tests.tasks"],
        cwd=ROOT,
        env=worker_env("redis://127.0.0.1:1/0", TASKQ_CONNECT_TIMEOUT="0"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in out.stderr


def test_idle_worker_wakes_on_a_new_job_without_respawning(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    # Given: an idle worker blocked in XREADGROUP.
    w = start_worker("-A", "tests.tasks", "-c", "1")
    first = wait_until(lambda: _children(w.pid), message="the child")
    wait_until(lambda: "idle" in _cmdline(first[0]), message="the child to be idle")
    # When: jobs arrive one by one on different priorities.
    for i, priority in enumerate(("low", "high", "normal")):
        tasks.echo.apply_async((i,), priority=priority)
        wait_until(lambda i=i: r.llen("runs") == i + 1, message=f"job {i}")
    # Then: the same child ran them all, and nothing crashed.
    assert {x["pid"] for x in runs(r)} == {first[0]}
    assert "died" not in w.output() and "Traceback" not in w.output()


@pytest.mark.parametrize("cold_by", ["grace", "second signal"])
def test_a_worker_whose_redis_died_still_stops(
    start_worker: StartWorker, tmp_path: Path, cold_by: str
) -> None:
    # A shutdown settles its exited children's jobs through Redis; with Redis gone it waits
    # until it turns cold (grace over, or a second signal), then leaves them to the sweep.
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        grace = "1" if cold_by == "grace" else "600"
        w = start_worker("-A", "tests.tasks", "-c", "2", "--grace", grace, url=server.url)
        wait_until(lambda: server.client().zcard("tasks:workers"), 20, message="a heartbeat")
    finally:
        server.kill()
    w.signal(signal.SIGTERM)
    if cold_by == "second signal":
        wait_until(lambda: "warm shutdown" in w.output(), message="the warm shutdown")
        w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    assert "left to the sweep" in w.output()


def test_a_cold_shutdown_stops_when_settling_fails_on_a_bug(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    # Redis answers, but settling the killed child's job fails on a bug: a cold shutdown
    # leaves the job pending for the sweep rather than waiting for a fix that never comes.
    w = _cold_shutdown_during_a_job(start_worker, r, "tests.broken_settle_tasks")
    assert "left to the sweep" in w.output()
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 1  # nothing lost: the sweep's


def test_children_leave_the_masters_objects_out_of_their_collections(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    # Frozen before the fork, the app's and taskq's objects are not written by a child's
    # full collection, so their pages stay shared with the master.
    start_worker("-A", "tests.tasks", "-c", "1")
    tasks.count_frozen.delay()
    wait_until(lambda: runs(r), message="the job")
    assert runs(r)[0]["frozen"] > 10_000
