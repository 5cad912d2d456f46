"""Read-only views of queues and workers (``taskq inspect``): every figure comes from Redis.

Nothing here waits on a worker. Queue figures are the streams' and the consumer group's own
counters (XINFO GROUPS, XLEN, the XPENDING summary, ZCARD), read in one MULTI per queue so
they agree with each other, plus one ``XRANGE (last-delivered-id + COUNT 1`` per stream for the
oldest waiting job: a fixed number of O(1)/O(log N) commands however many jobs wait (see
:mod:`taskq.broker.reads`). Worker figures are the heartbeat records that worker masters write
(:class:`~taskq.worker.record.WorkerRecord`); a worker whose record expired is gone. Ages use
the Redis server's clock, which also made the ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from taskq.broker.control import read_pauses
from taskq.broker.fairreads import fair_stats_steps
from taskq.broker.reads import (
    GatheringRow,
    QueueSnapshot,
    Reader,
    StreamSnapshot,
    entry_ms,
    gathering_rows,
)
from taskq.broker.steps import run
from taskq.fairview import FairStats
from taskq.ops.pendingview import PendingJob, pending_job
from taskq.pauses import Pause
from taskq.worker.record import ChildRecord, WorkerRecord

if TYPE_CHECKING:
    from taskq.app import App


@dataclass(frozen=True)
class StreamStats:
    """One priority stream of a queue, as its consumer group sees it.

    Attributes:
        length: XLEN: waiting + pending + finished jobs that the trim has not removed yet
            (acked jobs leave their stream by trimming, a few dozen acks at a time).
        waiting: entries not yet delivered to any worker: the group's ``lag`` (Redis 7.0+;
            taskq deletes delivered entries only, which keeps it valid), else the length less
            the entries up to the group's last delivered id (Redis 6.2, or after a purge).
        lag: the group's ``lag`` as Redis reports it (null when it cannot tell).
        pending: delivered, not acked: running, prefetched, or held by a worker that died
            (XINFO GROUPS ``pending``).
        retrying: failed jobs waiting out a backoff in the priority's retry set; they are
            not in the stream until they are due.
        next_retry_in_ms: when the earliest of them is due.
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
    next_retry_in_ms: int | None
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
    expired: int = 0
    """Jobs not started before their ``expires`` time, since the queue began."""
    cancelled: int = 0
    """Jobs cancelled, since the queue began."""
    held: int = 0
    """Jobs of concurrency-limited tasks waiting for a slot: out of their stream (so not in
    ``waiting``) until a running job's end frees one."""
    paused: tuple[dict[str, Any], ...] = ()
    """The queue's pauses (``taskq pause``): each ``{"task", "key", "since_ms"}``, ``None``
    for "every"; jobs set aside under them count in ``held``."""
    fair: FairStats | None = None
    """A fair queue's active keys and top keys (None: the queue is not fair)."""


@dataclass(frozen=True)
class ChildState:
    """One prefork child of a worker and the job it runs, as of its master's last heartbeat:
    the readers' one shape of a running job (``inspect workers`` and ``inspect active``,
    the dashboard), converted by :meth:`of` from the record's
    :class:`~taskq.worker.record.ChildRecord`. The job fields are None when it is idle.

    Attributes:
        worker: the id of its worker.
        index: from 1.
        started_ms: when the job started, on the Redis clock.
        running_ms: how long the job has run, now.
        jobs: jobs it runs: several for a child of async jobs (the job fields: its oldest).
    """

    worker: str
    index: int
    pid: int
    consumer: str
    task: str | None
    job_id: str | None
    stream: str | None
    entry_id: str | None
    started_ms: int | None
    running_ms: int | None
    jobs: int

    @property
    def busy(self) -> bool:
        return self.task is not None

    @classmethod
    def of(cls, worker: str, c: ChildRecord, heartbeat_ms: int, now_ms: int) -> ChildState:
        """A child of ``worker``'s record. Its master measures how long a job has run on its
        own monotonic clock; the start is placed on the Redis clock from the record's beat
        (``heartbeat_ms``), so a worker whose clock is off does not skew it."""
        started = heartbeat_ms - c.running_ms if c.running_ms is not None else None
        return cls(
            worker=worker,
            index=c.index,
            pid=c.pid,
            consumer=c.consumer,
            task=c.task,
            job_id=c.job_id,
            stream=c.stream,
            entry_id=c.entry_id,
            started_ms=started,
            running_ms=max(0, now_ms - started) if started is not None else None,
            jobs=c.jobs,
        )

    def to_json(self) -> dict[str, Any]:
        """Its fields, plus ``child`` (= ``index``): the name ``inspect active`` has used."""
        return {**asdict(self), "child": self.index}


