"""Fixtures: private Redis servers (never the machine's 6379), apps and worker processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import pytest
import redis

from taskq import App
from tests.redis_server import RedisServer

if TYPE_CHECKING:
    from starlette.testclient import TestClient

    from tests.dashboard_support import DashboardProcess

ROOT = Path(__file__).resolve().parent.parent

FAST_SETTINGS: dict[str, Any] = {
    "visibility_timeout_ms": 3_000,
    "sweep_interval_ms": 500,
    "heartbeat_interval_ms": 200,
    "worker_ttl_ms": 1_500,
    "retry_backoff_ms": 100,
    "block_ms": 200,
}
"""Timings shrunk for tests; the same values reach worker subprocesses as TASKQ_* variables."""


def pytest_configure(config: pytest.Config) -> None:
    """taskq's pytest plugin, for the modules that use its fixtures: installing taskq registers
    it (the ``taskq`` entry point), but an install older than the plugin has not."""
    from taskq.contrib import pytest_plugin

    if not config.pluginmanager.is_registered(pytest_plugin):
        config.pluginmanager.register(pytest_plugin, "taskq")  # None if -p no:taskq


def wait_until(
    predicate: Callable[[], Any],
    timeout_s: float = 10.0,
    interval_s: float = 0.02,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the suite's Redis: ``TASKQ_TEST_REDIS_URL`` if set (a Redis whose database
    the tests may empty), else a private ``redis-server`` on a free port."""
    external = os.environ.get("TASKQ_TEST_REDIS_URL")
    if external:
        yield external
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The suite's Redis, its database emptied before and after the test."""
    with redis.Redis.from_url(redis_server) as c:
        c.flushdb()
    yield redis_server
    with redis.Redis.from_url(redis_server) as c:
        c.flushdb()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def aof_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own, persisting to an AOF (everysec), for crash tests."""
    server = RedisServer(tmp_path / "redis-aof", appendonly=True)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def make_app(redis_url: str) -> Iterator[Callable[..., App]]:
    apps: list[App] = []

    def make(**settings: Any) -> App:
        app = App(redis_url, **{**FAST_SETTINGS, **settings})
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture
def dash_app(redis_url: str) -> Iterator[App]:
    """The dashboard tests' app (tests.dashboard_tasks) on the test Redis."""
    from tests import dashboard_tasks

    app = dashboard_tasks.app
    app.settings = app.settings.replace(redis_url=redis_url)
    yield app
    app.close()


@pytest.fixture
def client(dash_app: App) -> Iterator[TestClient]:
    """The dashboard of ``dash_app`` through Starlette's TestClient (server errors answered
    as 500 pages, as a browser would see them, not raised)."""
    from starlette.testclient import TestClient

    from taskq.dashboard import asgi

    with TestClient(asgi(dash_app), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium, one per test module (skips without it)."""
    from tests.dashboard_support import chromium

    yield from chromium()


@pytest.fixture
def start_dashboard(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., DashboardProcess]]:
    """Starts ``taskq dashboard`` subprocesses on the test Redis; stops them after."""
    from tests.dashboard_support import dashboards

    yield from dashboards(redis_url, tmp_path)


@pytest.fixture
def task_app(redis_url: str) -> Iterator[App]:
    """``tests.tasks.app`` (the app worker subprocesses load) pointed at this test's Redis."""
    from tests import tasks

    tasks.app.settings = tasks.app.settings.replace(redis_url=redis_url)
    yield tasks.app
    tasks.app.close()


@pytest.fixture
def fair_app(task_app: App) -> Iterator[App]:
    """``tests.tasks.app`` naming the queue ``fair`` fair, with the queue marked fair (as its
    first worker's start does), so that enqueues stage from the first (test_fair*.py)."""
    from taskq.broker.fairness import claim_fairness

    task_app.settings = task_app.settings.replace(fair_queues=("fair",))
    claim_fairness(task_app.link, ["fair"], {"fair"})
    yield task_app
    task_app.settings = task_app.settings.replace(fair_queues=())


def runs(r: redis.Redis) -> list[dict[str, Any]]:
    """The run records that tests.tasks write to the list ``runs``, oldest first."""
    return [msgpack.unpackb(x, raw=False) for x in r.lrange("runs", 0, -1)]


def worker_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update({f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()})
    env.update(TASKQ_REDIS_URL=redis_url, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class WorkerProcess:
    """``taskq worker`` as a real subprocess (its own process group, so it can be killed whole)."""

    def __init__(self, redis_url: str, *args: str, log_path: Path, **env: str) -> None:
        self.log_path = log_path
        cmd = [sys.executable, "-m", "taskq", "worker", *args]
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=worker_env(redis_url, **env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill_all(self) -> None:
        """SIGKILL the master and every child at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout_s: float = 30.0) -> int:
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill_all()
        self.log.close()


@pytest.fixture
def start_worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, url: str | None = None, **env: str) -> WorkerProcess:
        log_path = tmp_path / f"worker-{len(started)}.log"
        w = WorkerProcess(url or redis_url, *args, log_path=log_path, **env)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()
