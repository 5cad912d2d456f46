"""Private redis-server processes for the test suite: free port, own data dir, killed at the end."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from taskq.server import server_args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server child process; ``kill()`` + ``start()`` restarts it on the same data."""

    def __init__(
        self, data_dir: Path, *, appendonly: bool = False, appendfsync: str = "everysec"
    ) -> None:
        self.data_dir = data_dir
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def start(self, timeout_s: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = server_args(self.port, self.data_dir, appendonly=self.appendonly)
        if self.appendonly:
            args += ["--appendfsync", self.appendfsync]
        with open(self.data_dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(redis.ConnectionError), redis.Redis(port=self.port) as c:
                if c.ping():
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server on port {self.port} did not start: "
                    f"{(self.data_dir / 'redis.log').read_text()[-2000:]}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: no shutdown save, exactly like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
