"""A small app for trying the dashboard (and for its screenshots): quick, slow, flaky and
failing tasks, a workflow and two schedules. Every job keeps a status record.

    taskq worker -A examples.dashboard_demo -c 3
    taskq dashboard -A examples.dashboard_demo
"""

from __future__ import annotations

import random
import time

from taskq import App, Retry

app = App(store_results=True)


@app.task
def resize_image(image_id: int, width: int = 800) -> dict[str, int]:
    time.sleep(0.05)
    return {"image_id": image_id, "width": width}


@app.task(max_retries=2, retry_backoff_ms=500)
def charge_card(order_id: str, amount_cents: int) -> str:
    if random.random() < 0.25:
        raise Retry(delay_ms=300)
    return f"charged {amount_cents} cents for {order_id}"


@app.task(priority="low")
def build_report(report_id: str, seconds: float = 20.0) -> str:
    time.sleep(seconds)
    return f"report {report_id} ready"


@app.task(max_retries=1, retry_backoff_ms=200)
def sync_to_crm(customer_id: int) -> None:
    raise ConnectionError(f"CRM refused customer {customer_id}: 503 Service Unavailable")


@app.periodic(every=3600)
def nightly_cleanup() -> None:
    """Hourly in this demo."""


@app.periodic(cron="*/5 * * * *", tz="UTC")
def refresh_exchange_rates() -> None:
    """Every five minutes."""
