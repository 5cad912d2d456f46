"""``job.cancel(terminate=True)`` of a job a worker took. The master's side: look up the
tombstones of the jobs its children run, interrupt each cancelled run, kill the child if the
run does not stop. The child's side (:class:`StartCheck`): a job cancelled while it waited
in the child's batch does not start.

A cancelled job is interrupted in two steps: ``CANCEL_SIGNAL``, which raises
:class:`~taskq.errors.JobCancelled` inside the task's code (the task may clean up; in a child
of async jobs, inside that job's coroutine only: the master flags its scoreboard entry
first), then, if the child still runs the same job ``KILL_AFTER_S`` later, SIGKILL (its
other running jobs then go back uncounted). Either way the job ends
as cancelled (the master's recovery of a killed child's job checks the tombstone too): it is
neither retried nor dead-lettered. One pipelined check every ``CHECK_EVERY_S``, and only while
some child is busy: the tombstones of the jobs that keep a record, and one EXISTS per queue
that says whether jobs without one have any (only then are theirs looked at).
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from taskq.broker import Broker, Delivery
from taskq.broker.records import Records
from taskq.broker.replies import as_int
from taskq.errors import BrokerError
from taskq.worker.executor import Prepared
from taskq.worker.finish import cancelled_before_start
from taskq.worker.lifeline import CANCEL_SIGNAL, kill
from taskq.worker.maintenance import Maintenance
from taskq.worker.outage import OutageWaiter
from taskq.worker.outcome import Outcome
from taskq.worker.pausing import PauseGate
from taskq.worker.scoreboard import LOCK_TIMEOUT_S, Scoreboard
from taskq.worker.slotview import Running, SlotView

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 0.25
START_CHECK_HOLDS_S = 0.05
"""A child's read of its batch's tombstones answers for the jobs whose turn comes within
this long; a cancel later than that finds its job started (and interrupted as it runs)."""
MARKS_EVERY_S = 0.25
"""How often a busy child (and a master with busy children) asks whether its queues have
tombstones of jobs that keep no record: a cancel of such a job that found it delivered
already stops it at its next turn after that (or, with terminate, interrupts its run)."""
KILL_AFTER_S = 5.0
KILLED_FOR = "cancelled while running"
"""The cause a child killed for a cancelled job exits with."""


class _Interrupted(NamedTuple):
    pid: int
    task: str
    job_id: str
    kill_at: float


Busy = tuple[int, int, SlotView]
"""(child index, pid, slot view) of a busy child."""


class Canceller:
    """Tombstone checks for one master's children: for every job they run (one per sync
    child, one per coroutine of an async child)."""

    def __init__(self, maintenance: Maintenance, scoreboard: Scoreboard) -> None:
        self.maintenance = maintenance
        self.scoreboard = scoreboard
        self._next_check = 0.0
        self._interrupted: dict[tuple[int, int], _Interrupted] = {}
        """By (child index, job number)."""

    def tick(
        self,
        busy: Iterable[Busy],
        queue_of: Callable[[Running], str],
        mark_killed: Callable[[int, str, frozenset[str]], None],
    ) -> None:
        """``busy``: each busy child; ``mark_killed`` tells the pool why it kills a child,
        and for which jobs (entry ids)."""
        now = time.monotonic()
        busy = list(busy)
        self._kill_stubborn(busy, now, mark_killed)
        if now >= self._next_check:
            self._next_check = now + CHECK_EVERY_S
            self._interrupt(busy, now, queue_of)

    def _kill_stubborn(
        self,
        busy: list[Busy],
        now: float,
        mark_killed: Callable[[int, str, frozenset[str]], None],
    ) -> None:
        """SIGKILL the children still running a job KILL_AFTER_S after its interruption."""
        views = {index: view for index, _, view in busy}
        for key, sent in list(self._interrupted.items()):
            index, seq = key
            view = views.get(index)
            job = view.job(seq) if view is not None else None
            if job is None:  # it stopped (or its child is gone)
                del self._interrupted[key]
                continue
            if now < sent.kill_at:
                continue
            del self._interrupted[key]
            mark_killed(index, KILLED_FOR, frozenset({job.entry_id}))
            if self._signal(index, job, sent.pid, signal.SIGKILL):
                logger.warning("%s[%s] did not stop when cancelled: killed its child",
                               sent.task, sent.job_id)  # fmt: skip
            else:
                mark_killed(index, "", frozenset())

    def _interrupt(self, busy: list[Busy], now: float, queue_of: Callable[[Running], str]) -> None:
        """One pipelined tombstone check for the jobs the children run; interrupt the hits."""
        tracked = [
            (i, pid, job)
            for i, pid, view in busy
            for job in view.running
            if job.job_id and (i, job.seq) not in self._interrupted
        ]
        if not tracked:
            return
        jobs = [(queue_of(job), job.job_id, job.recorded) for _, _, job in tracked]
        found: set[str] = set()

        def look(_: object) -> None:
            records = Records(self.maintenance.broker.link)
            found.update(records.cancel_requested([(q, j) for q, j, rec in jobs if rec]))
            bare = [(q, j) for q, j, rec in jobs if not rec]
            marked = records.any_cancel_marks(sorted({q for q, _ in bare})) if bare else ()
            hit = [(q, j) for q, j in bare if q in marked]  # (no tombstone is the rule)
            found.update(records.cancel_marks(hit, terminate_only=True))

        if not self.maintenance.step(look) or not found:
            return
        for index, pid, job in tracked:
            if job.job_id in found and self._signal(index, job, pid, CANCEL_SIGNAL):
                self._interrupted[(index, job.seq)] = _Interrupted(
                    pid, job.task, job.job_id, now + KILL_AFTER_S
                )
                logger.info("%s[%s] cancelled: interrupting it", job.task, job.job_id)

    def _signal(self, index: int, job: Running, pid: int, sig: int) -> bool:
        """Send ``sig`` to the child if it still runs ``job``, under the slot's lock, so a
        child that has just moved on is not hit for its last job. CANCEL_SIGNAL first flags
        the job's entry: a child of async jobs interrupts that coroutine only."""
        lock = self.scoreboard.lock(index)
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            return False
        try:
            if sig == CANCEL_SIGNAL:
                if not self.scoreboard.request_cancel(index, job.at, job.seq):
                    return False
            elif self.scoreboard.read(index).job(job.seq) is None:
                return False
            kill(pid, sig)
            return True
        finally:
            lock.release()


