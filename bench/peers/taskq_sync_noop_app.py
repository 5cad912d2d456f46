"""taskq with one sync no-op task, the baseline of the async family's no-op drain: an app
without async tasks, so its worker runs the sync loop (adaptive prefetch)."""

from __future__ import annotations

from bench.common.record import record
from bench.peers.base import redis_url
from taskq import App

app = App(redis_url=redis_url(), queue="tasks")


@app.task
def snoop(i: int) -> None:
    """Sync no-op: record completion."""
    record(i)
