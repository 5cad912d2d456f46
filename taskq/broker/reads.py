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

from taskq.broker.link import Link
from taskq.broker.replies import (
    as_int,
    entries,
    flat_pairs,
    pending_rows,
    redis_ms,
    text,
)
from taskq.broker.resp import Command
from taskq.deadletter import Deadletter
from taskq.keys import GROUP, PRIORITIES, QueueKeys

DELIVERED_LIMIT = 2_000
"""Delivered entries still in a stream (finished ones the trim has not removed yet) counted
beyond the pending ones to tell waiting jobs from the others; past it, waiting is estimated
(there are more only while a very long job holds back the trim)."""


@dataclass(frozen=True)
class StreamSnapshot:
    """One priority stream's figures from its queue's MULTI.

    Attributes:
        now_ms: the Redis clock at the snapshot.
        length: XLEN: waiting + pending + finished jobs not yet trimmed away.
        waiting: entries not yet delivered to any worker, and on a fair queue the jobs
            staged for their key's turn (docs/fairness.md).
        pending: XINFO GROUPS ``pending`` (delivered, not acked).
        last_id: the group's last-delivered-id (None: no group yet).
        lag: the group's ``lag`` as Redis reports it (None when it cannot tell).
        oldest_pending: the smallest pending entry id (XPENDING summary).
        retrying: ZCARD of the priority's retry set (failed jobs waiting out a backoff).
        next_retry_ms: when the earliest of them is due (Redis clock), if any.
    """

    stream: str
    priority: str
    now_ms: int
    length: int
    waiting: int
    pending: int
    consumers: int
    last_id: str | None
    lag: int | None
    oldest_pending: str | None
    retrying: int
    next_retry_ms: int | None


@dataclass(frozen=True)
class QueueSnapshot:
    """A queue's three streams plus its schedule and dead letters, at one moment."""

    queue: str
    now_ms: int
    streams: tuple[StreamSnapshot, ...]
    scheduled: int
    next_scheduled_ms: int | None
    dead: int
    expired: int = 0
    cancelled: int = 0
    held: int = 0


