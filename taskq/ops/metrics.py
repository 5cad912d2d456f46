"""Prometheus metrics for ``taskq worker --metrics-port`` (the ``taskq[metrics]`` extra).

The same port answers ``/scale`` with the autoscaling signal of the worker's queues as JSON
(:func:`taskq.worker.scaling.document`, for KEDA's metrics-api trigger); every other path is the
Prometheus exposition, which carries that signal as ``taskq_desired_processes``.

Children count jobs in prometheus_client's multiprocess mode: each child writes its own
mmap'd files into one directory, and a small server process forked by the master serves
their sum (``MultiProcessCollector``) plus queue depths read from Redis at scrape time. The
server is a process rather than a thread of the master because the master forks children for
as long as it runs, and forking a process that has threads is unsafe (deprecated in 3.12).

prometheus_client picks its multiprocess mode when it is first imported, so this module
imports it only inside functions, after :func:`enable_multiprocess` set the directory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from taskq.errors import BrokerError, ConfigError, TaskNotFound
from taskq.middleware import Middleware
from taskq.ops.queue_metrics import QueueDepth
from taskq.worker.outcome import COUNTED

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from prometheus_client import CollectorRegistry

    from taskq.config import Settings
    from taskq.registry import Registry
    from taskq.worker.outcome import Outcome

logger = logging.getLogger(__name__)

ENV = "PROMETHEUS_MULTIPROC_DIR"
INSTALL_HINT = "--metrics-port needs prometheus-client: pip install 'taskq[metrics]'"
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

SCALE_PATH = "/scale"
"""Where the metrics port serves the autoscaling signal as JSON (KEDA metrics-api)."""

UNKNOWN_TASK = "unknown"
"""The task label of jobs whose task the worker does not have."""
UNDECODABLE = "(undecodable)"
"""The task label of jobs whose body could not be read."""

_created_dir: Path | None = None


def enable_multiprocess() -> Path:
    """Point prometheus_client at a multiprocess directory (a new temporary one unless
    ``PROMETHEUS_MULTIPROC_DIR`` is set). Call it before the app is imported, as the app may
    import prometheus_client itself.

    Raises:
        ConfigError: prometheus-client is not installed, or was already imported without
            multiprocess mode.
    """
    global _created_dir
    if importlib.util.find_spec("prometheus_client") is None:
        raise ConfigError(INSTALL_HINT)
    if not os.environ.get(ENV):
        _created_dir = Path(tempfile.mkdtemp(prefix="taskq-metrics-"))
        os.environ[ENV] = str(_created_dir)
    from prometheus_client import values

    if values.ValueClass.__name__ != "MmapedValue":
        raise ConfigError(
            f"prometheus_client was imported before multiprocess mode was set up; "
            f"set {ENV} to an empty directory before starting the worker"
        )
    return Path(os.environ[ENV])


class Metrics(Middleware):
    """Job counters and durations from every child, served with queue depths on ``port``.

    Binds the port at once, so a busy port fails the worker's start, not its first scrape.

    Args:
        tasks: the worker's tasks. Only these are labelled by name; a job of any other task
            (its name comes from the job body: anyone who can enqueue can make one up) is
            labelled ``unknown``, so made-up names cannot grow the number of series.

    Raises:
        ConfigError: see :func:`enable_multiprocess`, or the port cannot be bound.
    """

    def __init__(
        self,
        *,
        port: int,
        redis_url: str,
        tasks: Registry,
        host: str = "",
        settings: Settings | None = None,
    ) -> None:
        self.tasks = tasks
        self.path = enable_multiprocess()
        self.depth = QueueDepth(redis_url, settings=settings)
        self._jobs = _job_metrics()
        try:
            self._server = _bind(host, port, self._registry(), self.depth)
        except ConfigError:
            self._remove_dir()
            raise
        self._server_pid = 0
        self._lifeline = -1

    def _registry(self) -> CollectorRegistry:
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.path))  # type: ignore[no-untyped-call]
        registry.register(self.depth)
        return registry

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def worker_start(self, queues: Sequence[str]) -> None:
        """Fork the server process, then drop the master's copy of the listening socket.

        The server holds the read end of a pipe whose write end only the master keeps: when
        the master is gone (even by SIGKILL) the pipe closes and the server leaves at once,
        freeing the port and removing the files it served.
        """
        self.depth.queues = tuple(queues)
        lifeline_r, self._lifeline = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(self._lifeline)
            _serve(self._server, lifeline_r, self.port, self.path if _created_dir else None)
        os.close(lifeline_r)
        self._server_pid = pid
        self._server.server_close()
        logger.info("metrics on :%d (pid %d, files in %s)", self.port, pid, self.path)

    def child_start(self) -> None:
        """A child must not keep the server's lifeline open: only the master's death counts."""
        with contextlib.suppress(OSError):
            os.close(self._lifeline)

    def after_job(self, outcome: Outcome) -> None:
        labels = (outcome.delivery.queue, self._task_label(outcome))
        for name in COUNTED[outcome.kind] or (outcome.kind,):  # ended without a count of its own
            self._jobs[name].labels(*labels).inc()
        if outcome.duration_s > 0:
            self._jobs["duration"].labels(*labels).observe(outcome.duration_s)

    def _task_label(self, outcome: Outcome) -> str:
        if outcome.msg is None:
            return UNDECODABLE
        try:
            return self.tasks.get(outcome.msg.task).name
        except TaskNotFound:
            return UNKNOWN_TASK

    def worker_stop(self) -> None:
        """Stop the server process and remove the directory if this process made it."""
        if self._server_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._server_pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._server_pid, 0)
        self._remove_dir()

    def _remove_dir(self) -> None:
        if _created_dir is not None and _created_dir == self.path:
            remove_created_dir()


def remove_created_dir() -> None:
    """Remove the multiprocess directory if :func:`enable_multiprocess` created it."""
    if _created_dir is not None:
        shutil.rmtree(_created_dir, ignore_errors=True)


def _job_metrics() -> dict[str, Any]:
    """Per-child metrics; registry=None, since the server reads them from the directory."""
    from prometheus_client import Counter, Histogram

    labels = ("queue", "task")
    return {
        "processed": Counter("taskq_jobs_processed", "Jobs that succeeded.", labels, registry=None),
        "failed": Counter(
            "taskq_jobs_failed",
            "Runs that failed (retried or dead-lettered).",
            labels,
            registry=None,
        ),
        "retried": Counter(
            "taskq_jobs_retried", "Failed runs scheduled for a retry.", labels, registry=None
        ),
        "dead": Counter(
            "taskq_jobs_dead_lettered",
            "Jobs moved to the dead-letter stream.",
            labels,
            registry=None,
        ),
        "expired": Counter(
            "taskq_jobs_expired", "Jobs not started before they expired.", labels, registry=None
        ),
        "cancelled": Counter(
            "taskq_jobs_cancelled", "Running jobs stopped by a cancel.", labels, registry=None
        ),
        "yielded": Counter(
            "taskq_jobs_yielded",
            "Resumable runs that gave their job back (warm shutdown, max_run_s).",
            labels,
            registry=None,
        ),
        "snoozed": Counter(
            "taskq_jobs_snoozed", "Runs that snoozed (taskq.Snooze).", labels, registry=None
        ),
        "paused": Counter(
            "taskq_jobs_set_aside", "Jobs set aside by a pause.", labels, registry=None
        ),
        "duration": Histogram(
            "taskq_job_duration_seconds",
            "Time a task ran, whatever its outcome.",
            labels,
            buckets=DURATION_BUCKETS_S,
            registry=None,
        ),
    }


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: scrapes every few seconds would drown the worker's log."""


