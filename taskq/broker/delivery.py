"""The Delivery: one stream entry handed to a consumer, as the broker reads it."""

from __future__ import annotations

from typing import Any, NamedTuple


class Delivery(NamedTuple):
    """One stream entry handed to a consumer: where it lives and its raw body.

    Attributes:
        deliveries: the entry's delivery count (1 for a fresh read; more once the sweep
            recovered it from a dead worker).
        first_failure_ms: when the job first failed (Redis clock), for a retried job.
        record_id: the job's id when it keeps a status record (the entry's ``job`` field).
    """

    stream: str
    queue: str
    priority: str
    entry_id: str
    deliveries: int
    body: bytes | None
    first_failure_ms: int | None = None
    record_id: str | None = None


def delivery(where: tuple[str, str, str], entry_id: str, fields: dict[bytes, Any]) -> Delivery:
    """A fresh delivery of a stream entry (its fields as XREADGROUP returns them)."""
    stream, queue, priority = where
    ff, job = fields.get(b"ff"), fields.get(b"job")
    return Delivery(
        stream,
        queue,
        priority,
        entry_id,
        1,
        fields.get(b"body"),
        int(ff) if ff else None,
        job.decode() if job else None,
    )


class Fetched(NamedTuple):
    """What one fetch returned: deliveries, and how long until the earliest delayed job or
    retry of the fetched queues is due (ms, Redis clock; 0: due now, -1: none)."""

    deliveries: list[Delivery]
    due_in_ms: int
