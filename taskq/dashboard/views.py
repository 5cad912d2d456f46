"""What each dashboard page shows, read through taskq's ops layer (blocking calls: the pages
run them in a thread pool).

The figures are the ones ``taskq inspect --json`` prints, from the same
:class:`~taskq.ops.inspect.Inspector` over the same queues (the app's, plus those its
workers serve); nothing here computes a count of its own but the per-stream ``running``,
which is the workers' children that report a job of that stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskq.app import App
from taskq.broker.series import Series
from taskq.config import check_queue_name
from taskq.deadletter import Deadletter
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.keys import check_job_id, check_priority
from taskq.ops.deadletters import Deadletters, Page
from taskq.ops.inspect import Inspector, Overview, QueueStats, WorkerState, to_json
from taskq.ops.schedules import schedule_rows
from taskq.ops.throughput import Throughput, last_hour
from taskq.results import UNKNOWN, FlowView, JobStatus
from taskq.worker.scaling import Scaler, document

PAGE_SIZE = 50


class NotFound(Exception):
    """The page names something Redis has no record of (the message says what)."""


@dataclass(frozen=True)
class OverviewPage:
    overview: Overview
    throughput: Throughput
    running: dict[str, int]
    """Stream -> children running one of its jobs."""

    def to_json(self) -> dict[str, Any]:
        """``taskq inspect --json``'s document, plus the last hour's per-minute counts."""
        out: dict[str, Any] = to_json(self.overview)
        out["throughput"] = to_json(self.throughput)
        return out


@dataclass(frozen=True)
class WorkersPage:
    now_ms: int
    workers: tuple[WorkerState, ...]


@dataclass(frozen=True)
class JobPage:
    status: JobStatus | None
    flow: FlowView | None
    now_ms: int


@dataclass(frozen=True)
class DeadlettersPage:
    queue: str
    counts: dict[str, int]
    """Queue -> dead letters, for each queue shown."""
    page: Page
    now_ms: int


MAX_SCALERS = 64
"""Sets of queues whose autoscaling signal the dashboard caches."""


class Source:
    """The dashboard's reads and actions on one app's Redis."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._scalers: dict[tuple[str, ...], Scaler] = {}

    def scale(self, queues: Sequence[str]) -> dict[str, Any]:
        """The autoscaling signal of ``queues`` (default: the app's), as ``taskq scale
        --json`` prints it: KEDA's metrics-api trigger reads it. Each set of queues keeps
        its :class:`Scaler`, so polling reads Redis at most once a second.

        Raises:
            ConfigError: a malformed queue name.
        """
        names = tuple(queues) or tuple(self.app.queues())
        for name in names:
            check_queue_name(name)
        if names not in self._scalers:
            if len(self._scalers) >= MAX_SCALERS:  # names come from requests: keep it bounded
                self._scalers.clear()
            self._scalers[names] = Scaler(self.app.reader, names, self.app.settings)
        return document(self._scalers[names].signals())

    def inspector(self) -> Inspector:
        return Inspector.for_app(self.app)

    def overview(self) -> OverviewPage:
        inspector = self.inspector()
        overview = inspector.overview()
        running: dict[str, int] = {}
        for w in overview.workers:
            for c in w.children:
                if c.busy and c.stream is not None:
                    running[c.stream] = running.get(c.stream, 0) + 1
        throughput = last_hour(Series(self.app.link), inspector.queues)
        return OverviewPage(overview, throughput, running)

    def workers(self) -> WorkersPage:
        workers = tuple(self.inspector().workers())
        return WorkersPage(self.app.reader.now_ms(), workers)

    def job(self, job_id: str, queue: str | None, *, at: str | None = None) -> JobPage:
        """A job's status, or a workflow's steps.

        ``at`` (``<stream>/<entry id>``, as the workers page links a running job) tells where
        to look for a job that keeps no record: its stream entry says what it can.

        Raises:
            ConfigError: a malformed job id, queue name or place.
            NotFound: no record of it.
        """
        check_job_id(job_id)
        if queue:
            check_queue_name(queue)
        handle = self.app.job(job_id, queue=queue or None)
        now = self.app.reader.now_ms()
        if not handle.recorded:
            flow = self.app.flow(job_id, queue=queue or None)
            if flow is not None:
                return JobPage(None, self.app.records.flow_view(flow.queue, flow.id), now)
            if at:
                handle = _at_entry(self.app, job_id, at)
        status = handle.status()
        if status.state == UNKNOWN:
            raise NotFound(f"no record of job {job_id} (never stored, expired or forgotten)")
        return JobPage(status, None, now)

    def queues(self) -> tuple[str, ...]:
        return self.inspector().queues

    def queue(self, queue: str) -> str:
        """``queue``, checked: one of the app's or its workers' queues.

        Raises:
            ConfigError: a malformed name; NotFound: another queue.
        """
        return self._queue(queue or "-", self.queues())

    def deadletters(
        self, queue: str | None, *, before: str | None, task: str, error: str
    ) -> DeadlettersPage:
        queues = self.queues()
        name = self._queue(queue, queues)
        store = self._store(name)
        if before is not None and not _is_entry_id(before):
            raise ConfigError(f"invalid cursor {before!r}: expected a stream entry id")
        page = store.page(before=before, limit=PAGE_SIZE, task=task, error=error)
        counts = {q: self._store(q).count() for q in queues}
        return DeadlettersPage(name, counts, page, store.now_ms())

    def deadletter(self, queue: str, dead_id: str) -> tuple[Deadletter, int]:
        store = self._store(self._queue(queue, self.queues()))
        if not _is_entry_id(dead_id):
            raise ConfigError(f"invalid dead-letter id {dead_id!r}: expected a stream entry id")
        job = store.get(dead_id)
        if job is None:
            raise NotFound(f"no dead-lettered job {dead_id} in {queue}")
        return job, store.now_ms()

    # -- actions ---------------------------------------------------------------------------

    def retry(
        self, queue: str, dead_ids: list[str] | None, *, task: str = "", error: str = ""
    ) -> tuple[int, list[tuple[str, str]]]:
        """Retry the given dead letters, or (``dead_ids`` None) every one that matches."""
        store = self._store(self._queue(queue, self.queues()))
        ids = dead_ids if dead_ids is not None else store.matching(task=task, error=error)
        return store.retry(ids)

    def purge(self, queue: str) -> int:
        return self._store(self._queue(queue, self.queues())).purge()

    def cancel(self, job_id: str, queue: str | None, *, terminate: bool) -> dict[str, str]:
        check_job_id(job_id)
        handle = self.app.job(job_id, queue=queue or None)
        if handle.recorded:
            return {job_id: handle.cancel(terminate=terminate)}
        flow = self.app.flow(job_id, queue=queue or None)
        if flow is None:  # a job without a record: found by its id, or its tombstone waits
            return {job_id: handle.cancel(terminate=terminate)}
        return flow.cancel(terminate=terminate)

    def schedules(self) -> tuple[list[dict[str, Any]], int]:
        return schedule_rows(self.app), self.app.reader.now_ms()

    def _queue(self, queue: str | None, known: tuple[str, ...]) -> str:
        if not queue:
            return known[0]
        check_queue_name(queue)
        if queue not in known:
            raise NotFound(f"queue {queue} is not one of this app's or its workers' queues")
        return queue

    def _store(self, queue: str) -> Deadletters:
        return Deadletters.for_app(self.app, queue)


