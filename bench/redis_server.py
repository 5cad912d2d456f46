"""A private, throw-away redis-server on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from redis import Redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """``redis-server`` without persistence, started and stopped by the bench."""

    def __init__(self, workdir: Path, binary: str = "redis-server") -> None:
        self.workdir = workdir
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis:// URL of the server, database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Redis:
        """A new client connection."""
        return Redis(host="127.0.0.1", port=self.port)

    def version(self) -> str:
        """The server's version string."""
        return str(self.client().info("server")["redis_version"])

    def pin(self, cpu: int) -> None:
        """Run the server on ``cpu`` only."""
        assert self.proc is not None
        os.sched_setaffinity(self.proc.pid, {cpu})

    def flush(self) -> None:
        """FLUSHALL: every measurement starts from an empty Redis."""
        self.client().flushall()

    def start(self) -> None:
        """Start the server and wait (bounded) until it answers PING."""
        argv = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.workdir / "redis-server.log"),
        ]
        self.proc = subprocess.Popen(argv, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except Exception:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not start (see {self.workdir / 'redis-server.log'})")

    def stop(self) -> None:
        """Terminate the server (SIGKILL if it lingers)."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
