"""Health probes of ``taskq worker --health-port``: ``/live`` and ``/ready`` for an
orchestrator (Kubernetes probes), answered by the master between its supervision ticks.

The master forks children for as long as it runs, and forking a process that has threads is
unsafe (see :mod:`taskq.ops.metrics`), so there is no server thread: the master waits for
its next tick on the listening socket instead of sleeping, and answers each probe from its
own state. Liveness then needs no clock of its own: a master that stopped supervising (hung,
stopped, dead) answers nothing, and the probe's timeout fails it at once. A connection gets
:data:`READ_TIMEOUT_S` to send its request line, so a slow client delays the supervision by
that much at most.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Callable
from typing import NamedTuple

from taskq.errors import ConfigError

READ_TIMEOUT_S = 0.2
MAX_PER_WAIT = 8
"""Probes answered per tick at most (the rest wait in the listen backlog)."""
LIVE_PATH, READY_PATH = "/live", "/ready"


class Probe(NamedTuple):
    """What the master says about itself: ``ready`` with the reason when it is not."""

    ready: bool
    reason: str = "ready"


class HealthServer:
    """The listening socket, bound at once (a busy port fails the worker's start)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        try:
            self._sock = socket.create_server((host, port), backlog=16)
        except OSError as exc:
            raise ConfigError(f"--health-port {port}: {exc.strerror or exc}") from None
        self._sock.setblocking(False)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def wait(self, timeout_s: float, probe: Callable[[], Probe]) -> None:
        """Sleep ``timeout_s``, answering the probes that arrive meanwhile."""
        deadline = time.monotonic() + timeout_s
        answered = 0
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._sock], [], [], left)
            if ready and answered < MAX_PER_WAIT:
                answered += 1
                self._answer(probe)
            elif ready:
                time.sleep(left)

    def _answer(self, probe: Callable[[], Probe]) -> None:
        try:
            conn, _ = self._sock.accept()
        except OSError:  # gone before we took it
            return
        with conn, contextlib.suppress(OSError):
            conn.settimeout(READ_TIMEOUT_S)
            path = _path(conn.recv(1024))
            status, body = _route(path, probe)
            conn.sendall(_response(status, body))

    def close(self) -> None:
        """Stop listening (a child closes its inherited copy at once)."""
        self._sock.close()


def _path(request: bytes) -> str:
    parts = request.split(b"\r\n", 1)[0].split()
    return parts[1].decode("ascii", "replace").split("?", 1)[0] if len(parts) >= 2 else ""


def _route(path: str, probe: Callable[[], Probe]) -> tuple[str, str]:
    if path == LIVE_PATH:
        return "200 OK", "live\n"
    if path == READY_PATH:
        state = probe()
        return ("200 OK" if state.ready else "503 Service Unavailable"), state.reason + "\n"
    return "404 Not Found", "try /live or /ready\n"


def _response(status: str, body: str) -> bytes:
    data = body.encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + data


def readiness(*, stopping: bool, redis_reachable: bool, children: int) -> Probe:
    """``/ready``: not shutting down, Redis reachable, and a child to fetch."""
    if stopping:
        return Probe(False, "shutting down")
    if not redis_reachable:
        return Probe(False, "Redis unreachable")
    if not children:
        return Probe(False, "no child running")
    return Probe(True)


def pause(server: HealthServer | None, seconds: float, probe: Callable[[], Probe]) -> None:
    """The master's sleep between ticks: answering probes if it has a health port."""
    if server is None:
        time.sleep(seconds)
    else:
        server.wait(seconds, probe)
