"""The master's side of ``job.cancel(terminate=True)``: look up the tombstones of the jobs its
children run, interrupt each cancelled run, kill the child if the run does not stop.

A cancelled job is interrupted in two steps: ``CANCEL_SIGNAL``, which raises
:class:`~taskq.errors.JobCancelled` inside the task's code (the task may clean up), then,
if the child still runs the same job ``KILL_AFTER_S`` later, SIGKILL. Either way the job ends
as cancelled (the master's recovery of a killed child's job checks the tombstone too): it is
neither retried nor dead-lettered. One pipelined check every ``CHECK_EVERY_S``, and only while
some child is busy with a job that keeps a record.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from taskq.broker.records import Records
from taskq.worker.lifeline import CANCEL_SIGNAL, kill
from taskq.worker.maintenance import Maintenance
from taskq.worker.scoreboard import LOCK_TIMEOUT_S, Scoreboard, SlotView

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 0.25
KILL_AFTER_S = 5.0
KILLED_FOR = "cancelled while running"
"""The cause a child killed for a cancelled job exits with."""


@dataclass
class _Interrupted:
    seq: int
    kill_at: float


class Canceller:
    """Tombstone checks for one master's children."""

    def __init__(self, maintenance: Maintenance, scoreboard: Scoreboard) -> None:
        self.maintenance = maintenance
        self.scoreboard = scoreboard
        self._next_check = 0.0
        self._interrupted: dict[int, _Interrupted] = {}

    def tick(
        self,
        busy: Iterable[tuple[int, int, SlotView]],
        queue_of: Callable[[SlotView], str],
        mark_killed: Callable[[int, str], None],
    ) -> None:
        """``busy``: (child index, pid, slot view) of each busy child; ``mark_killed`` tells
        the pool why it kills a child."""
        now = time.monotonic()
        busy = list(busy)
        self._kill_stubborn(busy, now, mark_killed)
        if now >= self._next_check:
            self._next_check = now + CHECK_EVERY_S
            self._interrupt(busy, now, queue_of)

    def _kill_stubborn(
        self,
        busy: list[tuple[int, int, SlotView]],
        now: float,
        mark_killed: Callable[[int, str], None],
    ) -> None:
        """SIGKILL the children still running a job KILL_AFTER_S after its interruption."""
        for index, pid, view in busy:
            sent = self._interrupted.get(index)
            if sent is None or (sent.seq == view.seq and now < sent.kill_at):
                continue
            del self._interrupted[index]
            if sent.seq != view.seq:
                continue  # it stopped, and runs another job now
            mark_killed(index, KILLED_FOR)
            if self._signal(index, sent.seq, pid, signal.SIGKILL):
                logger.warning("%s[%s] did not stop when cancelled: killed its child",
                               view.task, view.job_id)  # fmt: skip
            else:
                mark_killed(index, "")

    def _interrupt(
        self, busy: list[tuple[int, int, SlotView]], now: float, queue_of: Callable[[SlotView], str]
    ) -> None:
        """One pipelined tombstone check for the busy children's jobs; interrupt the hits."""
        tracked = [(i, pid, v) for i, pid, v in busy if v.job_id and i not in self._interrupted]
        if not tracked:
            return
        jobs = [(queue_of(v), v.job_id) for _, _, v in tracked]
        found: set[str] = set()

        def look(_: object) -> None:
            found.update(Records(self.maintenance.broker.link).cancel_requested(jobs))

        if not self.maintenance.step(look) or not found:
            return
        for index, pid, view in tracked:
            if view.job_id in found and self._signal(index, view.seq, pid, CANCEL_SIGNAL):
                self._interrupted[index] = _Interrupted(view.seq, now + KILL_AFTER_S)
                logger.info("%s[%s] cancelled: interrupting it", view.task, view.job_id)

    def _signal(self, index: int, seq: int, pid: int, sig: int) -> bool:
        """Send ``sig`` to the child if it still runs job number ``seq``, under the slot's
        lock, so a child that has just moved on is not hit for its last job."""
        lock = self.scoreboard.lock(index)
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            return False
        try:
            again = self.scoreboard.read(index)
            if not (again.busy and again.seq == seq):
                return False
            kill(pid, sig)
            return True
        finally:
            lock.release()
