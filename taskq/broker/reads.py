"""Read-only queries for operators (``taskq inspect``, dead letters, metrics): figures as
Redis keeps them, parsed into plain values. Nothing here writes.

Queue figures are read in one MULTI per queue, so they agree with each other; every query is
a fixed number of O(1) or O(log N) commands however many jobs wait.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskq.broker.link import Command, Link
from taskq.broker.replies import (
    as_int,
    entries,
    flat_pairs,
    info_records,
    pending_rows,
    redis_ms,
    scored,
    text,
)
from taskq.deadletter import Deadletter
from taskq.keys import GROUP, PRIORITIES, QueueKeys


@dataclass(frozen=True)
class StreamSnapshot:
    """One priority stream's figures from its queue's MULTI.

    Attributes:
        now_ms: the Redis clock at the snapshot.
        length: XLEN. Acked jobs are deleted, so length = waiting + pending.
        pending: XINFO GROUPS ``pending`` (delivered, not acked).
        last_id: the group's last-delivered-id (None: no group yet).
        lag: the group's ``lag`` as Redis reports it (None when it cannot tell).
        oldest_pending: the smallest pending entry id (XPENDING summary).
        retrying: ZCARD of the stream's retry set.
    """

    stream: str
    priority: str
    now_ms: int
    length: int
    pending: int
    consumers: int
    last_id: str | None
    lag: int | None
    oldest_pending: str | None
    retrying: int

    @property
    def waiting(self) -> int:
        # Acked entries are deleted, so whatever is in the stream and not pending is waiting.
        return max(0, self.length - self.pending)


@dataclass(frozen=True)
class QueueSnapshot:
    """A queue's three streams plus its schedule and dead letters, at one moment."""

    queue: str
    now_ms: int
    streams: tuple[StreamSnapshot, ...]
    scheduled: int
    next_scheduled_ms: int | None
    dead: int


@dataclass(frozen=True)
class PendingRow:
    """One entry of a group's pending list, with its task and retry due time."""

    queue: str
    priority: str
    entry_id: str
    consumer: str
    idle_ms: int
    deliveries: int
    task: str | None
    retry_due_ms: int | None


