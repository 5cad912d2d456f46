"""Tasks for tests/integration/test_acl.py's full run, on queue ``acl``: one per feature a
worker touches Redis for. They report through their stored results, or a file for the
periodic one, never through a Redis key of their own (the ACL users could not write it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from taskq import App, Retry, current_job

app = App(queue="acl")  # the Redis URL comes from TASKQ_REDIS_URL


@app.task(store_result=True)
def add(a: int, b: int) -> int:
    return a + b


@app.task(store_result=True)
def total(values: list[int]) -> int:
    return sum(values)


@app.task(store_result=True, max_retries=0)
def fails() -> None:
    raise KeyError("fails")


@app.task(store_result=True)
def errback(failed_job_id: str) -> str:
    return failed_job_id


@app.task(store_result=True)
def retries_later() -> None:
    """Waits in the retry set for a minute (until cancelled)."""
    raise Retry(countdown=60)


@app.task(store_result=True, rate_limit="5/s", limit_key=lambda key, n: key)
def limited(key: str, n: int) -> int:
    return n


@app.task(store_result=True, concurrency_limit=1)
def exclusive(n: int, seconds: float = 0.0) -> int:
    time.sleep(seconds)
    return n


@app.task(store_result=True)
def sleeper(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(store_result=True, unique=True)
def unique(n: int) -> int:
    return n


@app.task(store_result=True, time_limit_s=0.3, max_retries=0)
def overruns() -> None:
    time.sleep(5)


@app.task(store_result=True, max_retries=1)
def crashes_once() -> str:
    """Kills its own child on the first attempt, as a segfault would."""
    job = current_job()
    if job is not None and job.attempt == 1:
        os.kill(os.getpid(), 9)
    return "second attempt"


@app.periodic(every=1)
def tick() -> None:
    """Leaves a file per run in TASKQ_TEST_MARK_DIR."""
    (Path(os.environ["TASKQ_TEST_MARK_DIR"]) / f"tick-{time.time_ns()}").touch()
