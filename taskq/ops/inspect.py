"""Read-only views of queues and workers (``taskq inspect``): every figure comes from Redis.

Nothing here waits on a worker. Queue figures are the streams' and the consumer group's own
counters (XINFO GROUPS, XLEN, the XPENDING summary, ZCARD), read in one MULTI per queue so
they agree with each other, plus one ``XRANGE (last-delivered-id + COUNT 1`` per stream for the
oldest waiting job: a fixed number of O(1)/O(log N) commands however many jobs wait. Worker
figures are the heartbeat records that worker masters write (``Pool._record``); a worker
whose record expired is gone. Ages use the Redis server's clock, which also made the ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis

from taskq.keys import GROUP, PRIORITIES, RETRY_CONSUMER, QueueKeys, worker_of


@dataclass(frozen=True)
class StreamStats:
    """One priority stream of a queue, as its consumer group sees it.

    Attributes:
        length: XLEN. Acked jobs are deleted, so length = waiting + pending.
        waiting: entries not yet delivered to any worker, computed as length - pending.
            That is exact because taskq deletes every entry it acks, and it is read in the
            same MULTI as both figures. The group's ``lag`` is not used: Redis 7.0 reports it
            as null once an entry at or after the last delivered one was deleted (every ack
            of the newest delivered job does that), and after deleted entries were skipped it
            can be plainly wrong (5 on an empty stream).
        lag: the group's ``lag`` as Redis reports it (null when it cannot tell), for reference.
        pending: delivered, not acked: running, prefetched, waiting out a retry backoff, or
            held by a worker that died (XINFO GROUPS ``pending``).
        retrying: the pending entries waiting out a retry backoff (ZCARD of the retry set).
        oldest_waiting_age_ms / oldest_pending_age_ms: how long ago the oldest such entry was
            added to the stream (entry ids are Redis timestamps); None if there is none.
    """

    queue: str
    priority: str
    stream: str
    length: int
    waiting: int
    lag: int | None
    pending: int
    retrying: int
    consumers: int
    last_delivered_id: str | None
    oldest_waiting_id: str | None
    oldest_waiting_age_ms: int | None
    oldest_pending_id: str | None
    oldest_pending_age_ms: int | None


@dataclass(frozen=True)
class QueueStats:
    """A queue's three streams plus its delayed and dead-lettered jobs."""

    queue: str
    streams: tuple[StreamStats, ...]
    scheduled: int
    next_scheduled_in_ms: int | None
    dead: int
    waiting: int
    pending: int
    retrying: int


@dataclass(frozen=True)
class ChildState:
    """One prefork child of a worker, as of its master's last heartbeat."""

    index: int
    pid: int
    consumer: str
    task: str | None
    job_id: str | None
    stream: str | None
    entry_id: str | None
    started_ms: int | None
    running_ms: int | None


@dataclass(frozen=True)
class WorkerState:
    """A worker's registry record (see ``Pool._record``); counters are since it started."""

    id: str
    host: str
    pid: int
    version: str
    app: str
    queues: tuple[str, ...]
    tasks: tuple[str, ...]
    concurrency: int
    busy: int
    idle: int
    started_ms: int
    heartbeat_ms: int
    heartbeat_age_ms: int
    expires_in_ms: int
    processed: int
    failed: int
    retried: int
    dead: int
    rate_per_s: float
    children: tuple[ChildState, ...]


@dataclass(frozen=True)
class Overview:
    """What ``taskq inspect`` prints: every queue, then every live worker."""

    now_ms: int
    queues: tuple[QueueStats, ...]
    workers: tuple[WorkerState, ...]


@dataclass(frozen=True)
class ActiveJob:
    """A job a worker's child is running."""

    worker: str
    child: int
    pid: int
    task: str
    job_id: str
    stream: str
    entry_id: str
    started_ms: int
    running_ms: int


