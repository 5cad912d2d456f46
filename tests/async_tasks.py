"""``async def`` tasks (and a few sync ones beside them) that worker subprocesses run in
tests/integration/test_async_tasks.py. Each records its run in Redis (list ``runs``), as
tests/tasks.py does."""

from __future__ import annotations

import asyncio
import os
import time

import msgpack
import redis

from taskq import App, Retry, SoftTimeLimitExceeded, current_job

app = App()  # configured by TASKQ_* variables set by the test fixtures
_client: redis.Redis | None = None


def record(**fields: object) -> None:
    """Append one run record: job id, attempt, pid, time and the given fields."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.settings.redis_url)
    job = current_job()
    base = {
        "job": job.id if job else None,
        "attempt": job.attempt if job else 0,
        "pid": os.getpid(),
        "t": time.time(),
    }
    _client.rpush("runs", msgpack.packb({**base, **fields}))


def started(tag: str) -> None:
    """Push ``tag`` to the list ``started``: tests poll it to see a job running."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.settings.redis_url)
    _client.rpush("started", tag)


@app.task
async def nap(seconds: float, tag: str = "") -> None:
    started(tag)
    await asyncio.sleep(seconds)
    record(tag=tag)


@app.task(store_result=True)
async def kept_nap(seconds: float, tag: str = "") -> None:
    """:func:`nap` with a status record (so it can be cancelled)."""
    started(tag)
    await asyncio.sleep(seconds)
    record(tag=tag)


@app.task(store_result=True)
async def aadd(a: int, b: int, seconds: float = 0.0) -> int:
    await asyncio.sleep(seconds)
    return a + b


@app.task
async def whoami(tag: str, seconds: float) -> None:
    """Reads current_job() before and after an await: each coroutine must see its own."""
    before = current_job()
    await asyncio.sleep(seconds)
    after = current_job()
    record(tag=tag, before=before.id if before else None, after=after.id if after else None)


@app.task(soft_time_limit_s=0.3, max_retries=1, store_result=True)
async def overstays(seconds: float, tag: str = "") -> None:
    """Sleeps past its soft limit; records that it caught SoftTimeLimitExceeded."""
    try:
        await asyncio.sleep(seconds)
    except SoftTimeLimitExceeded:
        record(tag=tag, caught=True)
        raise
    record(tag=tag, caught=False)


@app.task(time_limit_s=1.0)
async def hangs(seconds: float, tag: str = "") -> None:
    """Blocks the loop (no await) past its hard limit."""
    started(tag)
    time.sleep(seconds)
    record(tag=tag)


@app.task
async def blocks_loop(seconds: float, tag: str = "") -> None:
    """CPU-bound for ``seconds`` without yielding to the loop."""
    started(tag)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass
    record(tag=tag)


@app.task
def sync_sleep(seconds: float, tag: str = "") -> None:
    started(tag)
    time.sleep(seconds)
    record(tag=tag, kind="sync")


@app.task(store_result=True)
def sync_add(a: int, b: int) -> int:
    return a + b


@app.task(concurrency_limit=2)
async def limited(seconds: float, tag: str = "") -> None:
    """At most two run at once across the fleet (the task's concurrency_limit)."""
    start = time.time()
    await asyncio.sleep(seconds)
    record(tag=tag, start=start, end=time.time())


@app.task(store_result=True, max_retries=3)
async def retries_once(value: int) -> int:
    """Asks for a retry on its first attempt (``Retry(countdown=...)``), then succeeds."""
    job = current_job()
    await asyncio.sleep(0.01)
    if job is not None and job.attempt == 1:
        raise Retry(countdown=0.2, reason="not yet")
    return value * 10