@dataclass(frozen=True)
class WorkerState:
    """A worker's registry record (:class:`~taskq.worker.record.WorkerRecord`) as seen now;
    counters are since it started."""

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


GATHERING_ROWS = 20
"""Debounce bursts and batches per queue that the overview shows."""


@dataclass(frozen=True)
class Overview:
    """What ``taskq inspect`` prints: every queue, then every live worker."""

    now_ms: int
    queues: tuple[QueueStats, ...]
    workers: tuple[WorkerState, ...]
    gathering: tuple[GatheringRow, ...] = ()
    """Debounce bursts and batches waiting to run, the first :data:`GATHERING_ROWS` of each
    queue (all of them: ``taskq inspect gathering``)."""


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
    return view.to_json() if isinstance(view, ChildState) else asdict(view)


class Inspector:
    """Read-only queries over ``queues`` on one Redis server."""

    def __init__(
        self, reader: Reader, queues: Sequence[str], *, keys_cursor: str | None = None
    ) -> None:
        self.reader = reader
        self.queues = tuple(dict.fromkeys(queues))
        self.keys_cursor = keys_cursor
        """Also read each fair queue's page of keys from this ZSCAN cursor (``--json``)."""

    @classmethod
    def for_app(cls, app: App, *, keys_cursor: str | None = None) -> Inspector:
        """The app's queues plus those its workers serve: what ``taskq inspect`` shows without
        ``-Q``, and what the dashboard shows."""
        return cls(app.reader, app.queues(), keys_cursor=keys_cursor).widened()

    def widened(self) -> Inspector:
        """Also cover the queues that the workers registered on ``queues`` serve."""
        served = [q for w in self.workers() for q in w.queues]
        return Inspector(self.reader, [*self.queues, *served], keys_cursor=self.keys_cursor)

    # -- queues ----------------------------------------------------------------------------

    def queue_stats(self) -> list[QueueStats]:
        """Figures of every queue: one MULTI per queue, then one pipelined XRANGE per stream
        with waiting jobs, whatever the streams' lengths, and the fair queues' keys."""
        snapshots = [self.reader.queue(q) for q in self.queues]
        oldest = self.reader.oldest_waiting([s for q in snapshots for s in q.streams])
        pauses = read_pauses(self.reader.link, self.queues)
        fair = self.fair()
        return [
            replace(
                _queue(q, oldest), paused=_pauses(pauses.get(q.queue, {})), fair=fair.get(q.queue)
            )
            for q in snapshots
        ]

    def fair(self) -> dict[str, FairStats]:
        """The fair queues among these: their active keys, top keys and (with
        ``keys_cursor``) a page of their keys; two round trips for all the queues."""
        steps = fair_stats_steps(self.queues, keys_cursor=self.keys_cursor)
        return run(self.reader.link, steps, errors=False)

    # -- workers ---------------------------------------------------------------------------

    def workers(self) -> list[WorkerState]:
        """Every worker with a live registry record on any of the queues, by id."""
        now, records = self.reader.worker_records(self.queues)
        found = [_worker(WorkerRecord.from_fields(f), ttl, now) for f, ttl in records]
        return sorted(found, key=lambda w: w.id)

    def active(self) -> list[ChildState]:
        """The busy children (one per job running now), longest-running first."""
        busy = [c for w in self.workers() for c in w.children if c.busy]
        return sorted(busy, key=lambda c: -(c.running_ms or 0))

    def ping(self) -> Ping:
        """Time a Redis PING, then read each worker's beat (no worker is asked anything)."""
        redis_ms = self.reader.ping_ms()
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
        now, rows = self.reader.pending(self.queues, min_idle_ms=min_idle_ms, limit=limit)
        return [pending_job(row, now, live, running) for row in rows]

    # -- debounce bursts and filling batches -----------------------------------------------

    def gathering(self, *, limit: int = 100) -> list[GatheringRow]:
        """Per queue, the debounce bursts and batches waiting to run (key, job, calls
        gathered, due), soonest first: the first ``limit`` of each queue's gathering index
        (two pipelined round trips per queue)."""
        return [row for q in self.queues for row in gathering_rows(self.reader.link, q, limit)]

    # -- everything ------------------------------------------------------------------------

    def overview(self) -> Overview:
        """Queues, then workers: what ``taskq inspect`` shows."""
        queues = self.queue_stats()
        workers = self.workers()
        gathering = tuple(self.gathering(limit=GATHERING_ROWS))
        return Overview(self.reader.now_ms(), tuple(queues), tuple(workers), gathering)


