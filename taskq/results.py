"""Job status records and stored results: the one format the broker's scripts write and the
Job handle, ``taskq job`` and the dashboard read (docs/protocol.md, "Status records").

A job that stores its result (``store_results``, or a task's ``store_result``) has a hash
``<queue>:job:<id>`` from the moment it is enqueued, changed by the very script that moves
the job (enqueue, take, retry, succeed, dead-letter), so the record never disagrees with the
queue. Values are msgpack, like job arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from taskq import codec, record
from taskq.checkpoint import CursorView, StepView
from taskq.errors import DecodeError
from taskq.storing import (  # re-exported: this module is their public place
    CANCELLED,
    EXPIRED,
    FAILED,
    FINAL,
    MAX_MS,
    PENDING,
    RETRYING,
    RUNNING,
    SCHEDULED,
    SNOOZED,
    STATES,
    SUCCEEDED,
    UNKNOWN,
    WAITING,
    Completion,
    FailedRun,
    decode_value,
    encode_args,
    encode_result,
    read_ms,
)

__all__ = [
    "CANCELLED",
    "EXPIRED",
    "FAILED",
    "FINAL",
    "MAX_MS",
    "PENDING",
    "RETRYING",
    "RUNNING",
    "SCHEDULED",
    "SNOOZED",
    "STATES",
    "SUCCEEDED",
    "UNKNOWN",
    "WAITING",
    "AttemptError",
    "Cause",
    "Completion",
    "FailedRun",
    "FlowView",
    "JobStatus",
    "decode_value",
    "encode_args",
    "encode_result",
    "read_ms",
]


@dataclass(frozen=True)
class AttemptError:
    """One failed attempt, as the record keeps it (``attempt:<n>``)."""

    attempt: int
    error_type: str
    error: str
    traceback: str
    worker: str
    finished_ms: int


@dataclass(frozen=True)
class Cause:
    """Why a workflow step failed without running: an earlier step failed for good."""

    job_id: str
    task: str
    error_type: str
    error: str


@dataclass(frozen=True)
class JobStatus:
    """Where a job is and what became of it.

    Attributes:
        state: one of :data:`STATES`. A scheduled or retrying job whose due time has passed
            is ``waiting`` (due, about to enter its stream); ``pending`` is a workflow step
            whose turn has not come.
        tracked: the job keeps a status record (results on); without one, only ``waiting``,
            ``running``, ``succeeded`` (while its entry lingers) and ``unknown`` can be told.
            :attr:`recorded` is the same, in the word the code uses everywhere else (the
            field keeps its public name).
        attempts: runs used, counting the one in progress while ``running``.
        worker: the consumer running it (only while ``running``).
        due_ms: when a scheduled or retrying job is due (Redis clock, ms).
        errors: every failed attempt, oldest first; the last one is why a failed job failed.
        result: the stored return value (msgpack), for a succeeded job.
        cause: for a workflow step that failed because an earlier step did, that step.
        steps / cursors: a resumable job's steps (``taskq.step``) and iterations
            (``taskq.iterate``), as its steps hash holds them (docs/resumable.md).
        batch: for a batch job (``taskq.batching``), how many calls it holds (so far, while
            it is ``scheduled``, filling); None for any other job.
    """

    job_id: str
    state: str
    tracked: bool = False
    task: str = ""
    queue: str = ""
    priority: str = ""
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None
    attempts: int = 0
    worker: str | None = None
    enqueued_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    due_ms: int | None = None
    entry_id: str | None = None
    errors: tuple[AttemptError, ...] = ()
    result: bytes | None = None
    cause: Cause | None = None
    steps: tuple[StepView, ...] = ()
    cursors: tuple[CursorView, ...] = ()
    batch: int | None = None

    @property
    def recorded(self) -> bool:
        """Whether the job keeps a status record (:attr:`tracked`)."""
        return self.tracked

    @property
    def last_error(self) -> AttemptError | None:
        return self.errors[-1] if self.errors else None

    @property
    def value(self) -> Any:
        """The decoded return value (None if there is none).

        Raises:
            ExtensionError: it holds an extension type this code does not know.
        """
        return decode_value(self.result) if self.result is not None else None

    @property
    def shown_value(self) -> Any:
        """:attr:`value` as ``taskq job`` and the dashboard show it: an extension type this
        code does not know stays undecoded instead of failing."""
        return codec.unpack_shown(self.result) if self.result is not None else None

    @classmethod
    def from_record(cls, job_id: str, raw: Mapping[bytes, bytes], now_ms: int) -> JobStatus:
        """Parse a record (HGETALL); an empty one is ``unknown``."""
        if not raw:
            return cls(job_id, UNKNOWN)

        def text(name: str) -> str:
            return raw.get(name.encode(), b"").decode(errors="replace")

        def ms(name: str) -> int | None:
            value = text(name)
            return int(value) if value.isascii() and value.isdigit() else None

        state = text(record.STATE) or UNKNOWN
        due = read_ms(raw.get(record.DUE_MS.encode()))
        if state in (SCHEDULED, RETRYING, SNOOZED) and due is not None and due <= now_ms:
            state = WAITING
        attempts = ms(record.ATTEMPTS) or 0
        args, kwargs = _arguments(raw.get(record.ARGS.encode()))
        return cls(
            job_id,
            state,
            tracked=True,
            task=text(record.TASK),
            queue=text(record.QUEUE),
            priority=text(record.PRIORITY),
            args=args,
            kwargs=kwargs,
            attempts=attempts + 1 if state == RUNNING else attempts,
            worker=text(record.WORKER) or None if state == RUNNING else None,
            enqueued_ms=ms(record.ENQUEUED_MS),
            started_ms=ms(record.STARTED_MS),
            finished_ms=ms(record.FINISHED_MS) if state in FINAL else None,
            due_ms=due if state in (SCHEDULED, RETRYING, SNOOZED) else None,
            entry_id=text(record.ENTRY) or None,
            errors=_attempt_errors(raw),
            result=raw.get(record.RESULT.encode()) if state == SUCCEEDED else None,
            cause=_cause(raw),
            batch=ms(record.BATCH),
        )

    def to_json(self) -> dict[str, Any]:
        """The status as plain JSON types (``taskq job --json``); the result is decoded."""
        return {
            "job_id": self.job_id,
            "state": self.state,
            "recorded": self.recorded,
            "tracked": self.recorded,  # (its older name, for scripts that read it)
            "task": self.task,
            "queue": self.queue,
            "priority": self.priority,
            "args": codec.jsonable(list(self.args)),
            "kwargs": codec.jsonable(dict(self.kwargs)) if self.kwargs is not None else None,
            "attempts": self.attempts,
            "worker": self.worker,
            "enqueued_ms": self.enqueued_ms,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "due_ms": self.due_ms,
            "entry_id": self.entry_id,
            "errors": [vars(e) for e in self.errors],
            "result": codec.jsonable(self.shown_value),
            "cause": vars(self.cause) if self.cause else None,
            "steps": [s._asdict() for s in self.steps],
            "cursors": [c._asdict() for c in self.cursors],
            "batch": {"job_id": self.job_id, "calls": self.batch} if self.batch else None,
        }


@dataclass(frozen=True)
class FlowView:
    """A workflow as ``taskq job FLOW_ID`` shows it: its steps (those that keep a status
    record, in order) and, per chord, ``(header results counted, header size)``; the count is
    None once the chord ended (its body enqueued, or the chord failed)."""

    flow_id: str
    kind: str
    steps: tuple[JobStatus, ...]
    chords: tuple[tuple[int | None, int], ...]
    found: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "flow_id": self.flow_id,
            "kind": self.kind,
            "steps": [s.to_json() for s in self.steps],
            "chords": [{"done": d, "size": n} for d, n in self.chords],
        }


def _arguments(raw: bytes | None) -> tuple[tuple[Any, ...], Mapping[str, Any] | None]:
    if raw is None:
        return (), None
    try:
        args, kwargs = codec.unpack_shown(raw)
        return tuple(args), dict(kwargs)
    except (ValueError, TypeError, DecodeError, msgpack.UnpackException):
        return (), None


def _attempt_errors(raw: Mapping[bytes, bytes]) -> tuple[AttemptError, ...]:
    found = []
    for name, value in raw.items():
        n = record.attempt_number(name)
        if n is None:
            continue
        try:
            e = decode_value(value)
            found.append(
                AttemptError(
                    n,
                    str(e.get("error_type", "")),
                    str(e.get("error", "")),
                    str(e.get("traceback", "")),
                    str(e.get("worker", "")),
                    int(e.get("finished_ms", 0)),
                )
            )
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException):
            continue
    return tuple(sorted(found, key=lambda e: e.attempt))


def _cause(raw: Mapping[bytes, bytes]) -> Cause | None:
    if record.CAUSE.encode() not in raw:
        return None

    def text(name: str) -> str:
        return raw.get(name.encode(), b"").decode(errors="replace")

    fields = (record.CAUSE, record.CAUSE_TASK, record.CAUSE_TYPE, record.CAUSE_ERROR)
    return Cause(*(text(f) for f in fields))
