"""Jobs a worker's master takes back from its children: every entry left pending under a
child that exited (the job it ran counts as a failed attempt, the rest go back uncounted),
and the jobs that waited in a child's batch behind a long one (adaptive prefetch).

Each piece of work is kept until Redis has taken it: a Redis outage or a bug delays it, one
exited child at a time with a backoff of its own, and never holds up the others.
"""

from __future__ import annotations

import functools
import logging
import time

from taskq.broker import Broker
from taskq.retry import capped_exponential
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from taskq.worker.maintenance import Maintenance
from taskq.worker.outcome import JobCounts
from taskq.worker.pausing import run_time_limits
from taskq.worker.slotview import SlotView

logger = logging.getLogger(__name__)


class Backoff:
    """0.5 s after the first failure, doubling, up to 30 s (respawns and settling)."""

    def __init__(self) -> None:
        self.failures = 0
        self.not_before = 0.0

    def failed(self) -> None:
        self.failures += 1
        delay_s = capped_exponential(0.5, 2.0, 30.0, self.failures - 1)
        self.not_before = time.monotonic() + delay_s


class _Exited:
    """A child that exited, whose pending entries are still to settle."""

    def __init__(self, consumer: str, view: SlotView, cause: str, culprits: frozenset[str]) -> None:
        self.consumer, self.view, self.cause = consumer, view, cause
        self.culprits = culprits
        """Entry ids of the jobs the child was killed for (empty: every running job counts)."""
        self.backoff = Backoff()


class Reclaimer:
    """The master's list of jobs to take back, worked through on every tick."""

    def __init__(self, maintenance: Maintenance, executor: Executor) -> None:
        self.maintenance = maintenance
        self.executor = executor
        self._exited: list[_Exited] = []
        self._revoked: list[tuple[str, list[tuple[int, str]]]] = []
        self._failed_cold = False
        """A step failed once the shutdown was cold: it is not waited for again."""

    def holds_shutdown(self, cold: bool) -> bool:
        """Work is left that a shutdown waits for: all of it until the shutdown goes cold
        (its grace period ran out, or a second signal came), then only while Redis answers
        and no step has failed since. Settling needs Redis, and a worker must stop without
        it, or with a bug in a step that retrying will not fix: what is left stays pending
        under the exited children, and any worker's sweep recovers it after the visibility
        timeout."""
        if not (self._exited or self._revoked):
            return False
        if cold and not self.maintenance.redis_reachable():
            logger.warning("Redis unreachable: the exited children's jobs are left to the sweep")
            return False
        if cold and self._failed_cold:
            logger.warning("settling failed: the exited children's jobs are left to the sweep")
            return False
        return True

    def child_exited(
        self, consumer: str, view: SlotView, cause: str, culprits: frozenset[str] = frozenset()
    ) -> None:
        """A child exited: settle its pending entries. The jobs it ran count as a failed
        attempt, but only ``culprits`` (entry ids) when it was killed for some of them (a
        hard time limit, a cancelled job): the others running beside them go back uncounted."""
        self._exited.append(_Exited(consumer, view, cause, culprits))

    def revoked(self, consumer: str, rest: list[tuple[int, str]]) -> None:
        """Jobs (stream index, entry id) taken from a child's batch: hand them back."""
        self._revoked.append((consumer, rest))

    def tick(self, *, cold: bool) -> JobCounts:
        """Do what Redis takes now; returns the failures recorded for children that exited
        (a job running when its child died, unless a cold shutdown killed it)."""
        counts = JobCounts()
        left_exited = []
        now = time.monotonic()
        for exited in self._exited:
            settled: list[str] = []
            step = functools.partial(self._settle, exited=exited, cold=cold, kinds=settled)
            if now < exited.backoff.not_before:
                left_exited.append(exited)
            elif self.maintenance.step(step):
                for kind in settled:
                    counts = counts.counted(kind)
            else:
                exited.backoff.failed()
                left_exited.append(exited)
                self._failed_cold |= cold
        self._exited = left_exited
        left_revoked = []
        for consumer, rest in self._revoked:
            step = functools.partial(self._hand_back, consumer=consumer, rest=rest)
            if not self.maintenance.step(step):
                left_revoked.append((consumer, rest))
                self._failed_cold |= cold
        self._revoked = left_revoked
        return counts

    def _settle(self, broker: Broker, *, exited: _Exited, cold: bool, kinds: list[str]) -> None:
        running: set[tuple[str, str]] = set()
        if not cold:  # a cold shutdown's kill is not the jobs' fault
            streams = broker.streams
            for job in exited.view.running:
                if exited.culprits and job.entry_id not in exited.culprits:
                    continue
                if 0 <= job.stream_index < len(streams):
                    running.add((streams[job.stream_index], job.entry_id))
        finisher = Finisher(broker, self.executor)
        finisher.limits = run_time_limits(broker)  # a slot it held is freed under them
        kinds += finisher.recover_exited(exited.consumer, running, exited.cause)

    def _hand_back(self, broker: Broker, *, consumer: str, rest: list[tuple[int, str]]) -> None:
        finisher = Finisher(broker, self.executor)
        for d in broker.deliveries_at(rest):
            finisher.hand_back(d, owner=consumer)
