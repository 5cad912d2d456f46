"""Example tasks, one of each kind a real application has.

Run a worker for them with::

    taskq worker -A examples.tasks -c 2

The app reads its settings from the environment: ``TASKQ_REDIS_URL`` (else ``REDIS_URL``,
else ``redis://localhost:6379/0``) and any other ``TASKQ_*`` setting.

taskq keeps no results: a task that has something to report stores it itself. These tasks
write theirs to the Redis hash ``examples:results`` (job id → JSON), which the producer and
the web app read to show progress.
"""

from __future__ import annotations

import json
import os
import time

import redis

from examples.deadletters import DeadLetterAlert
from examples.idempotent import charge_once
from taskq import App, Retry, current_job

app = App()
app.add_middleware(DeadLetterAlert())

RESULTS_KEY = "examples:results"
FLAKY_RETRY_AFTER_S = 0.5

_store: tuple[int, redis.Redis] | None = None


def store() -> redis.Redis:
    """This process's client for the examples' own data in the app's Redis (taskq keeps its
    connections to itself; a forked worker child makes its own client)."""
    global _store
    if _store is None or _store[0] != os.getpid():
        _store = (os.getpid(), redis.Redis.from_url(app.settings.redis_url))
    return _store[1]


def save_result(value: object) -> None:
    """Store the running job's result where producers can find it (no-op outside a job)."""
    job = current_job()
    if job is None:
        return
    record = {
        "task": job.task,
        "attempt": job.attempt,
        "result": value,
        "done_ms": int(time.time() * 1000),
    }
    store().hset(RESULTS_KEY, job.id, json.dumps(record))


@app.task(priority="high")
def send_welcome_email(user_id: int) -> None:
    """Quick, and urgent: a sign-up should not wait behind a backlog of reports."""
    save_result(f"welcome email sent to user {user_id}")


@app.task
def resize_image(image_id: int, width: int = 800) -> None:
    """Quick: the kind of work a web request hands off so that it can answer at once."""
    save_result(f"image {image_id} resized to {width}px")


@app.task(priority="low", time_limit_s=300, soft_time_limit_s=240)
def build_report(report_id: str, seconds: float = 1.0) -> None:
    """Slow: stands in for a long computation; low priority so it never delays quick jobs."""
    time.sleep(seconds)
    save_result(f"report {report_id} built in {seconds:.1f}s")


@app.task(max_retries=3)
def fetch_exchange_rate(currency: str) -> None:
    """Flaky: its first attempt fails, as calls to a remote API sometimes do; the retry works."""
    job = current_job()
    if job is not None and job.attempt == 1:
        raise Retry(countdown=FLAKY_RETRY_AFTER_S, reason="exchange-rate API timed out")
    save_result({"currency": currency, "rate": 1.08})


@app.task(max_retries=1, retry_backoff_ms=200)
def sync_to_legacy_crm(customer_id: int) -> None:
    """Always fails: after its one retry the job moves to the dead-letter stream."""
    raise ConnectionRefusedError(f"legacy CRM refused the update of customer {customer_id}")


@app.task
def send_reminder(user_id: int) -> None:
    """Delayed: enqueued with ``countdown=...``; a worker runs it once that time has passed."""
    save_result(f"reminder sent to user {user_id}")


@app.task
def charge_order(order_id: str, amount_cents: int) -> None:
    """Idempotent: charging the same order twice takes the money once (see idempotent.py)."""
    charged = charge_once(store(), order_id, amount_cents)
    save_result("charged" if charged else "already charged")
