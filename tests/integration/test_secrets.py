"""Secrets never leak (issue 17, point 5): a Redis password and a signing key, searched for in
everything a running deployment shows."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.cli import main
from taskq.errors import BrokerError
from taskq.ops.devserver import free_port
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until
from tests.redis_server import RedisServer

PASSWORD = "pw-never-shown-7f3a"
KEY = "signing-key-never-shown-91c2"
SECRETS = (PASSWORD, KEY)


@pytest.fixture
def locked(tmp_path: Path, task_app: App) -> Iterator[str]:
    """A server that wants ``PASSWORD``; ``tests.tasks.app`` points at it and signs."""
    server = RedisServer(tmp_path / "locked", extra_args=["--requirepass", PASSWORD])
    server.start()
    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    before = task_app.settings
    task_app.close()
    task_app.settings = before.replace(redis_url=url, signing_keys=(KEY,))
    yield url
    task_app.close()
    task_app.settings = before
    server.kill()


def _titles(pgid: int) -> list[str]:
    """The process titles (``/proc/PID/cmdline``) of every process in the worker's group."""
    titles = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return titles


def _listens_on_loopback_only(port: int) -> bool:
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    rows += Path("/proc/net/tcp6").read_text().splitlines()[1:]
    local = [row.split()[1] for row in rows if row.split()[3] == "0A"]  # LISTEN
    mine = [addr for addr in local if addr.endswith(f":{port:04X}")]
    return bool(mine) and all(a.startswith("0100007F:") for a in mine)


def test_no_password_or_signing_key_in_anything_shown(
    locked: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    pytest.importorskip("prometheus_client")
    port = free_port()
    args = ("-A", "tests.tasks", "-c", "2", "--loglevel", "debug", "--metrics-port", str(port))
    w = start_worker(*args, url=locked, TASKQ_SIGNING_KEYS=KEY)
    r = redis.Redis.from_url(locked)
    tasks.echo.delay("fine")
    tasks.rejects.delay("dies")  # a dead letter with a traceback
    r.xadd("tasks:normal", {"task": "tests.tasks.echo", "body": msgpack.packb({"v": 1})})
    wait_until(lambda: r.xlen("tasks:deadletter") == 2, 20, message="two dead letters")
    wait_until(lambda: any(x.get("value") == "fine" for x in runs(r)), 20)
    wait_until(lambda: len(_titles(w.pid)) >= 3, 10, message="master and children")

    shown = [w.output(), *_titles(w.pid)]
    for command in (
        ["inspect"],
        ["inspect", "--json"],
        ["deadletter", "list"],
        ["deadletter", "list", "--json"],
        ["periodic", "list"],
    ):
        result = CliRunner().invoke(main, ["--redis-url", locked, "-A", "tests.tasks", *command])
        assert result.exit_code == 0, result.output
        shown.append(result.output)
        if command == ["inspect", "--json"]:
            assert json.loads(result.output)["queues"]  # the real report
    for dead_id, fields in r.xrange("tasks:deadletter"):
        shown.append(repr(fields))
        result = CliRunner().invoke(main, ["--redis-url", locked, "deadletter", "show", dead_id])
        shown.append(result.output)
    shown += [repr(v) for v in r.hgetall(f"tasks:worker:{_worker_id(r)}").values()]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        shown.append(reply.read().decode())
    assert _listens_on_loopback_only(port)  # --metrics-host defaults to 127.0.0.1

    wrong = locked.replace(PASSWORD, "wrong-" + PASSWORD)
    with pytest.raises(BrokerError) as refused:
        App(wrong).link.call("PING")
    shown += [str(refused.value), repr(refused.value)]
    result = CliRunner().invoke(main, ["--redis-url", wrong, "inspect"])
    assert result.exit_code != 0
    shown.append(result.output)
    app = App(locked, signing_keys=[KEY])
    shown += [repr(app), str(app), repr(app.settings), str(app.settings), repr(app.link)]

    leaks = [(secret, text) for text in shown for secret in SECRETS if secret in text]
    assert leaks == []
    assert "***" in repr(app) and "dies" in " ".join(shown)  # the real output was searched


def _worker_id(r: redis.Redis) -> str:
    [(member, _)] = r.zrange("tasks:workers", 0, -1, withscores=True)
    return str(member.decode())
