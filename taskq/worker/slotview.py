"""What the master reads of one child's scoreboard slot (:mod:`taskq.worker.scoreboard`):
the jobs it runs and its counters, as values the rest of the master passes around."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from taskq.worker.outcome import JobCounts


class Running(NamedTuple):
    """One job a child runs (one coroutine of an async child), as its slot entry holds it:
    the master's only shape of a running job, which the heartbeat record converts from
    (:meth:`taskq.worker.record.ChildRecord.of`).

    Attributes:
        at: the entry's index in the slot.
        seq: the slot's job number when it started; tells one job from the next.
        started: wall-clock start (s), for display.
        started_mono: monotonic start (s), for durations and limits.
        stream_index: index of the job's stream in the worker's stream list.
        hard_deadline: monotonic time (s) past which the master kills the child; 0: none.
        cancel: the master asked the child to interrupt it (``cancel(terminate=True)``).
        recorded: the job keeps a status record (it can be cancelled).
    """

    at: int
    seq: int
    started: float
    started_mono: float
    stream_index: int
    hard_deadline: float
    entry_id: str
    task: str
    job_id: str
    cancel: bool = False
    recorded: bool = True

    def stream(self, streams: Sequence[str]) -> str:
        """The job's stream, from the worker's stream list (``?`` if the index is off it)."""
        return streams[self.stream_index] if 0 <= self.stream_index < len(streams) else "?"


class SlotView(NamedTuple):
    """A snapshot of one child's slot: its counters, its batch, and the jobs it runs.

    Attributes:
        batch_no, batch_len, batch_next: the listed batch, and the index of its next job.
        revoked: the rest of the batch was handed back (by the master, or the child).
        running: every job the child runs now, in the order they started.
    """

    pid: int
    processed: int
    failed: int
    retried: int
    dead: int
    batch_no: int = 0
    batch_len: int = 0
    batch_next: int = 0
    revoked: bool = False
    running: tuple[Running, ...] = ()

    @property
    def busy(self) -> bool:
        return bool(self.running)

    @property
    def oldest(self) -> Running | None:
        """The job the child has run longest (what the heartbeat record names), if any."""
        return self.running[0] if self.running else None

    @property
    def counts(self) -> JobCounts:
        return JobCounts(self.processed, self.failed, self.retried, self.dead)

    @property
    def waiting_in_batch(self) -> int:
        """Jobs of the listed batch not started yet (and not handed back)."""
        return 0 if self.revoked else max(0, self.batch_len - self.batch_next)

    def job(self, seq: int) -> Running | None:
        """The running job number ``seq``, if the child still runs it."""
        return next((j for j in self.running if j.seq == seq), None)
