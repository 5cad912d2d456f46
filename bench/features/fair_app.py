"""The fair queue bench's app (``taskq worker -A bench.features.fair_app:app``): one no-op
task on queue ``tasks``, fair when ``BENCH_FAIR=1`` (the worker marks it fair at start).

Each job makes one Redis ``INCR`` of the bench's counter (the drain is timed on it); a job of
tenant ``B`` first pushes its wait, ``time.time_ns()`` at start minus the one its producer
passed, in ns, to :data:`WAITS`. Its client is created lazily in each process, after any
fork.
"""

from __future__ import annotations

import os
import time

from redis import Redis

from taskq import App

QUEUE = "tasks"
COUNTER = "fair_bench:done"
WAITS = "fair_bench:waits"
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6399/0")

app = App(URL, queue=QUEUE, fair_queues=[QUEUE] if os.environ.get("BENCH_FAIR") == "1" else [])
_client: tuple[int, Redis] | None = None


def client() -> Redis:
    """This process's client to the bench's Redis (one per process, after fork)."""
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), Redis.from_url(URL, protocol=2))
    return _client[1]


@app.task(fair_key=lambda i, tenant, t_ns: tenant)
def noop(i: int, tenant: str, t_ns: int) -> None:
    """No work: the wait of a tenant ``B`` job, and one ``INCR``."""
    r = client()
    if tenant == "B":
        r.rpush(WAITS, time.time_ns() - t_ns)
    r.incr(COUNTER)
