"""Helpers for the tests that run the examples and the Procfile as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

import redis

from examples import tasks
from tests.conftest import ROOT, wait_until, worker_env


def run_example(module: str, *args: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    """``python -m examples.<module> ...`` as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", f"examples.{module}", *args],
        cwd=ROOT,
        env=worker_env(redis_url),
        capture_output=True,
        text=True,
        timeout=45,
    )


def results(r: redis.Redis) -> dict[str, dict[str, Any]]:
    return {k.decode(): json.loads(v) for k, v in r.hgetall(tasks.RESULTS_KEY).items()}


def http(method: str, url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urlopen(Request(url, method=method), timeout=5) as response:
            return response.status, json.loads(response.read())
    except HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def answers(url: str) -> bool:
    try:
        return http("GET", url)[0] == 200
    except (URLError, ConnectionError):
        return False


@contextlib.contextmanager
def web_process(command: list[str] | str, redis_url: str, port: int) -> Iterator[str]:
    """The example web app on ``port``; SIGTERM at the end must stop it cleanly."""
    env = worker_env(redis_url, PORT=str(port), HOST="127.0.0.1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(
        command,
        shell=isinstance(command, str),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(base + "/"), message="the web app to answer")
        yield base
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