@dataclass(frozen=True)
class PendingJob:
    """One entry of a group's pending list.

    ``state`` is ``running`` (a live worker's child reports it), ``held`` (a live worker has
    it but has not reported running it: prefetched, or started since its last heartbeat),
    ``retrying`` (waiting out a backoff; ``retry_due_in_ms`` says when) or ``orphaned`` (its
    worker is gone; the sweep recovers it once ``idle_ms`` passes the visibility timeout).
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
    retry_due_in_ms: int | None


@dataclass(frozen=True)
class WorkerPing:
    """Whether a worker's master is beating: its last beat is younger than its record's
    remaining life, i.e. it is less than half of the TTL old."""

    worker: str
    answered: bool
    heartbeat_age_ms: int
    expires_in_ms: int


@dataclass(frozen=True)
class Ping:
    """Redis round-trip time and the beat of every registered worker."""

    redis_ms: float
    workers: tuple[WorkerPing, ...]


def to_json(view: Any) -> Any:
    """A view (or a list of views) as plain JSON-ready data; the schema is the fields."""
    if isinstance(view, list | tuple):
        return [to_json(v) for v in view]
    return asdict(view)


def entry_ms(entry_id: str) -> int:
    """The time (ms, Redis clock) at which a stream entry was added, from its id."""
    return int(entry_id.split("-", 1)[0])


class Inspector:
    """Read-only queries over ``queues`` on one Redis server."""

    def __init__(self, client: redis.Redis, queues: Sequence[str]) -> None:
        self.client = client
        self.queues = tuple(dict.fromkeys(queues))

    def widened(self) -> Inspector:
        """Also cover the queues that the workers registered on ``queues`` serve."""
        served = [q for w in self.workers() for q in w.queues]
        return Inspector(self.client, [*self.queues, *served])

    # -- queues ----------------------------------------------------------------------------

    def queue_stats(self) -> list[QueueStats]:
        """Figures of every queue: one MULTI per queue, then one pipelined XRANGE per stream
        with waiting jobs, whatever the streams' lengths."""
        raw = [self._read_queue(QueueKeys(q)) for q in self.queues]
        oldest = self._oldest_waiting([s for _, streams, _ in raw for s in streams])
        return [
            _queue(q, now, streams, tail, oldest)
            for q, (now, streams, tail) in zip(self.queues, raw, strict=True)
        ]

    def _read_queue(self, k: QueueKeys) -> tuple[int, list[_RawStream], list[Any]]:
        # MULTI: one snapshot, so length = waiting + pending holds between the figures.
        pipe = self.client.pipeline(transaction=True)
        pipe.time()
        for p in PRIORITIES:
            pipe.xinfo_groups(k.stream(p))
            pipe.xlen(k.stream(p))
            pipe.xpending(k.stream(p), GROUP)
            pipe.zcard(k.retry(p))
        pipe.zcard(k.schedule)
        pipe.zrange(k.schedule, 0, 0, withscores=True)
        pipe.xlen(k.deadletter)
        now_reply, *reply = pipe.execute(raise_on_error=False)
        now = _redis_ms(now_reply)
        streams = [
            _RawStream.parse(k, p, now, reply[4 * i : 4 * i + 4]) for i, p in enumerate(PRIORITIES)
        ]
        return now, streams, reply[4 * len(PRIORITIES) :]

    def _oldest_waiting(self, streams: list[_RawStream]) -> dict[str, str]:
        """Stream → id of its first undelivered entry (XRANGE after the group's cursor)."""
        todo = [s for s in streams if s.waiting > 0]
        pipe = self.client.pipeline(transaction=False)
        for s in todo:
            # Exclusive start: O(log N) to seek, one entry back, whatever the length.
            pipe.xrange(s.stream, f"({s.last_id or '0-0'}", "+", count=1)
        out = {}
        for s, rows in zip(todo, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(rows, list) and rows:
                out[s.stream] = _text(rows[0][0])
        return out

    # -- workers ---------------------------------------------------------------------------

    def workers(self) -> list[WorkerState]:
        """Every worker with a live registry record on any of the queues, by id."""
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for q in self.queues:
            pipe.zrange(QueueKeys(q).workers, 0, -1)
        now_reply, *members = pipe.execute()
        pairs = {_text(m): q for q, ids in zip(self.queues, members, strict=True) for m in ids}
        pipe = self.client.pipeline(transaction=False)
        for worker_id, q in pairs.items():
            pipe.hgetall(QueueKeys(q).worker(worker_id))
            pipe.pttl(QueueKeys(q).worker(worker_id))
        reply = pipe.execute()
        now = _redis_ms(now_reply)
        found = [
            _worker(reply[i], int(reply[i + 1]), now) for i in range(0, len(reply), 2) if reply[i]
        ]
        return sorted(found, key=lambda w: w.id)

    def active(self) -> list[ActiveJob]:
        """Jobs running now, longest-running first."""
        jobs = [
            ActiveJob(
                w.id,
                c.index,
                c.pid,
                c.task or "",
                c.job_id or "",
                c.stream or "",
                c.entry_id or "",
                c.started_ms or 0,
                c.running_ms or 0,
            )
            for w in self.workers()
            for c in w.children
            if c.task is not None
        ]
        return sorted(jobs, key=lambda j: -j.running_ms)

    def ping(self) -> Ping:
        """Time a Redis PING, then read each worker's beat (no worker is asked anything)."""
        started = time.perf_counter()
        self.client.ping()
        redis_ms = round((time.perf_counter() - started) * 1000, 3)
        workers = tuple(
            WorkerPing(
                w.id, w.heartbeat_age_ms < w.expires_in_ms, w.heartbeat_age_ms, w.expires_in_ms
            )
            for w in self.workers()
        )
        return Ping(redis_ms, workers)

    # -- pending entries -------------------------------------------------------------------

    def pending(self, *, min_idle_ms: int = 0, limit: int = 100) -> list[PendingJob]:
        """Pending entries idle for at least ``min_idle_ms``, oldest first.

        Reads the first ``limit`` matching entries of each stream's pending list (XPENDING
        with IDLE): the cost depends on the pending list (running, retrying and orphaned
        jobs), never on how many jobs wait.
        """
        workers = self.workers()
        live = {w.id for w in workers}
        running = {(c.stream or "", c.entry_id) for w in workers for c in w.children if c.entry_id}
        where = [(q, p) for q in self.queues for p in PRIORITIES]
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for q, p in where:
            pipe.xpending_range(
                QueueKeys(q).stream(p), GROUP, "-", "+", limit, idle=min_idle_ms or None
            )
        now_reply, *reply = pipe.execute(raise_on_error=False)
        rows = [
            (q, p, row)
            for (q, p), rs in zip(where, reply, strict=True)
            if isinstance(rs, list)
            for row in rs
        ]
        rows.sort(key=lambda x: entry_ms(_text(x[2]["message_id"])))
        rows = rows[:limit]
        extra = self._pending_details(rows)
        now = _redis_ms(now_reply)
        return [
            _pending(q, p, row, task, due, now, live, running)
            for (q, p, row), (task, due) in zip(rows, extra, strict=True)
        ]

    def _pending_details(
        self, rows: list[tuple[str, str, dict[str, Any]]]
    ) -> list[tuple[str | None, float | None]]:
        """Task name (from the entry) and retry due time (from the retry set) of each row."""
        pipe = self.client.pipeline(transaction=False)
        for q, p, row in rows:
            eid = _text(row["message_id"])
            pipe.xrange(QueueKeys(q).stream(p), eid, eid)
            pipe.zscore(QueueKeys(q).retry(p), eid)
        reply = pipe.execute()
        out = []
        for i in range(0, len(reply), 2):
            entries, due = reply[i], reply[i + 1]
            task = _text(entries[0][1].get(b"task", b"")) if entries else None
            out.append((task, due))
        return out

    # -- everything ------------------------------------------------------------------------

    def overview(self) -> Overview:
        """Queues, then workers: what ``taskq inspect`` shows."""
        queues = self.queue_stats()
        workers = self.workers()
        return Overview(_redis_ms(self.client.time()), tuple(queues), tuple(workers))


@dataclass(frozen=True)
class _RawStream:
    """One stream's figures from the MULTI, before its oldest waiting entry is looked up."""

    stream: str
    priority: str
    now: int
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

    @classmethod
    def parse(cls, k: QueueKeys, priority: str, now: int, replies: Sequence[Any]) -> _RawStream:
        """From the replies to XINFO GROUPS, XLEN, XPENDING (summary) and ZCARD (retry set)."""
        groups, length, summary, retrying = replies
        group = _group(groups)
        last, lag = group.get("last-delivered-id"), group.get("lag")
        oldest = summary.get("min") if isinstance(summary, dict) else None
        return cls(
            stream=k.stream(priority),
            priority=priority,
            now=now,
            length=length if isinstance(length, int) else 0,
            pending=int(group.get("pending") or 0),
            consumers=int(group.get("consumers") or 0),
            last_id=_text(last) if last is not None else None,
            lag=int(lag) if lag is not None else None,
            oldest_pending=_text(oldest) if oldest else None,
            retrying=retrying if isinstance(retrying, int) else 0,
        )

    def stats(self, queue: str, oldest_waiting: str | None) -> StreamStats:
        return StreamStats(
            queue,
            self.priority,
            self.stream,
            self.length,
            self.waiting,
            self.lag,
            self.pending,
            self.retrying,
            self.consumers,
            self.last_id,
            oldest_waiting,
            self._age(oldest_waiting),
            self.oldest_pending,
            self._age(self.oldest_pending),
        )

    def _age(self, entry_id: str | None) -> int | None:
        return None if entry_id is None else max(0, self.now - entry_ms(entry_id))


def _group(groups: Any) -> dict[str, Any]:
    """Our group's XINFO GROUPS record ({} if the stream or the group does not exist)."""
    if not isinstance(groups, list):
        return {}
    return next((g for g in groups if _text(g.get("name")) == GROUP), {})


def _queue(
    queue: str, now: int, raw: list[_RawStream], tail: list[Any], oldest: dict[str, str]
) -> QueueStats:
    streams = tuple(s.stats(queue, oldest.get(s.stream) if s.waiting else None) for s in raw)
    scheduled, first, dead = tail
    next_in = int(first[0][1]) - now if isinstance(first, list) and first else None
    return QueueStats(
        queue,
        streams,
        scheduled if isinstance(scheduled, int) else 0,
        next_in,
        dead if isinstance(dead, int) else 0,
        sum(s.waiting for s in streams),
        sum(s.pending for s in streams),
        sum(s.retrying for s in streams),
    )


def _worker(record: dict[bytes, bytes], ttl_ms: int, now: int) -> WorkerState:
    f = {_text(k): _text(v) for k, v in record.items()}
    heartbeat_ms = _int(f.get("heartbeat_ms"))
    children = tuple(_child(c, heartbeat_ms, now) for c in _json_list(f.get("children")))
    busy = sum(1 for c in children if c.task is not None)
    return WorkerState(
        id=f.get("id", ""),
        host=f.get("host", ""),
        pid=_int(f.get("pid")),
        version=f.get("version", ""),
        app=f.get("app", ""),
        queues=tuple(q for q in f.get("queues", "").split(",") if q),
        tasks=tuple(str(t) for t in _json_list(f.get("tasks"))),
        concurrency=_int(f.get("concurrency")),
        busy=busy,
        idle=len(children) - busy,
        started_ms=heartbeat_ms - _int(f.get("uptime_ms")),
        heartbeat_ms=heartbeat_ms,
        heartbeat_age_ms=max(0, now - heartbeat_ms),
        expires_in_ms=max(0, ttl_ms),
        processed=_int(f.get("processed")),
        failed=_int(f.get("failed")),
        retried=_int(f.get("retried")),
        dead=_int(f.get("dead")),
        rate_per_s=float(f.get("rate_per_s") or 0.0),
        children=children,
    )


def _child(c: Any, heartbeat_ms: int, now: int) -> ChildState:
    """A child of the record. Its master measures how long a job has run on its own
    monotonic clock; the start is placed on the Redis clock from the record's beat, so a
    worker whose clock is off does not skew it."""
    c = c if isinstance(c, dict) else {}
    running = c.get("running_ms")
    started = heartbeat_ms - int(running) if isinstance(running, int) else None
    return ChildState(
        index=_int(c.get("index")),
        pid=_int(c.get("pid")),
        consumer=str(c.get("consumer") or ""),
        task=c.get("task"),
        job_id=c.get("job_id"),
        stream=c.get("stream"),
        entry_id=c.get("entry_id"),
        started_ms=started,
        running_ms=max(0, now - int(started)) if started else None,
    )


def _pending(
    queue: str,
    priority: str,
    row: dict[str, Any],
    task: str | None,
    due: float | None,
    now: int,
    live: set[str],
    running: set[tuple[str, str]],
) -> PendingJob:
    eid, consumer = _text(row["message_id"]), _text(row["consumer"])
    stream = QueueKeys(queue).stream(priority)
    worker = worker_of(consumer)
    if consumer == RETRY_CONSUMER:
        state = "retrying"
    elif worker not in live:
        state = "orphaned"
    else:
        state = "running" if (stream, eid) in running else "held"
    return PendingJob(
        queue,
        priority,
        stream,
        eid,
        task,
        consumer,
        worker,
        state,
        int(row["time_since_delivered"]),
        int(row["times_delivered"]),
        max(0, now - entry_ms(eid)),
        int(due) - now if due is not None and state == "retrying" else None,
    )


def _json_list(raw: str | None) -> list[Any]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _redis_ms(reply: Any) -> int:
    """Redis TIME (seconds, microseconds) in ms; the local clock if TIME failed."""
    if isinstance(reply, tuple | list) and len(reply) == 2:
        return int(reply[0]) * 1000 + int(reply[1]) // 1000
    return int(time.time() * 1000)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
