"""What a running task can know about its own job (``taskq.current_job()``)."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import logging

    from taskq.message import Message


class TelemetrySink(Protocol):
    """Where a running job's telemetry goes: the worker's writer
    (``taskq.worker.telemetry.Telemetry``); docs/telemetry.md."""

    def progress(
        self, job: JobContext, done: float, total: float | None, message: str | None
    ) -> None: ...

    def emit(self, job: JobContext, value: Any) -> None: ...

    def log(self, job: JobContext, record: logging.LogRecord) -> None: ...


class JobContext(NamedTuple):
    """The job being run.

    ``attempt`` is 1 on the first run and grows by one for every retry and every run lost
    to a crashed worker; hand-backs at shutdown do not count (see docs/reliability.md).
    """

    id: str
    task: str
    attempt: int
    max_attempts: int
    queue: str
    priority: str
    created_ms: int
    entry_id: str | None
    scheduled_ms: int | None = None
    headers: Mapping[str, str] | None = None
    """What the producer's middleware sent along (a trace context, say)."""
    sink: TelemetrySink | None = None
    """Where :meth:`progress`, :meth:`emit` and the job's log records go (None outside a
    worker, e.g. in eager mode: then they do nothing)."""

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far the job is: ``done`` of ``total`` (numbers), with a message. The
        latest value wins; writes are coalesced (at most one per 100 ms), so calling it in
        a tight loop is cheap. Readers: ``job.progress()``.

        Raises:
            TypeError / ValueError: ``done`` or ``total`` is not a finite number.
        """
        if self.sink is not None:
            self.sink.progress(self, done, total, message)

    def emit(self, value: Any) -> None:
        """Append ``value`` (any msgpack value: text, bytes, a map) to the job's output
        stream, in order, marked with this attempt; readers see it within 100 ms
        (``job.stream()``).

        Raises:
            ChunkTooLarge: it is over ``output_max_chunk_bytes`` encoded (not written).
            TypeError: msgpack cannot encode it.
        """
        if self.sink is not None:
            self.sink.emit(self, value)

    @classmethod
    def of(
        cls,
        msg: Message,
        attempt: int,
        max_attempts: int,
        entry_id: str | None,
        sink: TelemetrySink | None = None,
    ) -> JobContext:
        """The context of a run of ``msg``."""
        return cls(
            msg.id,
            msg.task,
            attempt,
            max_attempts,
            msg.queue,
            msg.priority,
            msg.created_ms,
            entry_id,
            msg.tick_ms,
            msg.headers,
            sink,
        )


_current: ContextVar[JobContext | None] = ContextVar("taskq_current_job", default=None)


def current_job() -> JobContext | None:
    """The job the calling code runs in, or None outside a task."""
    return _current.get()


def set_current(ctx: JobContext | None) -> object:
    return _current.set(ctx)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
