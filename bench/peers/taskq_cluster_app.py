"""The app bench/features/cluster_bench.py runs under ``taskq worker`` (URL: TASKQ_REDIS_URL)."""

from __future__ import annotations

from taskq import App

QUEUES = ("{b0}", "{b1}", "{b2}")
"""Three queues, each its own hash tag: on the cluster, one per master."""

app = App(queue=QUEUES[0])


@app.task
def noop(i: int) -> None:
    """Does nothing: the bench measures taskq and Redis, not the task."""
