"""The prefork worker as operators run it: real processes, real signals, real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis

from taskq import App
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = pytest.mark.integration

StartWorker = Callable[..., WorkerProcess]


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


def test_cold_shutdown_hands_the_job_back_without_using_an_attempt(
    start_worker: StartWorker, r: redis.Redis, task_app: App
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "1", "--grace", "0.5")
    tasks.sleepy.delay(30, tag="cold")
    wait_until(lambda: r.llen("started") == 1, message="the job to start")
    w.signal(signal.SIGTERM)
    w.wait(20)
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
    wait_until(
        lambda: any("running tests.tasks.sleepy" in t for t in titles()), message="a running title"
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
