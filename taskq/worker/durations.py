"""How long a worker's jobs take, measured by its master without any per-job work: the
input the autoscaling signal (:mod:`taskq.worker.scaling`) divides waiting jobs by.

The master already reads every child's slot at each tick (:mod:`taskq.worker.pool`). It adds
the tick's length times the number of jobs running to a busy time, and at each heartbeat
records the busy time of the jobs that finished and how many finished. Over a window of some
minutes, the one divided by the other is the mean time a job ran (sampling at the tick rate:
close once a few dozen jobs finished). The heartbeat record carries the window's two sums.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

WINDOW_S = 300.0
"""The minutes of history the mean covers."""


class Recent(NamedTuple):
    """Jobs finished and the time jobs ran (ms, all children summed) over the window."""

    jobs: int = 0
    busy_ms: int = 0


class DurationMeter:
    """Busy time sampled at each tick; sums over the window at each heartbeat."""

    def __init__(self, *, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._busy_s = 0.0
        self._last = clock()
        self._running = 0
        self._marks: deque[tuple[float, float, int]] = deque()

    def sample(self, running_jobs: int) -> None:
        """``running_jobs`` run now: count the jobs of the last sample as running since it,
        and these from now on (a job is counted from the first sample that sees it to the
        first that does not: half a tick late at both ends, so a finished job's time is
        right on average, and a first sample after a long start-up adds nothing)."""
        now = self._clock()
        self._busy_s += (now - self._last) * self._running
        self._last, self._running = now, running_jobs

    def recent(self, finished: int, in_flight_s: float = 0.0) -> Recent:
        """The window's sums, given the jobs finished since the worker started and how long
        the running ones have run (their time is not a finished job's: left out until they
        end, so a window that ends with jobs running is not biased upwards)."""
        now = self._clock()
        self._marks.append((now, self._busy_s - in_flight_s, finished))
        while len(self._marks) > 1 and now - self._marks[1][0] >= self.window_s:
            self._marks.popleft()
        _, busy_then, finished_then = self._marks[0]
        busy_ms = round((self._marks[-1][1] - busy_then) * 1000)
        return Recent(max(0, finished - finished_then), max(0, busy_ms))
