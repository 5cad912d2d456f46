"""Tasks that report progress, emit output and log, for tests/integration/test_telemetry.py
(worker subprocesses load this module; in-process tests use its app too)."""

from __future__ import annotations

import asyncio
import logging
import time

import redis

from taskq import App, ChunkTooLarge, JobContext, current_job

app = App()  # configured by TASKQ_* variables set by the test fixtures
logger = logging.getLogger(__name__)


def _job() -> JobContext:
    job = current_job()
    assert job is not None
    return job


@app.task(store_result=True)
def chatter(n: int, gap_ms: float = 1.0) -> int:
    """Emits 0..n-1, ``gap_ms`` apart, while its progress goes 1..n."""
    job = _job()
    for i in range(n):
        job.emit(i)
        job.progress(i + 1, n, f"chunk {i}")
        time.sleep(gap_ms / 1000)
    return n


@app.task
def chatter_unrecorded(n: int) -> None:
    """:func:`chatter` for a job that stores no result."""
    job = _job()
    for i in range(n):
        job.emit({"i": i})
    job.progress(n, n)


@app.task(store_result=True)
async def achatter(n: int) -> int:
    job = _job()
    for i in range(n):
        job.emit(f"token {i}")
        job.progress(i + 1, n)
        await asyncio.sleep(0.001)
    return n


@app.task(store_result=True, max_retries=1)
def crashes_once(n: int) -> int:
    """Attempt 1 emits ``n`` chunks, says so in list ``emitted``, and waits to be killed;
    attempt 2 emits ``n`` more and ends."""
    job = _job()
    for i in range(n):
        job.emit(f"{job.attempt}:{i}")
    if job.attempt == 1:
        time.sleep(0.3)  # (more than one flush interval: the chunks are in Redis)
        redis.Redis.from_url(app.settings.redis_url).rpush("emitted", job.id)
        time.sleep(60)
    return n


@app.task(store_result=True)
def too_big(size: int) -> str:
    job = _job()
    try:
        job.emit(b"x" * size)
    except ChunkTooLarge as exc:
        job.emit("refused")
        return str(exc)
    return "written"


@app.task(store_result=True)
def talkative(lines: int) -> None:
    logger.warning("starting %d lines", lines)
    for i in range(lines):
        logger.warning("line %d %s", i, "." * 40)
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("with a traceback")


@app.task(store_result=True)
def steady_progress(seconds: float) -> None:
    """Progress as fast as it can for ``seconds``: ``done`` is the call count."""
    job = _job()
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        i += 1
        job.progress(i, None, "counting")


@app.task(store_result=True)
def silent() -> int:
    return 1
