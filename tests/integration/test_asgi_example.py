"""The asyncio example (examples/asgi.py, examples/async_tasks.py) end to end: the Starlette
app under uvicorn and a real ``taskq worker``, as a user runs them."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from tests.conftest import WorkerProcess, wait_until
from tests.examples_support import http, web_process
from tests.redis_server import free_port

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.integration


def test_async_endpoints_enqueue_and_await_results_from_async_tasks(
    start_worker: Callable[..., WorkerProcess], redis_url: str, r: redis.Redis
) -> None:
    cmd = [sys.executable, "-m", "examples.asgi"]
    with web_process(cmd, redis_url, free_port()) as base:
        # Given: the web app and a worker with one child serving the async tasks.
        w = start_worker("-A", "examples.async_tasks", "-c", "1", "--async-concurrency", "50")

        # When: a quote is asked for, the endpoint awaits the task's result.
        status, body = http("POST", base + "/quotes?currency=eur&amount=20")
        assert status == 200, body
        assert body["currency"] == "EUR" and body["usd"] == 21.6 and body["job"]
        assert r.hget("examples:rates", "EUR") == b"1.08"  # the task's own redis.asyncio call
        assert http("GET", base + f"/jobs/{body['job']}") == (
            200,
            {"job_id": body["job"], "state": "succeeded"},
        )

        # Twenty at once: each waits 0.2 s upstream; one child runs them together.
        t0 = time.monotonic()
        with ThreadPoolExecutor(20) as pool:
            replies = list(
                pool.map(
                    lambda i: http("POST", base + f"/quotes?currency=GBP&amount={i}"), range(20)
                )
            )
        assert all(s == 200 for s, _ in replies), replies
        assert sorted(b["amount"] for _, b in replies) == [float(i) for i in range(20)]
        assert time.monotonic() - t0 < 20 * 0.2

        # A task that fails for good: the endpoint reports it.
        status, body = http("POST", base + "/quotes?currency=XXX")
        assert status == 422 and "unknown currency" in body["error"]

        # Fire and forget.
        assert http("POST", base + "/visits/home")[0] == 202
        wait_until(lambda: r.hget("examples:visits", "home") == b"1", message="the visit")
        assert http("POST", base + "/quotes")[0] == 400
    assert "Traceback" not in w.output().replace("ValueError: unknown currency", "")
