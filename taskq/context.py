"""What a running task can know about its own job (``taskq.current_job()``)."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from taskq.message import Message


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

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @classmethod
    def of(cls, msg: Message, attempt: int, max_attempts: int, entry_id: str | None) -> JobContext:
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
        )


_current: ContextVar[JobContext | None] = ContextVar("taskq_current_job", default=None)


def current_job() -> JobContext | None:
    """The job the calling code runs in, or None outside a task."""
    return _current.get()


def set_current(ctx: JobContext | None) -> object:
    return _current.set(ctx)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
