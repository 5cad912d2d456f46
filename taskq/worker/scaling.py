"""The autoscaling signal: how many worker processes each queue wants now (``taskq scale``,
the ``taskq_desired_processes`` gauge, the KEDA metrics-api endpoint, ``--autoscale``).

Read from what Redis already keeps, never per job: the queue's figures (the same script as
``taskq inspect``), the delayed jobs and retries due within the horizon, and the heartbeat
records of the workers serving the queue (the jobs they run, and the mean duration of their
jobs per task over the last minutes, :mod:`taskq.worker.durations`), and the task names of
the first waiting entries of each stream (a bounded sample of the waiting mix).
docs/scaling.md has the formula.
A :class:`Scaler` reads each queue at most once per ``min_interval_s``, however often it is
asked.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from taskq.broker.reads import QueueSnapshot, Reader, StreamSnapshot
from taskq.broker.replies import entries, text
from taskq.config import Settings
from taskq.keys import QueueKeys
from taskq.worker.durations import OTHER, TaskTime
from taskq.worker.record import MAX_TASK_NAME, WorkerRecord

MIN_INTERVAL_S = 1.0
"""A reader refreshes a queue's signal at most this often."""

MIX_SAMPLE = 200
"""Waiting entries read per priority stream (from its head) to estimate the task mix."""


@dataclass(frozen=True)
class ScaleSignal:
    """A queue's desired worker processes, and what it was computed from.

    Attributes:
        desired_processes: children (``-c``) the queue wants in total; 0 when nothing waits
            or runs.
        waiting: jobs in the streams not delivered to any worker (the group's cursor, as
            ``taskq inspect`` counts them: not XLEN, not the group's lag).
        fetched: jobs delivered but not running: prefetched by a child, or held by a worker
            that died (pending less running).
        due: delayed jobs and retries due within ``horizon_s``.
        held: jobs of concurrency-limited tasks waiting for a slot; not counted (more
            processes would not start them; the end of a running job releases one into the
            stream, where it counts as waiting).
        running: jobs the queue's live workers run, as of their last heartbeat.
        processes: children of the live workers serving the queue.
        job_duration_s: mean time a job of the queue's workers ran over the last minutes
            (all tasks); None before any finished.
        work_s: the waiting jobs of each task times that task's mean duration
            (``job_duration_s`` for a task not measured), plus fetched and due jobs times
            ``job_duration_s``.
        task_duration_s: the mean duration of each task the workers ran over the last
            minutes.
        waiting_tasks: the waiting jobs per task, estimated from the first
            :data:`MIX_SAMPLE` waiting entries of each stream.
    """

    queue: str
    desired_processes: int
    waiting: int
    fetched: int
    due: int
    held: int
    running: int
    processes: int
    workers: int
    job_duration_s: float | None
    work_s: float
    target_time_to_start_s: float
    horizon_s: float
    task_duration_s: dict[str, float] = field(default_factory=dict)
    waiting_tasks: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def desired_processes(
    waiting_jobs: int, running_jobs: int, job_duration_s: float | None, target_s: float
) -> int:
    """The fewest processes that start every waiting job within ``target_s``, never fewer
    than the jobs running now: ``max(running, ceil(waiting * duration / target))``, at least
    1 while a job waits (before any duration is known: 1, to measure it), 0 when nothing
    waits or runs."""
    if waiting_jobs <= 0:
        return max(0, running_jobs)
    if job_duration_s is None:
        return max(1, running_jobs)
    backlog = math.ceil(round(waiting_jobs * job_duration_s / target_s, 6))
    return max(1, running_jobs, backlog)


