"""Idempotent tasks: make a job's effect happen once, however many times the job runs.

taskq delivers every job at least once. A job runs again when it fails and is retried, and
also when its worker dies after doing the work but before the job was acknowledged. A
producer can send the same request twice as well (a double click, a client that retries a
request that timed out). A task whose effect must not repeat, like charging a card, needs:

- a key naming the effect, taken from what the effect is about (here the order id) rather
  than from the job id: a retry or a redelivery keeps the job id, but a duplicate request
  makes a new job for the same order;
- a check and an action that happen in one atomic step. Here both are in Redis, so one Lua
  script marks the order and writes the ledger. When the effect is in another system, pass
  the key to it as its idempotency key (most payment APIs take one) and store the mark after
  the call succeeds.

``charge_order`` in ``examples/tasks.py`` uses :func:`charge_once`. With a worker running
(``taskq worker -A examples.tasks``)::

    python -m examples.idempotent

sends the same charge three times and shows that the ledger took it once.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Sequence

import redis

LEDGER_KEY = "examples:ledger"
MARK_TTL_S = 7 * 24 * 3600
"""Keep the mark longer than any duplicate of the request can arrive."""

_CHARGE_ONCE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  redis.call('RPUSH', KEYS[2], ARGV[3])
  return 1
end
return 0
"""


def charge_once(client: redis.Redis, order_id: str, amount_cents: int) -> bool:
    """Add the charge of an order to the ledger unless it is there already.

    Returns:
        True if this call charged the order, False if an earlier one had.
    """
    mark = f"examples:charged:{order_id}"
    entry = f"{order_id} {amount_cents}"
    done = client.eval(_CHARGE_ONCE, 2, mark, LEDGER_KEY, order_id, MARK_TTL_S, entry)
    return bool(done)


def ledger_entries(client: redis.Redis, order_id: str) -> list[str]:
    """The ledger lines of one order."""
    lines = [raw.decode() for raw in client.lrange(LEDGER_KEY, 0, -1)]
    return [line for line in lines if line.split(" ", 1)[0] == order_id]


def main(argv: Sequence[str] | None = None) -> int:
    from examples.tasks import RESULTS_KEY, charge_order, store

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--order", default=f"order-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--copies", type=int, default=3, help="how many times to send it")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait")
    args = parser.parse_args(argv)

    jobs = [charge_order.delay(args.order, 4200) for _ in range(args.copies)]
    print(f"sent {len(jobs)} jobs charging {args.order} 42.00")
    client = store()
    deadline = time.monotonic() + args.timeout
    while None in client.hmget(RESULTS_KEY, [j.id for j in jobs]):
        if time.monotonic() > deadline:
            print("timed out: is a worker running? (taskq worker -A examples.tasks)")
            return 1
        time.sleep(0.1)
    for job, raw in zip(jobs, client.hmget(RESULTS_KEY, [j.id for j in jobs]), strict=True):
        print(f"  job {job.id}: {json.loads(raw)['result'] if raw else '?'}")
    entries = ledger_entries(client, args.order)
    print(f"ledger entries for {args.order}: {len(entries)}")
    return 0 if len(entries) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
