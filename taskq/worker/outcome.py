"""The outcome of one run, as a value: what became of a delivery, and the job counters.

Written by the executor (or by the master, for a run whose child died), applied to Redis by
:mod:`taskq.worker.finish`, counted by the scoreboard, the heartbeat record and the metrics,
and passed to middleware.
"""

from __future__ import annotations

from typing import NamedTuple

from taskq.broker import Delivery
from taskq.message import Message

OK, RETRY, DEAD = "ok", "retry", "dead"
"""The kinds of outcome: the job is done; it runs again later; it moved to the dead letters."""
EXPIRED, CANCELLED = "expired", "cancelled"
"""Outcomes of jobs that did not run to an end: not started before their ``expires`` time;
cancelled while running. Counted per queue in Redis (``<queue>:counts``), not per worker."""
YIELDED = "yielded"
"""A resumable job gave itself back (warm shutdown, ``max_run_s``): it goes to the back of
its queue without spending an attempt (docs/resumable.md). Not counted."""
SNOOZED = "snoozed"
"""The job asked to run again later (``taskq.Snooze``) without spending an attempt."""
PAUSED = "paused"
"""A pause (``taskq pause``) covers the job: it is set aside, not run, until resumed."""


class Outcome(NamedTuple):
    """What became of one delivery, and what the worker must do with it."""

    kind: str
    delivery: Delivery
    msg: Message | None = None
    attempt: int = 0
    delay_ms: int = 0
    error_type: str = ""
    error: str = ""
    traceback: str = ""
    duration_s: float = 0.0
    result: bytes | None = None
    """The encoded return value of a success whose job stores its result."""
    exception: BaseException | None = None
    """The exception the task raised (in the process that ran it; None elsewhere)."""
    pause_field: str = ""
    """For a PAUSED outcome: the pause that covers the job (``taskq.pauses.Pause.field``)."""


def rejected(d: Delivery, reason: str, msg: Message | None = None, attempt: int = 0) -> Outcome:
    """A delivery that cannot run at all (bad input): dead at once, with the reason."""
    return Outcome(DEAD, d, msg, attempt, error_type="Rejected", error=reason)


COUNTERS = ("processed", "failed", "retried", "dead")
"""The counters, in their order in the scoreboard and the heartbeat record."""


class JobCounts:
    """The job counters a worker keeps: runs that succeeded; runs that failed, and of those
    how many were retried and how many dead-lettered. A plain class (never changed after it
    is made): a frozen dataclass costs a worker's start about 4M instructions to define."""

    __slots__ = COUNTERS

    def __init__(self, processed: int = 0, failed: int = 0, retried: int = 0, dead: int = 0):
        self.processed, self.failed, self.retried, self.dead = processed, failed, retried, dead

    def counted(self, kind: str, n: int = 1) -> JobCounts:
        """These counts plus ``n`` outcomes of ``kind``."""
        bumped = COUNTED[kind]
        return JobCounts(*(getattr(self, c) + (n if c in bumped else 0) for c in COUNTERS))

    def __add__(self, other: JobCounts) -> JobCounts:
        return JobCounts(
            self.processed + other.processed,
            self.failed + other.failed,
            self.retried + other.retried,
            self.dead + other.dead,
        )

    def as_tuple(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in COUNTERS)


COUNTED: dict[str, tuple[str, ...]] = {
    OK: ("processed",),
    RETRY: ("failed", "retried"),
    DEAD: ("failed", "dead"),
    EXPIRED: (),
    CANCELLED: (),
    YIELDED: (),
    SNOOZED: (),
    PAUSED: (),
}
"""Which counters an outcome bumps (also the metric names exporters use)."""
