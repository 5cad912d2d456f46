"""Helpers of the dashboard tests: a dashboard subprocess and dead letters written directly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from taskq import App
from taskq.deadletter import WRITTEN, Deadletter
from taskq.keys import QueueKeys
from taskq.message import Message
from tests.conftest import ROOT, worker_env
from tests.redis_server import free_port


class DashboardProcess:
    """``taskq dashboard`` as a real subprocess on a free port; ``main_args`` go before the
    subcommand (``--redis-url``), ``env`` adds variables."""

    def __init__(
        self,
        redis_url: str,
        *args: str,
        log_path: Path,
        main_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.log_path = log_path
        cmd = [sys.executable, "-m", "taskq", "-A", "tests.dashboard_tasks", *main_args]
        self.proc = subprocess.Popen(
            [*cmd, "dashboard", "--port", str(self.port), *args],
            cwd=ROOT,
            env=worker_env(redis_url, **(env or {})),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_up()

    def _wait_up(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dashboard exited: {self.log_path.read_text()}")
            try:
                urllib.request.urlopen(self.url + "/static/dashboard.css", timeout=1).close()
                return
            except urllib.error.HTTPError:
                return  # up, asking for credentials
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"dashboard did not start: {self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def post(url: str, data: bytes = b"", headers: dict[str, str] | None = None) -> int:
    """POST and return the status (no redirect followed)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST")
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def add_deadletter(
    r: redis.Redis, app: App, task: str, *, args: tuple[object, ...] = (), error: str = "boom"
) -> tuple[str, str]:
    """Write one dead letter the way the worker does (fields of :class:`Deadletter`); returns
    its dead id and job id."""
    msg = Message(task, args, queue=app.settings.queue)
    entry = Deadletter(
        dead_id="",
        task=task,
        job_id=msg.id,
        body=app.encode(msg),
        error_type="RuntimeError",
        error=error,
        traceback=f"Traceback (most recent call last):\nRuntimeError: {error}",
        attempts=1,
        first_failure_ms=0,
        last_failure_ms=0,
        worker="host:1:abc:1:2",
        stream=QueueKeys(msg.queue).stream("normal"),
        entry_id="1-0",
    )
    fields = dict(zip(WRITTEN, entry.to_fields()[1::2], strict=True))
    now = int(time.time() * 1000)
    fields.update(first_failure_ms=now, last_failure_ms=now)
    dead_id = r.xadd(QueueKeys(msg.queue).deadletter, fields)  # type: ignore[arg-type]
    return dead_id.decode(), msg.id


# headless Chromium (Debian's chromium + chromium-driver, which .ci/run installs) through
# Selenium, against `taskq dashboard` and `taskq worker` subprocesses.

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium() -> Iterator[Any]:
    """Headless Chromium through Selenium (the ``browser`` fixture); skips without it."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(
            f"no browser: {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium "
            "chromium-driver) are needed for the end-to-end tests"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM  # a given browser and driver: Selenium downloads nothing
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def dashboards(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., DashboardProcess]]:
    """Starts dashboard processes (the ``start_dashboard`` fixture); stops them after."""
    started: list[DashboardProcess] = []

    def start(*args: str, **options: Any) -> DashboardProcess:
        log_path = tmp_path / f"dash-{len(started)}.log"
        d = DashboardProcess(redis_url, *args, log_path=log_path, **options)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
