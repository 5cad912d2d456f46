"""``taskq worker`` as a child process of a test: what the pytest plugin's ``taskq_worker``
fixture gives a test (see docs/testing.md, "The pytest plugin").

The worker is the real command, started the way an operator starts it (``python -m taskq
worker -A MODULE:ATTR``), on the test's Redis. Everything a test waits for is read from Redis
with taskq's own inspection API (:class:`~taskq.ops.inspect.Inspector`): the worker's registry
record for its start and its job counters, the queues' figures for idleness.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from taskq.app import App
from taskq.ops.inspect import Inspector, WorkerState

T = TypeVar("T")

POLL_S = 0.02
"""How often the waits below read Redis."""


def child_env(settings: Mapping[str, object]) -> dict[str, str]:
    """The environment of a worker that must import what this process imports, with ``settings``
    as ``TASKQ_*`` variables.

    ``PYTHONPATH`` gets this process's ``sys.path`` (the child's ``site`` drops duplicates), so
    the worker imports the same app and the same taskq as the test, whatever pytest added
    to the path (rootdir, ``pythonpath`` ini option, conftest folders).
    """
    env = dict(os.environ)
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in settings.items():
        env[f"TASKQ_{name.upper()}"] = env_value(value)
    return env


def env_value(value: object) -> str:
    """A setting as its ``TASKQ_*`` variable spells it (what ``Settings.from_env`` reads)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list | tuple):  # signing_keys: comma-separated
        return ",".join(str(v) for v in value)
    return str(value)


class WorkerProcess:
    """A ``taskq worker`` subprocess serving ``app``'s Redis, in a process group of its own.

    Args:
        app: the test's app; the worker imports the same one from ``app_path`` and talks to
            ``app.settings.redis_url``.
        app_path: ``MODULE[:ATTR]`` as for ``taskq worker -A``.
        args: more ``taskq worker`` options (``-c 2``, ``-Q a,b``, ...).
        settings: settings the worker's app gets as ``TASKQ_*`` variables (those the app's
            module passes to ``App()`` itself win over them, as under any worker).
        log_path: where its stdout and stderr go.
        cwd: its working directory (``taskq worker`` also imports from there).

    Attributes:
        queues: the queues it serves, from its registry record (set by :meth:`wait_ready`).
    """

    def __init__(
        self,
        app: App,
        app_path: str,
        args: Sequence[str] = (),
        *,
        settings: Mapping[str, object] | None = None,
        log_path: Path,
        cwd: Path | None = None,
    ) -> None:
        self.app = app
        self.app_path = app_path
        self.log_path = log_path
        self.queues: tuple[str, ...] = ()
        self.stopped = False
        env = child_env({**(settings or {}), "redis_url": app.settings.redis_url})
        cmd = [sys.executable, "-m", "taskq", "worker", "-A", app_path, *args]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def __repr__(self) -> str:
        return f"<WorkerProcess pid={self.pid} app={self.app_path} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        """The worker master's pid."""
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """Its exit code, or None while it runs."""
        return self.proc.poll()

    def output(self) -> str:
        """Everything it has written so far (its log lines, tracebacks included)."""
        return self.log_path.read_text(errors="replace")

    # -- waiting ---------------------------------------------------------------------------

    def state(self) -> WorkerState | None:
        """Its registry record as of its last heartbeat (None before it registered)."""
        queues = self.queues or tuple(self.app.queues())
        found = [w for w in Inspector(self.app.reader, queues).workers() if w.pid == self.pid]
        return found[0] if found else None

    def wait_ready(self, timeout_s: float = 20.0) -> WorkerState:
        """Wait until it has registered (it then serves its queues, or is forking to).

        Raises:
            TimeoutError: not registered in time (e.g. it serves none of the app's queues).
            RuntimeError: it exited first (an import error of the app, say).
        """
        state = self._poll(self.state, timeout_s, "to register")
        self.queues = state.queues
        return state

    def wait_for_jobs(self, n: int, timeout_s: float = 10.0) -> WorkerState:
        """Wait until it has finished ``n`` runs since it started (each retry is a run, as in
        ``drain``); returns its record, whose ``processed``, ``failed``, ``retried`` and
        ``dead`` counters tell how they ended. The record is as fresh as the worker's last
        heartbeat (``heartbeat_interval_ms``: 100 ms under the plugin's ``taskq_config``).

        Raises:
            TimeoutError: fewer runs by then. RuntimeError: it exited.
        """

        def done() -> WorkerState | None:
            state = self.state()
            return state if state is not None and state.processed + state.failed >= n else None

        return self._poll(done, timeout_s, f"to finish {n} run(s)")

    def wait_idle(self, timeout_s: float = 10.0, *, wait_for_retries: bool = False) -> None:
        """Wait until its queues have nothing waiting and nothing delivered but unfinished
        (read straight from Redis, not from the heartbeat). With ``wait_for_retries``, also
        until no failed job waits for its retry and no delayed job for its time.

        Raises:
            TimeoutError: still busy by then. RuntimeError: it exited.
        """
        inspector = Inspector(self.app.reader, self.queues or self.app.queues())

        def idle() -> bool:
            for q in inspector.queue_stats():
                if q.waiting or q.pending:
                    return False
                if wait_for_retries and (q.retrying or q.scheduled):
                    return False
            return True

        self._poll(idle, timeout_s, "to be idle")

    def _poll(self, check: Callable[[], T | None], timeout_s: float, what: str) -> T:
        deadline = time.monotonic() + timeout_s
        while True:
            value = check()
            if value:
                return value
            if self.returncode is not None:
                raise RuntimeError(
                    f"taskq worker exited with {self.returncode} while waiting for it {what}; "
                    f"its output:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"taskq worker did not get {what} in {timeout_s}s; its output:\n{self._tail()}"
                )
            time.sleep(POLL_S)

    def _tail(self, chars: int = 4000) -> str:
        return self.output()[-chars:]

    # -- stopping --------------------------------------------------------------------------

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the master (SIGTERM: warm shutdown; twice: cold)."""
        self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 30.0) -> int:
        """Warm shutdown: SIGTERM, then wait for running jobs and the exit; returns the exit
        code (0 after a clean warm shutdown). Stopping a stopped worker returns its code.

        Raises:
            TimeoutError: it had not exited in time (it is then killed).
        """
        self.stopped = True
        if self.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise TimeoutError(
                    f"taskq worker did not stop in {timeout_s}s; its output:\n{self._tail()}"
                ) from None
        return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the master and its children at once (a crash)."""
        self.stopped = True
        if self.proc.poll() is None:  # else its pid (and group id) may be another's by now
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