def _bind(host: str, port: int, registry: CollectorRegistry, depth: QueueDepth) -> WSGIServer:
    from wsgiref.simple_server import make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    app = _with_scale(make_wsgi_app(registry), depth)
    try:
        return make_server(host, port, app, ThreadingWSGIServer, handler_class=_Quiet)
    except OSError as exc:
        raise ConfigError(f"--metrics-port {port}: {exc.strerror or exc}") from None


def _with_scale(metrics: WSGIApplication, depth: QueueDepth) -> WSGIApplication:
    """``/scale``: the signal as JSON (503 with the error while Redis cannot be read);
    any other path: the metrics."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Any:
        if environ.get("PATH_INFO") != SCALE_PATH:
            return metrics(environ, start_response)
        from taskq.worker.scaling import document

        try:
            status, body = "200 OK", document(depth.signals())
        except BrokerError as exc:
            status, body = "503 Service Unavailable", {"error": str(exc)}
        data = json.dumps(body).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        start_response(status, headers)
        return [data]

    return app


def _serve(server: WSGIServer, lifeline: int, port: int, owned_dir: Path | None) -> None:
    """Body of the server process; it leaves when stopped or when its master is gone."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the master decides when to stop
        with contextlib.suppress(ImportError):
            import setproctitle

            setproctitle.setproctitle(f"taskq: metrics :{port}")
        watch = threading.Thread(target=_exit_without, args=(lifeline, owned_dir), daemon=True)
        watch.start()
        server.serve_forever()
    finally:
        os._exit(0)


def _exit_without(lifeline: int, owned_dir: Path | None) -> None:
    """Wait for the master's end of the pipe to close, then clean up and leave."""
    while os.read(lifeline, 1):
        pass
    if owned_dir is not None:
        shutil.rmtree(owned_dir, ignore_errors=True)
    os._exit(0)
