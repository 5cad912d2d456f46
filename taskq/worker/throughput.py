"""The master's side of the per-minute series (:mod:`taskq.broker.series`): its job counts
since the start of each minute, written with every heartbeat (never per job).

A bucket holds the counts between the last heartbeat of the minute before and the last one of
its own minute, so every job lands in exactly one bucket. The minute is taken on the Redis
clock (its offset to the local clock is refreshed by every write), so workers whose clocks
disagree still fill the same buckets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from taskq.broker.series import Series, minute_of
from taskq.worker.outcome import JobCounts


class ThroughputWriter:
    """One worker's buckets on the queues it serves."""

    def __init__(self, queues: Sequence[str], worker_id: str) -> None:
        self.queues = tuple(queues)
        self.worker_id = worker_id
        self._offset_ms: int | None = None
        self._minute: int | None = None
        self._base = JobCounts()
        self._last = JobCounts()

    def write(self, series: Series, totals: JobCounts) -> None:
        """Write this minute's counts (``totals`` are since the worker started); nothing is
        written in a minute without jobs."""
        if self._offset_ms is None:
            self._offset_ms = series.link_ms() - _local_ms()
        minute = minute_of(_local_ms() + self._offset_ms)
        if minute != self._minute:
            if self._minute is not None:
                self._base = self._last
            self._minute = minute
        self._last = totals
        counts = tuple(a - b for a, b in zip(totals.as_tuple(), self._base.as_tuple(), strict=True))
        if any(counts):
            now = series.write(self.queues, self.worker_id, minute, counts)
            self._offset_ms = now - _local_ms()


def _local_ms() -> int:
    return time.time_ns() // 1_000_000
