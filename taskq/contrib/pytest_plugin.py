"""taskq's pytest plugin: a private Redis, the app under test, a real worker and ``drain`` as
fixtures (see docs/testing.md, "The pytest plugin").

Installing taskq registers it (the ``pytest11`` entry point ``taskq``; ``-p no:taskq`` turns it
off). It is off unless used: loading it adds two options, an ini value and the ``taskq``
marker, and defines the fixtures. Nothing else happens until a test requests a fixture; each
imports what it needs then, and a redis-server starts (once per session) only for the first
test that needs Redis.

The fixtures follow ``celery.contrib.pytest``: ``taskq_config`` is ``celery_config`` (settings
of the app under test), the ``taskq`` marker is ``@pytest.mark.celery(...)`` (settings for one
test), ``taskq_app`` is ``celery_app`` and ``taskq_worker`` is ``celery_worker``. Two
differences: the app is the project's own (named by ``taskq_app`` in the ini file), since a
worker process must import it by name; and the worker is a real ``taskq worker`` process, not
a thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from taskq.app import App
    from taskq.contrib.worker_process import WorkerProcess
    from taskq.testing import DrainResult

REDIS_URL_ENV = "TASKQ_TEST_REDIS_URL"
"""A Redis whose database the tests may empty, instead of a private redis-server."""

DEFAULT_CONFIG: dict[str, Any] = {
    "retry_backoff_ms": 10,
    "retry_jitter": False,
    "block_ms": 100,
    "heartbeat_interval_ms": 100,
}
"""``taskq_config``'s default: retries after 10 ms, workers that notice a SIGTERM and report
their counters within about 100 ms."""

NO_APP = (
    "no taskq app to test: set `taskq_app = MODULE:ATTR` in the pytest ini file "
    "([tool.pytest.ini_options] in pyproject.toml), pass --taskq-app, set TASKQ_APP or "
    "[tool.taskq] app, or override the taskq_app_path fixture"
)


class Drain(Protocol):
    """The ``taskq_drain`` fixture: :func:`taskq.testing.drain` on ``taskq_app``."""

    def __call__(
        self,
        *,
        queues: Iterable[str] | None = None,
        max_jobs: int | None = None,
        timeout_s: float = 10.0,
        wait_for_retries: bool = False,
    ) -> DrainResult: ...


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("taskq", "taskq (the taskq_* fixtures)")
    group.addoption(
        "--taskq-app",
        dest="taskq_app",
        metavar="MODULE[:ATTR]",
        help="the App that taskq_app and taskq_worker use (over the taskq_app ini value)",
    )
    group.addoption(
        "--taskq-redis-url",
        dest="taskq_redis_url",
        metavar="URL",
        help=f"a Redis the tests may empty, instead of a private redis-server (or {REDIS_URL_ENV})",
    )
    parser.addini("taskq_app", "MODULE[:ATTR] of the App that taskq_app tests", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "taskq(**settings): taskq_app's settings for this test, over taskq_config "
        "(eager=True: tasks run inline, no Redis)",
    )


# -- Redis -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def taskq_redis_server(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Session-wide: the URL of the Redis the taskq fixtures use.

    ``--taskq-redis-url`` or ``TASKQ_TEST_REDIS_URL`` if given (a Redis whose database the tests
    may empty); else a private ``redis-server`` on a free loopback port, with its own data
    directory and no persistence, started when a test first needs it and killed at the end of
    the session. Prefer ``taskq_redis_url`` in tests: it empties the database around each.
    """
    external = pytestconfig.getoption("taskq_redis_url", None) or os.environ.get(REDIS_URL_ENV)
    if external:
        yield str(external)
        return
    from taskq.errors import ConfigError
    from taskq.ops.devserver import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("taskq-redis"))
    try:
        server.start()
    except ConfigError as exc:  # no redis-server binary
        pytest.fail(f"taskq_redis_server: {exc}", pytrace=False)
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def taskq_redis_url(taskq_redis_server: str) -> Iterator[str]:
    """The URL of ``taskq_redis_server``, its database emptied before and after the test."""
    _flush(taskq_redis_server)
    yield taskq_redis_server
    _flush(taskq_redis_server)


def _flush(url: str) -> None:
    from taskq.app import App
    from taskq.config import Settings
    from taskq.testing import flushdb

    app = App(settings=Settings(redis_url=url))
    try:
        flushdb(app)
    finally:
        app.close()


# -- the app -----------------------------------------------------------------------------------


@pytest.fixture
def taskq_app_path(pytestconfig: pytest.Config) -> str:
    """``MODULE[:ATTR]`` of the app under test, as for ``taskq worker -A``: ``--taskq-app``,
    else the ``taskq_app`` ini value, else ``TASKQ_APP``, else ``[tool.taskq] app`` in
    pyproject.toml. Override this fixture to test another app (``taskq_worker`` runs it too)."""
    from taskq.cli.loader import app_path

    explicit = pytestconfig.getoption("taskq_app", None) or pytestconfig.getini("taskq_app")
    found = app_path(str(explicit) if explicit else None)
    if not found:
        pytest.fail(NO_APP, pytrace=False)
    return found


