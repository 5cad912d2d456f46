"""The heartbeat record: what a worker's master writes about itself and its children every
``heartbeat_interval_ms``, and what ``taskq inspect``, the metrics and the dashboard read.

Stored as the hash ``<queue>:worker:<worker id>`` (see docs/protocol.md); ``children`` and
``tasks`` are JSON arrays inside it, ``recent_tasks`` a JSON object. Durations are measured
by the master on its monotonic clock and ``heartbeat_ms`` is set by Redis, so readers place
every time on the Redis clock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from taskq.broker.replies import as_int
from taskq.worker.durations import CARRIED_TASKS, TaskTime
from taskq.worker.outcome import COUNTERS, JobCounts

if TYPE_CHECKING:
    from taskq.worker.slotview import Running


CHILD_FIELDS = (
    "index", "pid", "consumer", "task", "job_id", "stream", "entry_id", "running_ms", "jobs"
)  # fmt: skip
"""A child's fields, in their order in the record's JSON."""


class ChildRecord:
    """One prefork child and the job it runs (``task`` and the rest are None when idle):
    the running job as the heartbeat record carries it, built by :meth:`of` from the slot's
    :class:`~taskq.worker.scoreboard.Running` and read back by :meth:`from_json`. A plain
    class, never changed once made (a frozen dataclass costs a worker's start about 4M
    instructions to define).

    Attributes:
        index: from 1.
        running_ms: how long the job had run when the record was written.
        jobs: how many jobs it runs (above 1 for a child of async jobs, whose oldest job
            the other fields describe).
    """

    __slots__ = CHILD_FIELDS

    def __init__(
        self,
        index: int,
        pid: int,
        consumer: str,
        task: str | None = None,
        job_id: str | None = None,
        stream: str | None = None,
        entry_id: str | None = None,
        running_ms: int | None = None,
        jobs: int = 0,
    ):
        self.index, self.pid, self.consumer, self.task = index, pid, consumer, task
        self.job_id, self.stream, self.entry_id = job_id, stream, entry_id
        self.running_ms, self.jobs = running_ms, jobs

    def to_json(self) -> dict[str, Any]:
        """Its fields as the record's JSON carries them."""
        return {name: getattr(self, name) for name in CHILD_FIELDS}

    @classmethod
    def of(
        cls,
        index: int,
        pid: int,
        consumer: str,
        running: Sequence[Running],
        streams: Sequence[str],
        now_mono: float,
    ) -> ChildRecord:
        """The record of a child from the jobs its slot shows (oldest first): the oldest is
        the one it names, timed on the master's monotonic clock at ``now_mono``."""
        if not running:
            return cls(index, pid, consumer)
        job = running[0]
        return cls(
            index,
            pid,
            consumer,
            job.task,
            job.job_id,
            job.stream(streams),
            job.entry_id,
            int((now_mono - job.started_mono) * 1000),
            len(running),
        )

    @classmethod
    def from_json(cls, raw: Any) -> ChildRecord:
        raw = raw if isinstance(raw, dict) else {}
        running = raw.get("running_ms")
        return cls(
            index=as_int(raw.get("index")),
            pid=as_int(raw.get("pid")),
            consumer=str(raw.get("consumer") or ""),
            task=_opt_str(raw.get("task")),
            job_id=_opt_str(raw.get("job_id")),
            stream=_opt_str(raw.get("stream")),
            entry_id=_opt_str(raw.get("entry_id")),
            running_ms=running if isinstance(running, int) else None,
            jobs=as_int(raw.get("jobs")) if "jobs" in raw else (1 if raw.get("task") else 0),
        )


