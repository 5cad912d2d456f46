"""Chaos: SIGKILL workers and Redis mid-drain, wipe Redis under running workers; count jobs."""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from taskq.keys import GROUP, RECOVER_CONSUMER
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until
from tests.integration.test_failures import (
    BAD_FIELDS,
    add_bad_entries,
    assert_bad_entries_dead_lettered,
    dead_entries,
)
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]
StartWorker = Callable[..., WorkerProcess]


def completions(mark_dir: Path) -> collections.Counter[str]:
    """How many times each job id completed, from the tasks' own files."""
    done: collections.Counter[str] = collections.Counter()
    for f in mark_dir.glob("*.log"):
        for line in f.read_text().splitlines():
            if line.strip():
                done[line.split()[0]] += 1
    return done


@pytest.fixture
def mark_dir(tmp_path: Path) -> Path:
    d = tmp_path / "marks"
    d.mkdir()
    return d


def _enqueue(url: str, n: int, seconds: float = 0.0) -> list[str]:
    tasks.app.settings = tasks.app.settings.replace(redis_url=url)
    jobs = tasks.mark.starmap([(i, seconds) for i in range(n)])
    tasks.app.close()
    return [j.id for j in jobs]


def test_sigkill_of_the_whole_worker_loses_no_job(
    start_worker: StartWorker, redis_url: str, mark_dir: Path, r: redis.Redis
) -> None:
    ids = _enqueue(redis_url, 2000, 0.002)
    env = {"TASKQ_TEST_MARK_DIR": str(mark_dir), "TASKQ_VISIBILITY_TIMEOUT_MS": "1500"}
    w = start_worker(
        "-A", "tests.tasks", "-c", "2", "--prefetch", "4", "--loglevel", "warning", **env
    )
    wait_until(
        lambda: sum(completions(mark_dir).values()) >= 300,
        timeout_s=30,
        message="the drain to be under way",
    )
    w.kill_all()  # master and children, no chance to clean up
    assert sum(completions(mark_dir).values()) < 2000
    start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning", **env)
    wait_until(
        lambda: set(completions(mark_dir)) >= set(ids),
        timeout_s=90,
        message="every job to complete",
    )
    done = completions(mark_dir)
    assert len(set(done) & set(ids)) == 2000
    wait_until(
        lambda: all(r.xlen(f"tasks:{p}") == 0 for p in ("high", "normal", "low")),
        message="streams to drain",
    )
    assert r.xlen("tasks:deadletter") == 0
    twice = sum(1 for c in done.values() if c > 1)
    print(f"\nSIGKILL worker: 2000 jobs, all completed, {twice} ran twice")


@pytest.fixture
def aof_url(aof_server: RedisServer) -> Iterator[str]:
    yield aof_server.url


def test_sigkill_of_redis_with_aof_everysec(
    start_worker: StartWorker, aof_server: RedisServer, mark_dir: Path
) -> None:
    ids = _enqueue(aof_server.url, 2000, 0.002)
    time.sleep(1.2)  # let the AOF fsync (everysec) cover the enqueued jobs, as in production
    env = {"TASKQ_TEST_MARK_DIR": str(mark_dir), "TASKQ_VISIBILITY_TIMEOUT_MS": "2000"}
    start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning", url=aof_server.url, **env)
    wait_until(
        lambda: sum(completions(mark_dir).values()) >= 500,
        timeout_s=30,
        message="the drain to be under way",
    )
    aof_server.kill()
    time.sleep(1.0)  # Redis stays down for a second: workers must ride it out
    aof_server.start()
    wait_until(
        lambda: set(completions(mark_dir)) >= set(ids),
        timeout_s=120,
        message="every job to complete after the Redis restart",
    )
    with aof_server.client() as c:
        wait_until(
            lambda: sum(c.xlen(f"tasks:{p}") for p in ("high", "normal", "low")) == 0,
            message="streams to drain",
        )
        assert c.xlen("tasks:deadletter") == 0
    done = completions(mark_dir)
    twice = sum(1 for n in done.values() if n > 1)
    print(f"\nSIGKILL redis (AOF everysec): 2000 jobs, all completed, {twice} ran twice")


def test_flushall_under_running_workers(
    start_worker: StartWorker, redis_url: str, mark_dir: Path, r: redis.Redis
) -> None:
    env = {"TASKQ_TEST_MARK_DIR": str(mark_dir)}
    worker = start_worker("-A", "tests.tasks", "-c", "2", **env)
    first = _enqueue(redis_url, 20)
    wait_until(lambda: set(completions(mark_dir)) >= set(first), message="first batch")
    r.flushall()
    second = _enqueue(redis_url, 20)
    wait_until(
        lambda: set(completions(mark_dir)) >= set(second),
        timeout_s=20,
        message="jobs enqueued after FLUSHALL",
    )
    r.delete("tasks:normal")
    third = _enqueue(redis_url, 20)
    wait_until(
        lambda: set(completions(mark_dir)) >= set(third),
        timeout_s=20,
        message="jobs enqueued after deleting the stream",
    )
    # Children blocked in XREADGROUP when their stream went away (Redis answers them
    # "UNBLOCKED the stream key no longer exists") re-create it and read on; none crashes.
    assert "crashed" not in worker.output()


