"""``taskq worker --autoscale MAX,MIN``: how many children the master keeps, from the
queues' autoscaling signal (:mod:`taskq.worker.scaling`).

Every :data:`CHECK_S` the master reads the signal of its queues (one :class:`Scaler`, so
at most one read per queue a second) and takes as its share what the queues want less
what the other live workers already run. It grows at once towards that share (jobs would
otherwise wait longer than ``target_time_to_start_s``), and shrinks only once the share has
stayed below its size for ``autoscale_idle_s``, so a short lull does not recycle children.
A child that leaves is stopped warm: the master hands back its fetched jobs at once and it
finishes the one it runs (:class:`taskq.worker.pool.Pool`).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from taskq.broker import Broker
from taskq.broker.reads import Reader
from taskq.config import Settings
from taskq.worker.lifeline import kill
from taskq.worker.scaling import Scaler, ScaleSignal

logger = logging.getLogger(__name__)

CHECK_S = 1.0


class Child(Protocol):
    """What the autoscaler needs of the pool's record of a child."""

    index: int
    pid: int
    leaving: bool


def share_of(signals: Sequence[ScaleSignal], own_processes: int) -> int:
    """The processes this worker should run: what its queues want, less the processes of
    the other live workers (the signal counts this worker's too, as of its last heartbeat)."""
    share = 0
    for s in signals:
        others = max(0, s.processes - own_processes)
        share += max(0, s.desired_processes - others)
    return share


@dataclass
class Autoscaler:
    """The pool's size between ``low`` and ``high``, from the signal."""

    scaler: Scaler
    low: int
    high: int
    idle_s: float
    clock: Callable[[], float] = time.monotonic
    size: int = 0
    _below_since: float | None = None
    _next_check: float = 0.0

    def __post_init__(self) -> None:
        self.size = self.size or self.low

    @classmethod
    def of(cls, broker: Broker, settings: Settings, low: int, high: int) -> Autoscaler:
        """The autoscaler of a pool whose master reads through ``broker`` (its queues are
        those the worker records carry: a partitioned queue's partitions)."""
        scaler = Scaler(Reader(broker.link), broker.queues, settings)
        return cls(scaler, low=low, high=high, idle_s=settings.autoscale_idle_s)

    def tick(
        self, step: Callable[[Callable[[Any], object]], object], children: Sequence[Child]
    ) -> int:
        """When due, read the signal in ``step`` (the master's guarded Redis step); stop the
        children past the size warm, once each. Returns the size."""
        if self.due():
            step(lambda _: self.check(len(children)))
        for child in children:
            if child.index >= self.size and not child.leaving:
                child.leaving = True
                kill(child.pid, signal.SIGTERM)
        return self.size

    def due(self) -> bool:
        """Whether a check is due (at most one every :data:`CHECK_S`)."""
        now = self.clock()
        if now < self._next_check:
            return False
        self._next_check = now + CHECK_S
        return True

    def check(self, own_processes: int) -> int:
        """Read the signal and return the size to run now."""
        size = self.size
        self.decide(share_of(self.scaler.signals(), own_processes))
        if self.size != size:
            logger.info("autoscale: %d -> %d children", size, self.size)
        return self.size

    def decide(self, share: int) -> int:
        """Grow at once to ``share`` (at most ``high``); shrink to it (at least ``low``)
        once it has stayed below the size for ``idle_s``."""
        now = self.clock()
        if share > self.size:
            self.size = min(self.high, share)
            self._below_since = None
        elif share < self.size and self.size > self.low:
            if self._below_since is None:
                self._below_since = now
            elif now - self._below_since >= self.idle_s:
                self.size = max(self.low, share)
                self._below_since = None
        else:
            self._below_since = None
        return self.size
