"""The taskq command: dead letters, app discovery, JSON logs, recycling, the dev server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.cli import main
from taskq.message import Message
from tests import tasks
from tests.conftest import ROOT, WorkerProcess, wait_until, worker_env
from tests.redis_server import free_port

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]


def taskq(redis_url: str, *args: str, input: str | None = None) -> Any:
    result = CliRunner().invoke(main, ["--redis-url", redis_url, *args], input=input)
    return result


@pytest.fixture
def three_dead(task_app: App, start_worker: StartWorker, r: redis.Redis) -> list[str]:
    for tag in ("a", "b", "c"):
        tasks.rejects.delay(tag)
    w = start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 3, message="three dead letters")
    w.stop()
    return [i.decode() for i, _ in r.xrange("tasks:deadletter")]


def test_deadletter_list_and_show(redis_url: str, three_dead: list[str]) -> None:
    listed = taskq(redis_url, "-A", "tests.tasks", "deadletter", "list")
    assert listed.exit_code == 0, listed.output
    assert all(i in listed.output for i in three_dead)
    assert "ValueError: not retryable" in listed.output
    as_json = json.loads(taskq(redis_url, "deadletter", "list", "--json").output)
    assert [j["dead_id"] for j in as_json] == list(reversed(three_dead))
    assert {j["task"] for j in as_json} == {"tests.tasks.rejects"}
    shown = json.loads(taskq(redis_url, "deadletter", "show", three_dead[0], "--json").output)
    assert shown["body"]["args"] == ["a"] and "Traceback" in shown["traceback"]
    human = taskq(redis_url, "deadletter", "show", three_dead[0]).output
    assert "error_type: ValueError" in human and "traceback:" in human
    missing = taskq(redis_url, "deadletter", "show", "1-1")
    assert missing.exit_code == 1 and "no dead-lettered job 1-1" in missing.output


def test_deadletter_retry_moves_jobs_back_with_attempts_reset(
    redis_url: str, three_dead: list[str], r: redis.Redis
) -> None:
    out = taskq(redis_url, "deadletter", "retry", three_dead[0])
    assert out.exit_code == 0 and "re-enqueued 1 job(s)" in out.output
    assert r.xlen("tasks:deadletter") == 2
    [(_, fields)] = r.xrange("tasks:normal")
    body = msgpack.unpackb(fields[b"body"], raw=False)
    assert body["args"] == ["a"] and body["retries"] == 0
    out = taskq(redis_url, "deadletter", "retry", "--all")
    assert "re-enqueued 2 job(s)" in out.output
    assert r.xlen("tasks:deadletter") == 0 and r.xlen("tasks:normal") == 3


def test_deadletter_purge_asks_and_honours_older_than(
    redis_url: str, three_dead: list[str], r: redis.Redis
) -> None:
    refused = taskq(redis_url, "deadletter", "purge", input="n\n")
    assert refused.exit_code == 1 and r.xlen("tasks:deadletter") == 3
    none_old = taskq(redis_url, "deadletter", "purge", "--older-than", "1h", "-y")
    assert "nothing to purge" in none_old.output and r.xlen("tasks:deadletter") == 3
    bad = taskq(redis_url, "deadletter", "purge", "--older-than", "soon", "-y")
    assert bad.exit_code == 2
    done = taskq(redis_url, "deadletter", "purge", input="y\n")
    assert "deleted 3 job(s)" in done.output and r.xlen("tasks:deadletter") == 0


def test_commands_give_one_line_when_redis_is_unreachable() -> None:
    out = taskq("redis://127.0.0.1:1/0", "deadletter", "list")
    assert out.exit_code == 1
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and "cannot reach Redis" in lines[0] and "taskq server" in lines[0]


def test_app_from_pyproject_and_json_logs(tmp_path: Path, redis_url: str, r: redis.Redis) -> None:
    # Given: a project whose pyproject.toml names the app, and no -A flag.
    (tmp_path / "pyproject.toml").write_text('[tool.taskq]\napp = "myjobs:app"\n')
    (tmp_path / "myjobs.py").write_text(
        "from taskq import App\napp = App()\n@app.task(name='myjobs.hello')\n"
        "def hello(name):\n    print('hello', name)\n"
    )
    producer = App(redis_url)
    producer.enqueue(Message("myjobs.hello", ("you",)))
    producer.close()
    env = worker_env(redis_url, TASKQ_LOG_FORMAT="json")
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{tmp_path}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskq", "worker", "-c", "1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: r.xlen("tasks:normal") == 0, message="the job to run")
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=20)
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    done = [x for x in records if x.get("task") == "myjobs.hello"]
    assert done and done[0]["outcome"] == "ok" and done[0]["level"] == "info"
    assert {"job_id", "priority", "duration_ms", "attempt"} <= set(done[0])


def test_max_memory_per_child_recycles(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.echo.map(range(3))
    start_worker("-A", "tests.tasks", "-c", "1", "--max-memory-per-child", "1")
    wait_until(lambda: r.llen("runs") == 3, message="3 jobs")
    pids = {msgpack.unpackb(x)["pid"] for x in r.lrange("runs", 0, -1)}
    assert len(pids) == 3


def test_bound_task_sees_its_request(make_app: Callable[..., App]) -> None:
    app = make_app(eager=True)
    seen: list[Any] = []

    @app.task(bind=True, name="bound.t")
    def bound(self: Any, x: int) -> None:
        seen.append((self.name, self.request.task, self.request.attempt, x))

    bound.delay(5)
    assert seen == [("bound.t", "bound.t", 1, 5)]


def test_taskq_server_starts_a_persistent_private_redis(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskq",
            "server",
            "--port",
            str(port),
            "--dir",
            str(tmp_path / "d"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert f"redis://127.0.0.1:{port}/0" in first
        client = redis.Redis(port=port)
        wait_until(lambda: _pings(client), message="the server to answer")
        config = client.config_get("appendonly") | client.config_get("appendfsync")
        assert config == {"appendonly": "yes", "appendfsync": "everysec"}
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    # Redis 7 keeps the AOF in a folder; 6.2 (the embedded extra's) in one file.
    aof = [tmp_path / "d" / "appendonlydir", tmp_path / "d" / "appendonly.aof"]
    assert any(p.exists() for p in aof)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_taskq_server_refuses_a_busy_port(redis_server: str, tmp_path: Path) -> None:
    port = redis.Redis.from_url(redis_server).connection_pool.connection_kwargs["port"]
    out = CliRunner().invoke(main, ["server", "--port", str(port), "--dir", str(tmp_path)])
    assert out.exit_code == 1 and "is in use" in out.output


def test_deadletter_ids_are_checked_and_reported(
    redis_url: str, three_dead: list[str], r: redis.Redis
) -> None:
    bad = taskq(redis_url, "deadletter", "show", "nonsense")
    assert bad.exit_code == 1 and "no dead-lettered job nonsense" in bad.output
    out = taskq(redis_url, "deadletter", "retry", three_dead[0], three_dead[0], "1-0", "junk")
    assert out.exit_code == 1
    assert "re-enqueued 1 job(s)" in out.output
    assert "not re-enqueued 1-0: no such dead-lettered job" in out.output
    assert "not re-enqueued junk: no such dead-lettered job" in out.output
    assert r.xlen("tasks:normal") == 1 and r.xlen("tasks:deadletter") == 2
    both = taskq(redis_url, "deadletter", "retry", three_dead[1], "--all")
    assert both.exit_code == 2 and r.xlen("tasks:deadletter") == 2


def test_bad_queue_names_are_refused(redis_url: str) -> None:
    for args in (
        ["deadletter", "list", "-Q", "a b"],
        ["inspect", "-Q", "bad:name"],
        ["inspect", "-Q", ","],
    ):
        out = taskq(redis_url, *args)
        assert out.exit_code != 0 and "queue" in out.output.lower(), (args, out.output)


def test_redis_errors_other_than_outages_are_not_called_unreachable(
    redis_url: str, r: redis.Redis
) -> None:
    r.set("tasks:deadletter", "not a stream")
    out = taskq(redis_url, "deadletter", "list")
    assert out.exit_code == 1
    assert "refused" in out.output and "WRONGTYPE" in out.output
    assert "cannot reach" not in out.output


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--port", "99999"], "99999"), (["--port", "0"], "0")],
)
def test_taskq_server_checks_its_port(args: list[str], message: str) -> None:
    out = CliRunner().invoke(main, ["server", *args])
    assert out.exit_code == 2 and message in out.output


def test_taskq_server_reports_an_unusable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    port = free_port()
    out = CliRunner().invoke(main, ["server", "--port", str(port), "--dir", str(blocker / "d")])
    assert out.exit_code == 1 and "cannot use" in out.output and "Traceback" not in out.output
