"""Tasks that worker subprocesses run on a Redis Cluster or behind Sentinel (the app reads its
URL from TASKQ_REDIS_URL). Each run appends its value to ``{runs}:log`` through the app's own
link, so the record goes wherever the topology routes it."""

from __future__ import annotations

import os
import time
from typing import Any

from taskq import App, Settings, current_job

QUEUE = "{ctasks}"
app = App(queue=QUEUE)

RUNS = "{runs}:log"


def configure(redis_url: str, **settings: Any) -> App:
    """Point this module's app (as a test process uses it) at ``redis_url``, from scratch."""
    app.close()
    app.settings = Settings(redis_url=redis_url, queue=QUEUE, **settings)
    return app


def record(value: object) -> None:
    job = current_job()
    attempt = job.attempt if job else 0
    app.link.call("RPUSH", RUNS, f"{value}|{attempt}|{os.getpid()}")


@app.task
def note(value: object) -> None:
    record(value)


@app.task
def slow_note(value: object, seconds: float = 0.05) -> None:
    time.sleep(seconds)
    record(value)


@app.task(max_retries=1)
def always_fails(value: object) -> None:
    record(value)
    raise RuntimeError(f"fails for {value}")
