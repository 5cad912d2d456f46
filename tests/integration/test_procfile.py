"""The repository's Procfile: its lines run as honcho, foreman or a platform would run them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from examples import tasks
from taskq import App
from taskq.testing import override
from tests.conftest import FAST_SETTINGS, ROOT, wait_until, worker_env
from tests.examples_support import http, web_process
from tests.redis_server import free_port

pytestmark = pytest.mark.integration

LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def procfile() -> dict[str, str]:
    """Process types and their commands (the format honcho and foreman read)."""
    out: dict[str, str] = {}
    for raw in (ROOT / "Procfile").read_text().splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        m = LINE.match(raw)
        assert m, f"not a Procfile line: {raw!r}"
        out[m.group(1)] = m.group(2)
    return out


def procfile_env(redis_url: str, **extra: str) -> dict[str, str]:
    """A platform's environment: REDIS_URL set, taskq on PATH, no TASKQ_* but the given ones."""
    env = worker_env(redis_url)
    del env["TASKQ_REDIS_URL"]
    env.update(REDIS_URL=redis_url, **extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@contextlib.contextmanager
def shell(command: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``sh -c command`` in its own process group, SIGKILLed at the end whatever happens."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def example_app(redis_url: str) -> Iterator[App]:
    with override(tasks.app, redis_url=redis_url, **FAST_SETTINGS) as app:
        yield app


def test_procfile_declares_a_web_and_a_worker_process() -> None:
    lines = procfile()
    assert set(lines) == {"web", "worker", "asyncweb", "asyncworker"}
    for worker in ("worker", "asyncworker"):
        assert "${TASKQ_CONCURRENCY:-" in lines[worker]
        assert lines[worker].startswith("exec taskq worker ")


@pytest.mark.slow
def test_procfile_worker_runs_a_job_with_settings_from_the_environment(
    example_app: App, redis_url: str, r: redis.Redis, tmp_path: Path
) -> None:
    env = procfile_env(redis_url, TASKQ_CONCURRENCY="3", TASKQ_GRACE="5")
    with shell(procfile()["worker"], env, tmp_path / "worker.log") as proc:
        # given: the worker line running with REDIS_URL and TASKQ_CONCURRENCY from the environment
        job = tasks.send_welcome_email.delay(5)

        # then: the job completes
        raw = wait_until(
            lambda: r.hget(tasks.RESULTS_KEY, job.id), timeout_s=20, message="the job to complete"
        )
        assert json.loads(raw)["result"] == "welcome email sent to user 5"
        # and the worker registered with the concurrency the environment asked for
        workers = wait_until(lambda: r.zrange("tasks:workers", 0, -1), message="a heartbeat")
        assert len(workers) == 1
        assert r.hget(f"tasks:worker:{workers[0].decode()}", "concurrency") == b"3"

        # when: the platform stops the process group
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0
    log = (tmp_path / "worker.log").read_text()
    assert "3 children on tasks" in log and "warm shutdown" in log


@pytest.mark.slow
def test_procfile_web_line_serves_on_port(example_app: App, redis_url: str, r: redis.Redis) -> None:
    port = free_port()
    with web_process(procfile()["web"], redis_url, port) as base:
        status, body = http("POST", base + "/emails?user_id=9")
        assert status == 202
    assert r.xlen("tasks:high") == 1
    assert body["job_id"]


@pytest.mark.slow
def test_procfile_async_lines_serve_a_quote_end_to_end(
    redis_url: str, r: redis.Redis, tmp_path: Path
) -> None:
    pytest.importorskip("uvicorn")
    env = procfile_env(redis_url, TASKQ_CONCURRENCY="1", TASKQ_ASYNC_CONCURRENCY="8")
    with shell(procfile()["asyncworker"], env, tmp_path / "asyncworker.log"):
        with web_process(procfile()["asyncweb"], redis_url, free_port()) as base:
            status, body = http("POST", base + "/quotes?currency=JPY&amount=1000")
        assert (status, body["usd"]) == (200, 6.7)
        workers = wait_until(lambda: r.zrange("aio:workers", 0, -1), message="a heartbeat")
        assert r.hget(f"aio:worker:{workers[0].decode()}", "concurrency") == b"1"
