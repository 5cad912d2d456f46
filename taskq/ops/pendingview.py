"""One entry of a consumer group's pending list, as ``taskq inspect pending`` shows it."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.broker.reads import PendingRow, entry_ms
from taskq.keys import RECOVER_CONSUMER, QueueKeys, worker_of


@dataclass(frozen=True)
class PendingJob:
    """One entry of a group's pending list.

    ``state`` is ``running`` (a live worker's child reports it), ``held`` (a live worker has
    it but has not reported running it: prefetched, or started since its last heartbeat),
    ``orphaned`` (its worker is gone; the sweep recovers it once ``idle_ms`` passes the
    visibility timeout) or ``recovering`` (the sweep has claimed it and is settling it).
    """

    queue: str
    priority: str
    stream: str
    entry_id: str
    task: str | None
    consumer: str
    worker: str | None
    state: str
    idle_ms: int
    deliveries: int
    age_ms: int


def pending_job(
    row: PendingRow, now: int, live: set[str], running: set[tuple[str, str]]
) -> PendingJob:
    """A pending entry as ``taskq inspect pending`` shows it, its state told from the live
    workers and the entries their children report running."""
    stream = QueueKeys(row.queue).stream(row.priority)
    worker = worker_of(row.consumer)
    if row.consumer == RECOVER_CONSUMER:
        state = "recovering"
    elif worker not in live:
        state = "orphaned"
    else:
        state = "running" if (stream, row.entry_id) in running else "held"
    return PendingJob(
        row.queue,
        row.priority,
        stream,
        row.entry_id,
        row.task,
        row.consumer,
        worker,
        state,
        row.idle_ms,
        row.deliveries,
        max(0, now - entry_ms(row.entry_id)),
    )
