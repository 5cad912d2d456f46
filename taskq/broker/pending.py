"""Pending entries: those held by one consumer, and those of dead workers that the sweep
claims (XAUTOCLAIM)."""

from __future__ import annotations

from collections.abc import Mapping

from taskq.broker.delivery import Delivery, delivery
from taskq.broker.link import Link
from taskq.broker.replies import entries, pending_rows, text
from taskq.errors import BrokerRefused
from taskq.keys import GROUP, PRIORITIES, RECOVER_CONSUMER, QueueKeys

RECOVER_BATCH = 100
"""Entries one XAUTOCLAIM call of the sweep may take."""
PAGE = 1000
"""Pending entries read per XPENDING call."""


def pending_of(link: Link, keys: Mapping[str, QueueKeys], consumer: str) -> list[Delivery]:
    """Every entry pending under ``consumer`` on the queues of ``keys``, with its body if the
    entry still exists."""
    found: list[tuple[str, str, str, str, int]] = []
    for q, k in keys.items():
        for p, stream in zip(PRIORITIES, k.streams, strict=True):
            for eid, _owner, _idle, deliveries in _rows(link, stream, consumer):
                found.append((stream, q, p, eid, deliveries))
    if not found:
        return []
    bodies = link.pipeline([("XRANGE", f[0], f[3], f[3]) for f in found])
    out = []
    for (stream, q, p, eid, deliveries), rows in zip(found, bodies, strict=True):
        row = entries(rows)
        fresh = delivery((stream, q, p), eid, row[0][1] if row else {})
        out.append(fresh._replace(deliveries=deliveries))
    return out


def _rows(link: Link, stream: str, consumer: str) -> list[tuple[str, str, int, int]]:
    """XPENDING rows of one consumer on one stream, every page of them."""
    rows: list[tuple[str, str, int, int]] = []
    start = "-"
    while True:
        try:
            got = pending_rows(link.call("XPENDING", stream, GROUP, start, "+", PAGE, consumer))
        except BrokerRefused:  # no stream or no group: nothing is pending
            return rows
        rows += got
        if len(got) < PAGE:
            return rows
        start = "(" + got[-1][0]


def autoclaim(link: Link, queue: str, *, min_idle_ms: int, max_calls: int) -> list[Delivery]:
    """Claim the entries of ``queue`` idle past ``min_idle_ms`` for the recovering
    pseudo-consumer.

    XAUTOCLAIM is atomic, so sweepers need no lock; the pending list holds only jobs in
    flight (retries wait outside the stream), so a scan from the start is short. Each call
    takes at most ``RECOVER_BATCH`` entries, at most ``max_calls`` calls per stream. Each
    entry comes back as a fresh delivery: its body counts the attempts before it.
    """
    k = QueueKeys(queue)
    out: list[Delivery] = []
    for p in PRIORITIES:
        cursor = "0-0"
        for _ in range(max_calls):
            try:
                reply = link.call(
                    "XAUTOCLAIM",
                    k.stream(p),
                    GROUP,
                    RECOVER_CONSUMER,
                    min_idle_ms,
                    cursor,
                    "COUNT",
                    RECOVER_BATCH,
                )
            except BrokerRefused as exc:  # no stream or group yet: nothing to recover
                if "NOGROUP" in str(exc) or "no such key" in str(exc):
                    break
                raise
            cursor = text(reply[0])
            # Entries deleted meanwhile come back as nil (6.2) or are only listed (7.0).
            claimed = [row for row in reply[1] if isinstance(row, list) and row[1]]
            out += [delivery((k.stream(p), queue, p), eid, f) for eid, f in entries(claimed)]
            if cursor == "0-0":
                break
    return out