def _at_entry(app: App, job_id: str, at: str) -> Job:
    """The handle of a job without a record, at ``<queue>:<priority>/<entry id>``."""
    stream, _, entry_id = at.partition("/")
    queue, _, priority = stream.rpartition(":")
    check_queue_name(queue)
    check_priority(priority)
    if not _is_entry_id(entry_id):
        raise ConfigError(f"invalid place {at!r}: expected <queue>:<priority>/<entry id>")
    return Job(job_id, "", queue, priority, entry_id=entry_id, app=app)


def _is_entry_id(value: str) -> bool:
    ms, sep, seq = value.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit() and len(value) <= 41


def timeline(s: JobStatus) -> list[tuple[int, str]]:
    """The job's moments, oldest first: enqueued, due, each failed attempt, started, ended."""
    events = [(s.enqueued_ms, "enqueued"), (s.due_ms, f"due ({s.state})")]
    events += [(e.finished_ms, f"attempt {e.attempt} failed: {e.error_type}") for e in s.errors]
    events.append((s.started_ms, f"attempt {s.attempts} started"))
    if s.finished_ms is not None:
        events.append((s.finished_ms, s.state))
    return sorted((ms, label) for ms, label in events if ms is not None)


def queue_rows(stats: QueueStats, running: dict[str, int]) -> list[dict[str, Any]]:
    """One row per priority for the overview table (figures as ``inspect --json`` has them)."""
    return [
        {
            "priority": s.priority,
            "stream": s.stream,
            "waiting": s.waiting,
            "running": running.get(s.stream, 0),
            "pending": s.pending,
            "retrying": s.retrying,
            "lag": s.lag,
            "oldest_waiting_age_ms": s.oldest_waiting_age_ms,
            "consumers": s.consumers,
        }
        for s in stats.streams
    ]
