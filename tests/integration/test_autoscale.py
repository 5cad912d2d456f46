"""Workers under an orchestrator: health probes (``--health-port``), ``--autoscale MAX,MIN``
and a SIGTERM that hands fetched jobs back at once. Real Redis, real worker processes; the
test plays the orchestrator."""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from taskq import App
from taskq.ops.inspect import Inspector
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until
from tests.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]


def probe(port: int, path: str, timeout_s: float = 1.0) -> int | None:
    """The status of a probe, or None when nothing answers in time (as a kubelet sees it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def within(seconds: float, predicate: Callable[[], object], message: str) -> float:
    """Poll ``predicate``; returns how long it took, failing past ``seconds``."""
    started = time.monotonic()
    wait_until(predicate, timeout_s=seconds, interval_s=0.05, message=message)
    return time.monotonic() - started


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server this test may stop and start again (on the same port)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


def test_probes_follow_redis_supervision_and_shutdown(
    own_redis: RedisServer, start_worker: StartWorker
) -> None:
    port = free_port()
    w = start_worker(
        "-A", "tests.tasks", "-c", "1", "--health-port", str(port), "--grace", "5",
        url=own_redis.url,
    )  # fmt: skip
    wait_until(lambda: probe(port, "/ready") == 200, timeout_s=15, message="ready")
    assert probe(port, "/live") == 200
    assert probe(port, "/nope") == 404

    # Redis gone: not ready within 5 s, still live; back: ready within 5 s.
    own_redis.stop()
    within(5, lambda: probe(port, "/ready") == 503, "not ready without Redis")
    assert probe(port, "/live") == 200
    own_redis.start()
    within(5, lambda: probe(port, "/ready") == 200, "ready with Redis back")

    # A master that stops supervising fails its liveness probe.
    os.kill(w.pid, signal.SIGSTOP)
    try:
        within(10, lambda: probe(port, "/live") is None, "/live to fail")
    finally:
        os.kill(w.pid, signal.SIGCONT)
    within(5, lambda: probe(port, "/live") == 200, "/live again")

    # SIGTERM with a job running: not ready within 1 s, live while it finishes.
    client = redis.Redis(port=own_redis.port)
    app = App(own_redis.url)
    app.enqueue(tasks.sleepy.message((3.0,), {}))
    wait_until(lambda: client.llen("started") == 1, message="the job to start")
    w.signal(signal.SIGTERM)
    within(1, lambda: probe(port, "/ready") == 503, "not ready once stopping")
    assert probe(port, "/live") == 200
    assert w.wait(15) == 0
    app.close()
    client.close()


def children(app: App) -> int:
    workers = Inspector(app.reader, ["tasks"]).workers()
    return len(workers[0].children) if workers else 0


def test_autoscale_grows_under_a_backlog_and_shrinks_when_idle(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # given: a worker of 1 to 4 children, a 1 s target and a 1 s idle window
    start_worker(
        "-A", "tests.tasks", "--autoscale", "4,1", "--grace", "5",
        TASKQ_TARGET_TIME_TO_START_S="1", TASKQ_AUTOSCALE_IDLE_S="1",
    )  # fmt: skip
    wait_until(lambda: children(task_app) == 1, timeout_s=15, message="one child")
    # when: 60 jobs of 200 ms wait (12 s of work)
    tasks.sleepy.starmap((0.2, str(i)) for i in range(60))
    # then: it grows to 4, and back to 1 once idle, with every job run once
    wait_until(lambda: children(task_app) == 4, timeout_s=20, message="four children")
    wait_until(lambda: len(runs(r)) == 60, timeout_s=30, message="every job run")
    wait_until(lambda: children(task_app) == 1, timeout_s=15, message="back to one child")
    assert Counter(run["tag"] for run in runs(r)) == Counter(str(i) for i in range(60))
    assert r.xpending("tasks:normal", "taskq")["pending"] == 0


def test_sigterm_hands_fetched_jobs_to_other_workers_at_once(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # given: two workers sharing a backlog of 300 ms jobs
    leaving = start_worker("-A", "tests.tasks", "-c", "2", "--grace", "5")
    start_worker("-A", "tests.tasks", "-c", "2", "--grace", "5")
    tasks.sleepy.starmap((0.3, str(i)) for i in range(40))
    wait_until(lambda: len(runs(r)) >= 4, timeout_s=15, message="both under way")
    # when: one is stopped
    stopped_at = time.time()
    leaving.signal(signal.SIGTERM)
    assert leaving.wait(15) == 0
    wait_until(lambda: len(runs(r)) == 40, timeout_s=30, message="every job run")
    # then: no job waited for the visibility timeout: the other worker started one at least
    # every second after the stop, and each job ran once
    starts = sorted(run["start"] for run in runs(r) if run["start"] >= stopped_at)
    gaps = [b - a for a, b in zip([stopped_at, *starts], starts, strict=False)]
    assert max(gaps) < 1.0, gaps
    assert Counter(run["tag"] for run in runs(r)) == Counter(str(i) for i in range(40))
