"""Tasks of the dashboard tests' app (loaded by worker and dashboard subprocesses too)."""

from __future__ import annotations

import logging
import time

import redis

from taskq import App, current_job

app = App()  # configured by TASKQ_* variables set by the test fixtures

BROKEN = "dash:broken"
"""While this key exists, ``fragile`` fails (it has no retries left, so it dies)."""


@app.task(store_result=True, max_retries=0)
def fragile(tag: str) -> str:
    with redis.Redis.from_url(app.settings.redis_url) as r:
        if r.exists(BROKEN):
            raise RuntimeError(f"downstream is broken ({tag})")
    return f"fixed {tag}"


@app.task(store_result=True)
def show(value: object) -> object:
    return value


@app.task(queue="backlog")
def later(n: int) -> None:
    """On a queue no test worker serves: its jobs stay waiting."""


@app.periodic(every=3600)
def hourly_report() -> None:
    """A schedule for the periodic page."""


@app.task(store_result=True)
def narrates(n: int, gap_s: float) -> int:
    """Live telemetry for the job page: ``n`` chunks (markup, shown as text), progress to
    ``n`` and a log line each, ``gap_s`` apart."""
    job = current_job()
    assert job is not None
    for i in range(n):
        job.emit(f"<b class=injected>chunk {i}</b>")
        job.progress(i + 1, n, f"step {i + 1}")
        logging.getLogger(__name__).warning("did <i>%d</i>", i)
        time.sleep(gap_s)
    return n


@app.task(
    store_result=True,
    max_retries=5,
    retry_backoff_ms=3_600_000,
    retry_backoff_max_ms=3_600_000,
    retry_jitter=False,
)
def flaky(tag: str) -> str:
    """Like ``fragile``, but a failed run waits an hour in the retry set."""
    with redis.Redis.from_url(app.settings.redis_url) as r:
        if r.exists(BROKEN):
            raise RuntimeError(f"downstream is broken ({tag})")
    return f"fixed {tag}"


@app.task(store_result=True)
def nap(seconds: float) -> float:
    """Runs for a while (a running job to look at); returns how long it ran (ms)."""
    started = time.perf_counter()
    time.sleep(seconds)
    return (time.perf_counter() - started) * 1000


@app.task(queue="backlog", batch_size=100, batch_wait_s=3600, batch_key=lambda key, note: key)
def gather(calls: list[dict[str, object]]) -> None:
    """Batches by key that fill on a queue no test worker serves."""