class WorkerRecord:
    """A worker's registry record. Counters are since the worker started. Like
    :class:`ChildRecord`, a plain class never changed once made: a worker defines both
    before its first job, where a frozen dataclass costs about 4M instructions to define and
    a named tuple of these 17 fields about 3M.

    Attributes:
        id: ``<host>:<master pid>:<random>``.
        uptime_ms: how long the master had run when it wrote the record.
        rate_per_s: successes per second over the last heartbeat interval.
        heartbeat_ms: when the record was written, by the Redis clock (set by Redis).
        recent_jobs, recent_busy_ms: jobs finished, and the time its jobs ran (all children
            summed), over the last minutes (:mod:`taskq.worker.durations`): their ratio is
            the mean job duration of the worker.
        recent_tasks: the same per task (the busiest ones, the others summed under
            :data:`~taskq.worker.durations.OTHER`): what the autoscaling signal weighs the
            waiting jobs of each task with. Stored as ``{"task": [jobs, busy_ms], ...}``.
    """

    __slots__ = (
        "app", "children", "concurrency", "counts", "heartbeat_ms", "host", "id", "pid",
        "queues", "rate_per_s", "recent_busy_ms", "recent_jobs", "recent_tasks", "tasks",
        "uptime_ms", "version", "visibility_timeout_ms",
    )  # fmt: skip

    def __init__(
        self,
        id: str,
        host: str,
        pid: int,
        version: str,
        app: str,
        uptime_ms: int,
        visibility_timeout_ms: int,
        concurrency: int,
        queues: tuple[str, ...],
        tasks: tuple[str, ...],
        counts: JobCounts,
        rate_per_s: float,
        children: tuple[ChildRecord, ...],
        heartbeat_ms: int = 0,
        recent_jobs: int = 0,
        recent_busy_ms: int = 0,
        recent_tasks: dict[str, TaskTime] | None = None,
    ):
        self.id, self.host, self.pid, self.version, self.app = id, host, pid, version, app
        self.uptime_ms, self.visibility_timeout_ms = uptime_ms, visibility_timeout_ms
        self.concurrency, self.queues, self.tasks = concurrency, queues, tasks
        self.counts, self.rate_per_s, self.children = counts, rate_per_s, children
        self.heartbeat_ms = heartbeat_ms
        self.recent_jobs, self.recent_busy_ms = recent_jobs, recent_busy_ms
        self.recent_tasks: dict[str, TaskTime] = {} if recent_tasks is None else recent_tasks

    def to_fields(self) -> dict[str, str | int | float]:
        """The hash fields (``heartbeat_ms`` is left to the script, which has the clock)."""
        out: dict[str, str | int | float] = {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "app": self.app,
            "uptime_ms": self.uptime_ms,
            "visibility_timeout_ms": self.visibility_timeout_ms,
            "concurrency": self.concurrency,
            "queues": ",".join(self.queues),
            "tasks": json.dumps(list(self.tasks)),
            "rate_per_s": self.rate_per_s,
            "children": json.dumps([c.to_json() for c in self.children]),
            "recent_jobs": self.recent_jobs,
            "recent_busy_ms": self.recent_busy_ms,
            "recent_tasks": json.dumps(
                {t: list(v) for t, v in self.recent_tasks.items()}, separators=(",", ":")
            ),
        }
        out.update(zip(COUNTERS, self.counts.as_tuple(), strict=True))
        return out

    @classmethod
    def from_fields(cls, f: dict[str, str]) -> WorkerRecord:
        """Parse a record; a missing or mangled field reads as empty or 0."""
        counts = JobCounts(*(as_int(f.get(c)) for c in COUNTERS))
        return cls(
            id=f.get("id", ""),
            host=f.get("host", ""),
            pid=as_int(f.get("pid")),
            version=f.get("version", ""),
            app=f.get("app", ""),
            uptime_ms=as_int(f.get("uptime_ms")),
            visibility_timeout_ms=as_int(f.get("visibility_timeout_ms")),
            concurrency=as_int(f.get("concurrency")),
            queues=tuple(q for q in f.get("queues", "").split(",") if q),
            tasks=tuple(str(t) for t in _json_list(f.get("tasks"))),
            counts=counts,
            rate_per_s=_float(f.get("rate_per_s")),
            children=tuple(ChildRecord.from_json(c) for c in _json_list(f.get("children"))),
            heartbeat_ms=as_int(f.get("heartbeat_ms")),
            recent_jobs=max(0, as_int(f.get("recent_jobs"))),
            recent_busy_ms=max(0, as_int(f.get("recent_busy_ms"))),
            recent_tasks=task_times(f.get("recent_tasks")),
        )


MAX_TASK_NAME = 200
"""Longer names in a record's ``recent_tasks`` are dropped (a slot keeps 160 bytes)."""

MAX_TASKS_FIELD = 16_384
"""A ``recent_tasks`` field longer than this (characters) is ignored whole."""


def task_times(raw: str | None) -> dict[str, TaskTime]:
    """A record's ``recent_tasks``, read as untrusted: at most ``2 * CARRIED_TASKS`` entries
    of a short name and two counts in range; any other entry is dropped, any other field
    reads as empty."""
    if not raw or len(raw) > MAX_TASKS_FIELD:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    out = {}
    for task, pair in list(value.items())[: 2 * CARRIED_TASKS]:
        if len(task) <= MAX_TASK_NAME and _counts(pair):
            out[task] = TaskTime(*pair)
    return out


def _counts(pair: Any) -> bool:
    """``[jobs, busy_ms]``: two non-negative ints (not bools), busy time under a year."""
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and all(type(n) is int for n in pair)
        and 0 < pair[0] <= 10**9
        and 0 <= pair[1] <= 365 * 86_400_000
    )


def _json_list(raw: str | None) -> list[Any]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