class Scaler:
    """The signals of ``queues``, each read at most once per ``min_interval_s``."""

    def __init__(
        self,
        reader: Reader,
        queues: Sequence[str],
        settings: Settings,
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.queues = tuple(dict.fromkeys(queues))
        self.target_s = settings.target_time_to_start_s
        self.horizon_s = settings.scale_horizon_s
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._cache: dict[str, tuple[float, ScaleSignal]] = {}

    def signals(self) -> list[ScaleSignal]:
        """Every queue's signal (read again where the last read is older than the interval)."""
        now = self._clock()
        stale = [
            q
            for q in self.queues
            if q not in self._cache or now - self._cache[q][0] >= self.min_interval_s
        ]
        if stale:
            for signal in self._read(stale):
                self._cache[signal.queue] = (now, signal)
        return [self._cache[q][1] for q in self.queues]

    def _read(self, queues: Sequence[str]) -> list[ScaleSignal]:
        snapshots = [self.reader.queue(q) for q in queues]
        mixes = waiting_mix(self.reader, [s for q in snapshots for s in q.streams])
        due = self.reader.due_within(queues, int(self.horizon_s * 1000))
        _, rows = self.reader.worker_records(queues)
        records = [WorkerRecord.from_fields(fields) for fields, _ in rows]
        return [self._signal(s, due[s.queue], records, mixes) for s in snapshots]

    def _signal(
        self,
        q: QueueSnapshot,
        due: int,
        records: list[WorkerRecord],
        mixes: dict[str, dict[str, float]],
    ) -> ScaleSignal:
        streams = set(QueueKeys(q.queue).streams)
        serving = {r.id: r for r in records if q.queue in r.queues}.values()
        running = sum(c.jobs for r in serving for c in r.children if c.stream in streams)
        jobs = sum(r.recent_jobs for r in serving)
        duration = sum(r.recent_busy_ms for r in serving) / 1000 / jobs if jobs else None
        per_task = task_durations(r.recent_tasks for r in serving)
        mix = merged(mixes.get(s.stream, {}) for s in q.streams)
        waiting = sum(s.waiting for s in q.streams)
        fetched = max(0, sum(s.pending for s in q.streams) - running)
        queued = waiting + fetched + due
        unsampled = waiting - sum(mix.values()) + fetched + due
        work_s = backlog_work_s(mix, unsampled, per_task, duration)
        return ScaleSignal(
            queue=q.queue,
            desired_processes=desired_processes(
                queued,
                running,
                work_s / queued if queued and work_s is not None else duration,
                self.target_s,
            ),
            waiting=waiting,
            fetched=fetched,
            due=due,
            held=q.held,
            running=running,
            processes=sum(len(r.children) for r in serving),
            workers=len(serving),
            job_duration_s=round(duration, 6) if duration is not None else None,
            work_s=round(work_s or 0.0, 3),
            target_time_to_start_s=self.target_s,
            horizon_s=self.horizon_s,
            task_duration_s={t: round(d, 6) for t, d in per_task.items()},
            waiting_tasks={t: round(n) for t, n in sorted(mix.items(), key=lambda kv: -kv[1])},
        )


def backlog_work_s(
    waiting: dict[str, float],
    other_jobs: float,
    per_task_s: dict[str, float],
    fleet_s: float | None,
) -> float | None:
    """The time the queued jobs will take: each task's waiting jobs times its mean duration,
    the fleet's mean for a task never measured and for ``other_jobs`` (fetched, due, and
    waiting jobs outside the sample's mix); None before any duration is known."""
    if fleet_s is None:
        return None
    known = sum(n * per_task_s.get(t, fleet_s) for t, n in waiting.items())
    return known + max(0.0, other_jobs) * fleet_s


def merged(counts: Iterable[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for each in counts:
        for task, n in each.items():
            out[task] = out.get(task, 0.0) + n
    return out


def task_durations(records: Iterable[dict[str, TaskTime]]) -> dict[str, float]:
    """Each task's mean duration (s) over the workers' windows (``OTHER`` left out: it is
    no one task)."""
    jobs: Counter[str] = Counter()
    busy_ms: Counter[str] = Counter()
    for tasks in records:
        for task, t in tasks.items():
            jobs[task] += t.jobs
            busy_ms[task] += t.busy_ms
    return {t: busy_ms[t] / 1000 / n for t, n in jobs.items() if n and t != OTHER}


def waiting_mix(reader: Reader, streams: Sequence[StreamSnapshot]) -> dict[str, dict[str, float]]:
    """Stream → waiting jobs per task: the task names of its first :data:`MIX_SAMPLE`
    undelivered entries (XRANGE after the group's cursor: O(log N) to seek, then the
    entries read), scaled to the stream's waiting count. One round trip for every stream."""
    todo = [s for s in streams if s.waiting > 0]
    if not todo:
        return {}
    commands = [
        ("XRANGE", s.stream, f"({s.last_id or '0-0'}", "+", "COUNT", MIX_SAMPLE) for s in todo
    ]
    out = {}
    for s, rows in zip(todo, reader.link.pipeline(commands, errors=False), strict=True):
        sample = Counter(_task_name(f.get(b"task")) for _, f in entries(rows))
        seen = sum(sample.values())
        if seen:
            out[s.stream] = {t: s.waiting * n / seen for t, n in sample.items()}
    return out


def _task_name(raw: Any) -> str:
    """An entry's ``task`` field (untrusted): :data:`OTHER` when missing or too long."""
    name = text(raw) if isinstance(raw, bytes | str) else ""
    return name if 0 < len(name) <= MAX_TASK_NAME else OTHER


def total(signals: Sequence[ScaleSignal]) -> int:
    """The processes a worker serving all of these queues should have, summed."""
    return sum(s.desired_processes for s in signals)


def document(signals: Sequence[ScaleSignal]) -> dict[str, Any]:
    """``taskq scale --json`` and the metrics-api endpoint's answer: the total, then each
    queue's signal with its inputs."""
    return {"desired_processes": total(signals), "queues": [s.to_json() for s in signals]}