class StartCheck:
    """A child's look at the tombstones of the jobs it is about to start (those that keep a
    record: only they can be cancelled), so that one cancelled while it waited in the batch
    does not start. A read answers for START_CHECK_HOLDS_S. The fetch counts as one: a job
    had no tombstone when it was delivered (a job cancelled after its delivery is handed
    back, if ever, as cancelled: Finisher.hand_back), so jobs that start within 50 ms of
    their fetch cost nothing. Past that, one pipelined read covers the job and those after
    it in its batch: a batch of short jobs costs one read per 50 ms, not one per job.
    ``outages``: the consumer's outage handling, which the reads go through."""

    def __init__(self, broker: Broker, outages: OutageWaiter) -> None:
        self.broker = broker
        self.outages = outages
        self.pauses = PauseGate(broker, outages)
        """The pauses that also stop a job at its start (set aside: :mod:`.pausing`)."""
        self._read: set[str] = set()
        self._cancelled: set[str] = set()
        self._read_at = -1.0
        self._marked: set[str] = set()
        """The queues with tombstones of jobs without a record, as last read."""
        self._marks_read_at = -math.inf

    def fetched(self, batch: Sequence[Delivery], at_s: float) -> None:
        """A batch was delivered at ``at_s`` (monotonic): none of its jobs was cancelled."""
        self._read = {d.record_id for d in batch if d.record_id is not None}
        self._cancelled, self._read_at = set(), at_s

    def check(self, p: Prepared | Outcome, rest: Sequence[Delivery]) -> Prepared | Outcome:
        """``p``; its CANCELLED outcome if it was cancelled with ``terminate=True`` (a job
        without a record: cancelled at all); its PAUSED outcome if a pause covers it."""
        return self.pauses.check(self._cancel_check(p, rest))

    def _cancel_check(self, p: Prepared | Outcome, rest: Sequence[Delivery]) -> Prepared | Outcome:
        if isinstance(p, Outcome):
            return p
        if p.delivery.record_id is None:
            return self._check_unrecorded(p)
        job_id, now = p.delivery.record_id, time.monotonic()
        if job_id not in self._read or now - self._read_at > START_CHECK_HOLDS_S:
            jobs = [(p.delivery.queue, job_id)]
            jobs += [(d.queue, d.record_id) for d in rest if d.record_id is not None]
            self._cancelled = self._look(jobs)
            self._read, self._read_at = {j for _, j in jobs}, now
        return cancelled_before_start(p) if job_id in self._cancelled else p

    def _check_unrecorded(self, p: Prepared) -> Prepared | Outcome:
        """A job without a record: while its queue has tombstones of such jobs (one EXISTS
        per queue every MARKS_EVERY_S says; none is the rule, and costs nothing more), one
        look at its own."""
        now = time.monotonic()
        if now - self._marks_read_at > MARKS_EVERY_S:
            queues = list(self.broker.keys)
            self._marked = self.outages.call(
                lambda: Records(self.broker.link).any_cancel_marks(queues)
            )
            self._marks_read_at = now
        if p.delivery.queue not in self._marked:
            return p
        job = [(p.delivery.queue, p.msg.id)]
        hit = self.outages.call(
            lambda: Records(self.broker.link).cancel_marks(job, terminate_only=False)
        )
        return cancelled_before_start(p) if hit else p

    def _look(self, jobs: list[tuple[str, str]]) -> set[str]:
        """The cancelled ones of ``jobs``: one multi-key EXISTS per queue (keys of a queue
        share its hash tag), on the consumer's own connection, says whether any is; only
        then is each looked at."""
        by_queue: dict[str, list[str]] = {}
        for queue, job_id in jobs:
            by_queue.setdefault(queue, []).append(self.broker.keys[queue].cancel(job_id))
        direct, call = self.broker.direct, self.outages.call
        replies = call(lambda: direct.pipeline([("EXISTS", *k) for k in by_queue.values()]))
        refused = next((r for r in replies if isinstance(r, BrokerError)), None)
        if refused is not None:  # e.g. an ACL without EXISTS: the jobs run
            logger.warning("cannot read cancellation tombstones: %s", refused)
            return set()
        any_in = {q for q, n in zip(by_queue, replies, strict=True) if as_int(n)}
        hit = [(q, j) for q, j in jobs if q in any_in]
        return call(lambda: Records(self.broker.link).cancel_requested(hit)) if hit else set()
