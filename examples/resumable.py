"""Resumable jobs: a payment whose steps each run once, and a backfill that resumes at its cursor.

``pay_order`` charges a card, emails a receipt and writes the ledger, each in a
``taskq.step``. The email fails on the first attempt (a flaky mail server); the retry gets the
charge's stored value back instead of charging again, and sends the email again.

``backfill_prices`` walks a "table" of rows a page at a time with ``taskq.iterate``; the
worker saves its cursor every 100 rows or second. Stop the worker (Ctrl-C or SIGTERM) while it
runs and start it again: the walk goes on from its last cursor, on the same attempt. Its
``max_run_s`` lets it run 5 s at a time, then gives other jobs of the queue their turn.

With a worker running (``taskq worker -A examples.resumable``)::

    python -m examples.resumable

pays one order and backfills 2,000 rows, then prints what each card, mail and ledger call did.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Sequence

import redis

import taskq
from taskq import App, current_job
from taskq.resumable import PageFetcher

app = App()

CALLS_KEY = "examples:resumable:calls"
"""What the payment's outside calls did, in order (a stand-in for the card, mail and ledger)."""
PRICES_KEY = "examples:resumable:prices"
PAGE_ROWS = 250

_store: tuple[int, redis.Redis] | None = None


def store() -> redis.Redis:
    """This process's client for the example's own data (a worker child makes its own)."""
    global _store
    if _store is None or _store[0] != os.getpid():
        _store = (os.getpid(), redis.Redis.from_url(app.settings.redis_url))
    return _store[1]


def charge_card(order_id: str, amount_cents: int) -> str:
    store().rpush(CALLS_KEY, f"charge {order_id} {amount_cents}")
    return f"ch_{order_id}"


def send_receipt(order_id: str, charge_id: str) -> bool:
    store().rpush(CALLS_KEY, f"email {order_id}")
    job = current_job()
    if job is not None and job.attempt == 1:
        raise ConnectionError("the mail server hung up")
    return True


def write_ledger(order_id: str, charge_id: str, amount_cents: int) -> int:
    store().rpush(CALLS_KEY, f"ledger {order_id} {charge_id}")
    return amount_cents


@app.task(max_retries=3, retry_backoff_ms=200, store_result=True)
def pay_order(order_id: str, amount_cents: int) -> dict[str, object]:
    """Charge, email, write the ledger: each step once per job, whatever the retries."""
    charge_id = taskq.step("charge", charge_card, order_id, amount_cents)
    taskq.step("receipt", send_receipt, order_id, charge_id)
    booked = taskq.step("ledger", write_ledger, order_id, charge_id, amount_cents)
    return {"charge": charge_id, "booked_cents": booked}


def fetch_rows(total: int) -> PageFetcher:
    """A page of row ids from ``cursor`` (the first id not read yet; None at the start)."""

    def fetch(cursor: int | None) -> tuple[list[int], int | None]:
        start = cursor or 0
        end = min(total, start + PAGE_ROWS)
        return list(range(start, end)), (end if end < total else None)

    return fetch


@app.task(max_run_s=5.0, store_result=True)
def backfill_prices(total: int, pause_s: float = 0.0) -> int:
    """Write a price for every row; a stopped worker hands the walk back at its cursor."""
    client = store()
    written = 0
    for row in taskq.iterate("rows", fetch_rows(total)):
        client.hset(PRICES_KEY, str(row), row * 3)
        written += 1
        time.sleep(pause_s)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    # The tasks by their module's name (run as ``-m``, this file is ``__main__``).
    from examples.resumable import backfill_prices, pay_order, store

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--order", default=f"order-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    args = parser.parse_args(argv)
    payment = pay_order.delay(args.order, 4200)
    backfill = backfill_prices.delay(args.rows)
    print(f"paid: {payment.result(timeout=args.timeout)}")
    print(f"backfilled rows: {backfill.result(timeout=args.timeout)}")
    calls = [c.decode() if isinstance(c, bytes) else c for c in store().lrange(CALLS_KEY, 0, -1)]
    for call in (c for c in calls if args.order in c):
        print(f"  {call}")
    for step in payment.status().steps:
        print(f"  step {step.name}: {step.state}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