@dataclass(frozen=True)
class PendingRow:
    """One entry of a group's pending list, with its task."""

    queue: str
    priority: str
    entry_id: str
    consumer: str
    idle_ms: int
    deliveries: int
    task: str | None


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
        """One queue's figures at one moment (a read-only script: they agree with each other)."""
        k = QueueKeys(queue)
        keys = [*k.streams, *(k.retry(p) for p in PRIORITIES), k.schedule, k.deadletter]
        now, *per_stream, scheduled, first, dead, ended = self.link.script(
            "queue_stats", [*keys, k.counts], [GROUP, DELIVERED_LIMIT]
        )
        streams = tuple(
            _stream(k.stream(p), p, as_int(now), raw)
            for p, raw in zip(PRIORITIES, per_stream, strict=True)
        )
        expired, cancelled, held = (as_int(n) for n in ended)
        return QueueSnapshot(
            queue,
            as_int(now),
            streams,
            as_int(scheduled),
            _opt_ms(first),
            as_int(dead),
            expired,
            cancelled,
            max(0, held),
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

    def due_within(self, queues: Sequence[str], horizon_ms: int) -> dict[str, int]:
        """Delayed jobs and retries of each queue due within ``horizon_ms`` (or overdue):
        a ZCOUNT of the schedule and of each retry set, whose scores are due times on the
        Redis clock. Two round trips, whatever the number of jobs."""
        until = self.now_ms() + horizon_ms
        keys = [(q, key) for q in queues for key in _delayed_keys(QueueKeys(q))]
        replies = self.link.pipeline([("ZCOUNT", key, "-inf", until) for _, key in keys])
        out = dict.fromkeys(queues, 0)
        for (q, _), n in zip(keys, replies, strict=True):
            out[q] += max(0, as_int(n))
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
        details = [("XRANGE", QueueKeys(q).stream(p), eid, eid) for q, p, (eid, *_) in rows]
        extra = self.link.pipeline(details) if details else []
        out = []
        for (q, p, (eid, consumer, idle_ms, deliveries)), found in zip(rows, extra, strict=True):
            row = entries(found)
            task = text(row[0][1].get(b"task", b"")) if row else None
            out.append(PendingRow(q, p, eid, consumer, idle_ms, deliveries, task))
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


def _delayed_keys(k: QueueKeys) -> tuple[str, ...]:
    return (k.schedule, *(k.retry(p) for p in PRIORITIES))


@dataclass(frozen=True)
class GatheringRow:
    """A debounce burst or a filling batch of a queue, as its index and keys have it:
    ``kind`` (``debounce`` or ``batch``), its key (``<task>:<key>`` for a batch), its job id,
    how many calls it gathered, and when it is due (ms, Redis clock)."""

    queue: str
    kind: str
    key: str
    job_id: str
    count: int
    due_ms: int


def gathering_rows(link: Link, queue: str, limit: int) -> list[GatheringRow]:
    """The queue's waiting bursts and batches, soonest due first (the first ``limit`` of its
    gathering index; members whose burst started or batch ran are skipped)."""
    k = QueueKeys(queue)
    members = scored_text(link.call("ZRANGE", k.gathering, 0, limit - 1, "WITHSCORES"))
    reads: list[Command] = []
    for member, _ in members:
        key = f"{queue}:{member}"
        if member.startswith("debounce:"):
            reads.append(("HMGET", key, "job", "member", "count"))
        else:
            reads += [("LLEN", key), ("LINDEX", key, 0)]
    replies = iter(link.pipeline(reads) if reads else [])
    found, waiting_members = [], []
    for member, due in members:
        kind, _, key = member.partition(":")
        if kind == "debounce":
            job, schedule_member, count = next(replies)
            if job and schedule_member:
                found.append(GatheringRow(queue, kind, key, text(job), as_int(count), due))
                waiting_members.append((len(found) - 1, schedule_member))
        else:
            n, first = as_int(next(replies)), next(replies)
            if n and first:
                job = text(first).partition("\n")[0]
                found.append(GatheringRow(queue, kind, key, job, n, due))
    checks = [("ZSCORE", k.schedule, m) for _, m in waiting_members]
    started = {
        i
        for (i, _), s in zip(waiting_members, link.pipeline(checks) if checks else [], strict=True)
        if s is None
    }
    return [row for i, row in enumerate(found) if i not in started]


def scored_text(value: Any) -> list[tuple[str, int]]:
    """``ZRANGE ... WITHSCORES`` as (member text, integer score) pairs."""
    if not isinstance(value, list):
        return []
    return [(text(value[i]), int(float(value[i + 1]))) for i in range(0, len(value) - 1, 2)]


def entry_ms(entry_id: str) -> int:
    """The time (ms, Redis clock) at which a stream entry was added, from its id."""
    return int(entry_id.split("-", 1)[0])


def _stream(stream: str, priority: str, now: int, raw: Sequence[Any]) -> StreamSnapshot:
    """From one stream's row of ``queue_stats.lua``."""
    length, waiting, pending, consumers, last, lag, oldest, retrying, next_retry, staged = raw
    lag_or_none = as_int(lag) if as_int(lag) >= 0 else None
    if as_int(waiting) < 0:  # too many delivered entries to count: estimate
        waiting = lag_or_none if lag_or_none is not None else as_int(length) - as_int(pending)
    return StreamSnapshot(
        stream=stream,
        priority=priority,
        now_ms=now,
        length=as_int(length),
        waiting=max(0, as_int(waiting)) + max(0, as_int(staged)),
        pending=as_int(pending),
        consumers=as_int(consumers),
        last_id=text(last) or None,
        lag=lag_or_none,
        oldest_pending=text(oldest) or None,
        retrying=as_int(retrying),
        next_retry_ms=_opt_ms(next_retry),
    )


def _opt_ms(value: Any) -> int | None:
    ms = as_int(value, -1)
    return ms if ms >= 0 else None