def _stream_stats(queue: str, s: StreamSnapshot, oldest_waiting: str | None) -> StreamStats:
    def age(entry_id: str | None) -> int | None:
        return None if entry_id is None else max(0, s.now_ms - entry_ms(entry_id))

    return StreamStats(
        queue,
        s.priority,
        s.stream,
        s.length,
        s.waiting,
        s.lag,
        s.pending,
        s.retrying,
        s.next_retry_ms - s.now_ms if s.next_retry_ms is not None else None,
        s.consumers,
        s.last_id,
        oldest_waiting,
        age(oldest_waiting),
        s.oldest_pending,
        age(s.oldest_pending),
    )


def _pauses(pauses: dict[Pause, int]) -> tuple[dict[str, Any], ...]:
    return tuple({"task": p.task, "key": p.key, "since_ms": at} for p, at in pauses.items())


def _queue(q: QueueSnapshot, oldest: dict[str, str]) -> QueueStats:
    streams = tuple(
        _stream_stats(q.queue, s, oldest.get(s.stream) if s.waiting else None) for s in q.streams
    )
    next_in = q.next_scheduled_ms - q.now_ms if q.next_scheduled_ms is not None else None
    return QueueStats(
        q.queue,
        streams,
        q.scheduled,
        next_in,
        q.dead,
        sum(s.waiting for s in streams),
        sum(s.pending for s in streams),
        sum(s.retrying for s in streams),
        q.expired,
        q.cancelled,
        q.held,
    )


def _worker(r: WorkerRecord, ttl_ms: int, now: int) -> WorkerState:
    children = tuple(ChildState.of(r.id, c, r.heartbeat_ms, now) for c in r.children)
    busy = sum(1 for c in children if c.busy)
    return WorkerState(
        id=r.id,
        host=r.host,
        pid=r.pid,
        version=r.version,
        app=r.app,
        queues=r.queues,
        tasks=r.tasks,
        concurrency=r.concurrency,
        busy=busy,
        idle=len(children) - busy,
        started_ms=r.heartbeat_ms - r.uptime_ms,
        heartbeat_ms=r.heartbeat_ms,
        heartbeat_age_ms=max(0, now - r.heartbeat_ms),
        expires_in_ms=max(0, ttl_ms),
        processed=r.counts.processed,
        failed=r.counts.failed,
        retried=r.counts.retried,
        dead=r.counts.dead,
        rate_per_s=r.rate_per_s,
        children=children,
    )