@pytest.fixture
def taskq_config() -> dict[str, Any]:
    """Settings of the app under test, over its own (like ``celery_config``); override it in a
    conftest.py for a folder of tests, or use ``@pytest.mark.taskq(**settings)`` for one test.
    ``taskq_worker`` passes them to the worker as ``TASKQ_*`` variables. Default:
    :data:`DEFAULT_CONFIG` (short retry backoff without jitter, short reads, fast heartbeat)."""
    return dict(DEFAULT_CONFIG)


def _settings(request: pytest.FixtureRequest, config: dict[str, Any]) -> dict[str, Any]:
    """``config``, then the ``taskq`` markers from the module's down to the test's own."""
    merged = dict(config)
    for mark in reversed(list(request.node.iter_markers("taskq"))):
        if mark.args:
            pytest.fail("@pytest.mark.taskq takes settings as keywords only", pytrace=False)
        merged.update(mark.kwargs)
    return merged


@pytest.fixture
def taskq_app(
    request: pytest.FixtureRequest, taskq_app_path: str, taskq_config: dict[str, Any]
) -> Iterator[App]:
    """The app under test (the one ``taskq_app_path`` names), with ``taskq_config`` and the
    test's ``taskq`` marker applied, pointed at ``taskq_redis_url`` (emptied before and after
    the test) and made the current app (for shared tasks).

    With ``eager=True`` (``@pytest.mark.taskq(eager=True)``) its tasks run inline at
    ``delay()`` and no Redis is started. Its settings are restored after the test.
    """
    from taskq.cli.loader import load_app
    from taskq.errors import ConfigError
    from taskq.testing import override

    try:
        app = load_app(taskq_app_path)
    except ConfigError as exc:
        pytest.fail(f"taskq_app: {exc}", pytrace=False)
    settings = _settings(request, taskq_config)
    if not settings.get("eager", app.settings.eager):
        settings["redis_url"] = request.getfixturevalue("taskq_redis_url")
    with override(app, **settings):
        yield app.set_current()


@pytest.fixture
def taskq_drain(taskq_app: App) -> Drain:
    """``taskq.testing.drain`` on ``taskq_app``: ``taskq_drain()`` runs the ready jobs of the
    app's queue in the test's process and returns a ``DrainResult``; it takes drain's keyword
    arguments (``queues``, ``max_jobs``, ``timeout_s``, ``wait_for_retries``)."""
    from taskq.testing import drain

    if taskq_app.settings.eager:
        pytest.fail("taskq_drain: the app is eager, its jobs ran at delay()", pytrace=False)

    def run(
        *,
        queues: Iterable[str] | None = None,
        max_jobs: int | None = None,
        timeout_s: float = 10.0,
        wait_for_retries: bool = False,
    ) -> DrainResult:
        return drain(
            taskq_app,
            queues=queues,
            max_jobs=max_jobs,
            timeout_s=timeout_s,
            wait_for_retries=wait_for_retries,
        )

    return run


# -- a worker ----------------------------------------------------------------------------------


@pytest.fixture
def taskq_worker_args() -> list[str]:
    """More ``taskq worker`` options for ``taskq_worker``; override to change them. Default:
    one child, and 5 s for running jobs to finish at the end of the test. Without ``-Q`` the
    worker serves the app's queue, as ``taskq worker`` does."""
    return ["--concurrency", "1", "--grace", "5"]


@pytest.fixture
def taskq_worker(
    request: pytest.FixtureRequest,
    taskq_app: App,
    taskq_app_path: str,
    taskq_config: dict[str, Any],
    taskq_worker_args: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerProcess]:
    """A real ``taskq worker -A <taskq_app_path>`` process on ``taskq_app``'s Redis for the
    test's duration, registered before the test starts and stopped warm (SIGTERM) after it.

    The worker gets ``taskq_config`` and the marker's settings as ``TASKQ_*`` variables (settings
    the app's module passes to ``App()`` win, as under any worker) and this process's
    ``sys.path``. It is a :class:`~taskq.contrib.worker_process.WorkerProcess`: ``pid``,
    ``output()``, ``wait_for_jobs(n)``, ``wait_idle()``, ``state()``, ``stop()``, ``kill()``.
    The test fails if the worker exits on its own or does not stop cleanly.
    """
    from taskq.contrib.worker_process import WorkerProcess

    if taskq_app.settings.eager:
        pytest.fail("taskq_worker: the app is eager, no worker can run its jobs", pytrace=False)
    worker = WorkerProcess(
        taskq_app,
        taskq_app_path,
        taskq_worker_args,
        settings={k: v for k, v in _settings(request, taskq_config).items() if k != "redis_url"},
        log_path=tmp_path_factory.mktemp("taskq-worker") / "worker.log",
        cwd=Path.cwd(),
    )
    try:
        worker.wait_ready()
    except (RuntimeError, TimeoutError) as exc:
        worker.kill()
        pytest.fail(f"taskq_worker: {exc}", pytrace=False)
    yield worker
    if worker.stopped:  # the test stopped or killed it itself
        return
    code = worker.stop()
    if code != 0:
        pytest.fail(
            f"taskq_worker exited with {code}; its output:\n{worker.output()[-4000:]}",
            pytrace=False,
        )