class Reader:
    """Read-only queries on one Redis server (through the broker's link)."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def now_ms(self) -> int:
        """The Redis clock, which also made every entry id."""
        return redis_ms(self.link.call("TIME"))

    def ping_ms(self) -> float:
        """Round-trip time of a PING, in ms."""
        started = time.perf_counter()
        self.link.call("PING")
        return round((time.perf_counter() - started) * 1000, 3)

    # -- queues ----------------------------------------------------------------------------

    def queue(self, queue: str) -> QueueSnapshot:
        k = QueueKeys(queue)
        commands: list[Command] = [("TIME",)]
        for p in PRIORITIES:
            s = k.stream(p)
            commands += [("XINFO", "GROUPS", s), ("XLEN", s), ("XPENDING", s, GROUP)]
            commands.append(("ZCARD", k.retry(p)))
        commands += [
            ("ZCARD", k.schedule),
            ("ZRANGE", k.schedule, 0, 0, "WITHSCORES"),
            ("XLEN", k.deadletter),
        ]
        # MULTI: one snapshot, so length = waiting + pending holds between the figures.
        # (XINFO and XPENDING of a stream that does not exist are errors: no group yet.)
        now_reply, *reply = self.link.pipeline(commands, transaction=True, errors=False)
        now = redis_ms(now_reply)
        streams = tuple(
            _stream(k, p, now, reply[4 * i : 4 * i + 4]) for i, p in enumerate(PRIORITIES)
        )
        scheduled, first, dead = reply[4 * len(PRIORITIES) :]
        firsts = scored(first)
        return QueueSnapshot(
            queue,
            now,
            streams,
            as_int(scheduled),
            int(firsts[0][1]) if firsts else None,
            as_int(dead),
        )

    def oldest_waiting(self, streams: Sequence[StreamSnapshot]) -> dict[str, str]:
        """Stream → id of its first undelivered entry (XRANGE after the group's cursor)."""
        todo = [s for s in streams if s.waiting > 0]
        # Exclusive start: O(log N) to seek, one entry back, whatever the length.
        commands = [("XRANGE", s.stream, f"({s.last_id or '0-0'}", "+", "COUNT", 1) for s in todo]
        out = {}
        for s, rows in zip(todo, self.link.pipeline(commands, errors=False), strict=True):
            found = entries(rows)
            if found:
                out[s.stream] = found[0][0]
        return out

    # -- workers ---------------------------------------------------------------------------

    def worker_records(self, queues: Sequence[str]) -> tuple[int, list[tuple[dict[str, str], int]]]:
        """The Redis clock and every live worker record on ``queues``, with its TTL (ms)."""
        now_reply, *members = self.link.pipeline(
            [("TIME",), *(("ZRANGE", QueueKeys(q).workers, 0, -1) for q in queues)]
        )
        pairs = {text(m): q for q, ids in zip(queues, members, strict=True) for m in ids}
        commands: list[Command] = []
        for worker_id, q in pairs.items():
            key = QueueKeys(q).worker(worker_id)
            commands += [("HGETALL", key), ("PTTL", key)]
        reply = self.link.pipeline(commands) if commands else []
        records = []
        for i in range(0, len(reply), 2):
            fields = {text(k): text(v) for k, v in flat_pairs(reply[i]).items()}
            if fields:
                records.append((fields, as_int(reply[i + 1])))
        return redis_ms(now_reply), records

    # -- pending entries -------------------------------------------------------------------

    def pending(
        self, queues: Sequence[str], *, min_idle_ms: int, limit: int
    ) -> tuple[int, list[PendingRow]]:
        """The Redis clock and the first ``limit`` pending entries (idle for at least
        ``min_idle_ms``) of every stream of ``queues``, oldest first."""
        where = [(q, p) for q in queues for p in PRIORITIES]
        idle = ("IDLE", min_idle_ms) if min_idle_ms else ()
        commands: list[Command] = [("TIME",)]
        commands += [
            ("XPENDING", QueueKeys(q).stream(p), GROUP, *idle, "-", "+", limit) for q, p in where
        ]
        now_reply, *reply = self.link.pipeline(commands, errors=False)
        rows = [
            (q, p, row) for (q, p), rs in zip(where, reply, strict=True) for row in pending_rows(rs)
        ]
        rows.sort(key=lambda x: entry_ms(x[2][0]))
        rows = rows[:limit]
        details: list[Command] = []
        for q, p, (eid, *_) in rows:
            details += [
                ("XRANGE", QueueKeys(q).stream(p), eid, eid),
                ("ZSCORE", QueueKeys(q).retry(p), eid),
            ]
        extra = self.link.pipeline(details) if details else []
        out = []
        for i, (q, p, (eid, consumer, idle_ms, deliveries)) in enumerate(rows):
            found, due = entries(extra[2 * i]), extra[2 * i + 1]
            task = text(found[0][1].get(b"task", b"")) if found else None
            retry_due = int(float(due)) if due is not None else None
            out.append(PendingRow(q, p, eid, consumer, idle_ms, deliveries, task, retry_due))
        return redis_ms(now_reply), out

    # -- dead letters ----------------------------------------------------------------------

    def deadletters(
        self,
        queue: str,
        *,
        start: str = "-",
        end: str = "+",
        count: int,
        newest_first: bool = False,
    ) -> list[Deadletter]:
        """Dead-letter entries between two ids (inclusive; "(" makes a bound exclusive)."""
        key = QueueKeys(queue).deadletter
        if newest_first:
            rows = self.link.call("XREVRANGE", key, end, start, "COUNT", count)
        else:
            rows = self.link.call("XRANGE", key, start, end, "COUNT", count)
        return [Deadletter.from_entry(dead_id, fields) for dead_id, fields in entries(rows)]

    def deadletter_count(self, queue: str) -> int:
        return as_int(self.link.call("XLEN", QueueKeys(queue).deadletter))


def entry_ms(entry_id: str) -> int:
    """The time (ms, Redis clock) at which a stream entry was added, from its id."""
    return int(entry_id.split("-", 1)[0])


def _stream(k: QueueKeys, priority: str, now: int, replies: Sequence[Any]) -> StreamSnapshot:
    """From the replies to XINFO GROUPS, XLEN, XPENDING (summary) and ZCARD (retry set)."""
    groups, length, summary, retrying = replies
    group = next((g for g in info_records(groups) if text(g.get("name")) == GROUP), {})
    last, lag = group.get("last-delivered-id"), group.get("lag")
    oldest = summary[1] if isinstance(summary, list) and len(summary) > 1 else None
    return StreamSnapshot(
        stream=k.stream(priority),
        priority=priority,
        now_ms=now,
        length=as_int(length),
        pending=as_int(group.get("pending")),
        consumers=as_int(group.get("consumers")),
        last_id=text(last) if last is not None else None,
        lag=as_int(lag) if lag is not None else None,
        oldest_pending=text(oldest) if oldest else None,
        retrying=as_int(retrying),
    )