def test_no_job_stream_is_trimmed_and_no_consumer_with_pending_is_deleted(
    start_worker: StartWorker, redis_url: str, mark_dir: Path, r: redis.Redis
) -> None:
    # Record every command the server runs (scripts included) during a run with failures,
    # crashes, recycling and a restart.
    seen: list[str] = []
    stop = threading.Event()

    listener = redis.Redis.from_url(redis_url)

    def monitor() -> None:
        with listener.monitor() as m:
            for cmd in m.listen():
                seen.append(cmd["command"])
                if stop.is_set():
                    return

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    env = {"TASKQ_TEST_MARK_DIR": str(mark_dir), "TASKQ_RETRY_BACKOFF_MS": "50"}
    ids = _enqueue(redis_url, 200)
    tasks.app.settings = tasks.app.settings.replace(redis_url=redis_url)
    tasks.crash.delay("x")
    tasks.always_fails.delay("y")
    tasks.app.close()
    w = start_worker("-A", "tests.tasks", "-c", "2", "--max-tasks-per-child", "50", **env)
    wait_until(
        lambda: set(completions(mark_dir)) >= set(ids) and r.xlen("tasks:deadletter") == 2,
        timeout_s=30,
        message="all jobs done and two dead letters",
    )
    w.stop()
    r.ping()
    stop.set()
    r.ping()  # one more command wakes the listener so it can see the stop flag
    t.join(5)
    listener.close()
    upper = [c.upper() for c in seen]
    # Job streams are trimmed only by MINID at a threshold the script takes from the group's
    # last delivered id and oldest pending entry (finished jobs only: the model test checks
    # that every job stays in exactly one place); never by length, never on XADD.
    trims = [c for c in upper if c.startswith("XTRIM") and "DEADLETTER" not in c]
    assert trims and all(" MINID " in c for c in trims)
    assert not [c for c in upper if c.startswith("XADD") and ("MAXLEN" in c or "MINID" in c)]
    deletes = [c for c in upper if "DELCONSUMER" in c]
    assert deletes, "consumers of exited children should have been cleaned up"
    # Every consumer left in the group has work pending (none was dropped with work).
    for p in ("high", "normal", "low"):
        if r.exists(f"tasks:{p}"):
            for c in r.xinfo_consumers(f"tasks:{p}", "taskq"):
                assert c["pending"] > 0 or c["name"] == b"taskq:recover"
    assert os.listdir(mark_dir)


def _good_and_bad_entries(
    r: redis.Redis, first: Callable[[], object]
) -> tuple[set[str], list[str]]:
    """``first()`` (the job the child runs when it dies), then the bad entries of
    :data:`BAD_FIELDS` between good jobs; returns the good values and the bad entry ids."""
    first()
    ids = []
    for i, entry_id in enumerate(add_bad_entries(r)):
        ids.append(entry_id)
        tasks.echo.delay(f"good {i}")
    return {f"good {i}" for i in range(len(BAD_FIELDS))}, ids


def _all_pending(r: redis.Redis) -> bool:
    return r.xpending("tasks:normal", GROUP)["pending"] == 1 + 2 * len(BAD_FIELDS)


def _settled(r: redis.Redis, good: set[str]) -> bool:
    ran = {x.get("value") for x in runs(r)}
    return len(dead_entries(r)) >= len(BAD_FIELDS) and ran >= good and r.xlen("tasks:normal") == 0


def test_the_sweep_recovers_good_jobs_and_dead_letters_bad_entries_of_a_killed_worker(
    task_app: object, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a worker whose child took a batch of good jobs and bad entries, SIGKILLed
    # (master and child) while the batch's first job runs.
    env = {"TASKQ_VISIBILITY_TIMEOUT_MS": "1000", "TASKQ_SWEEP_INTERVAL_MS": "200"}
    good, ids = _good_and_bad_entries(r, lambda: tasks.sleepy.delay(3.0, "hold"))
    w = start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "64", **env)
    wait_until(lambda: r.lrange("started", 0, -1) == [b"hold"], 20, message="the first job")
    wait_until(lambda: _all_pending(r), message="the whole batch taken")
    w.kill_all()
    # When: another worker's sweep recovers them.
    after = start_worker("-A", "tests.tasks", "-c", "1", **env)
    # Then: the good jobs run, each bad entry is dead-lettered alone, nothing stays claimed.
    wait_until(lambda: _settled(r, good), 30, message="every entry settled")
    assert_bad_entries_dead_lettered(r, ids)
    assert sorted(x["value"] for x in runs(r) if "value" in x) == sorted(good)
    assert r.xpending_range("tasks:normal", GROUP, "-", "+", 10, RECOVER_CONSUMER) == []
    assert "failed; carrying on" not in after.output(), after.output()


def test_the_master_settles_bad_entries_of_a_child_that_died(
    task_app: object, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a child that took a batch of good jobs and bad entries dies on the first job.
    good, ids = _good_and_bad_entries(r, lambda: tasks.crash.delay("first"))
    w = start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "64")
    # Then: its master dead-letters each bad entry alone and hands the good jobs back.
    wait_until(lambda: _settled(r, good), 30, message="every entry settled")
    assert_bad_entries_dead_lettered(r, ids)
    assert "failed; carrying on" not in w.output(), w.output()
