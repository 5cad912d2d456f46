"""The last hour of job counts, per minute, as the dashboard charts them (read from the
buckets worker masters write: :mod:`taskq.broker.series`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taskq.broker.series import MINUTE_MS, Series, minute_of


@dataclass(frozen=True)
class Minute:
    """One minute of the fleet's jobs (workers serving the queues shown).

    Attributes:
        start_ms: the minute's start (Redis clock).
        processed: jobs that succeeded; failed: runs that failed (retried or dead-lettered).
    """

    start_ms: int
    processed: int
    failed: int
    retried: int
    dead: int

    @property
    def failure_rate(self) -> float | None:
        """Failed runs among all runs that ended in the minute (None: no run ended)."""
        runs = self.processed + self.failed
        return self.failed / runs if runs else None


@dataclass(frozen=True)
class Throughput:
    """``minutes`` consecutive minutes, oldest first; the last is the current, partial one."""

    now_ms: int
    minutes: tuple[Minute, ...]

    @property
    def processed(self) -> int:
        return sum(m.processed for m in self.minutes)

    @property
    def failed(self) -> int:
        return sum(m.failed for m in self.minutes)


def last_hour(series: Series, queues: Sequence[str], *, minutes: int = 60) -> Throughput:
    """The last ``minutes`` minutes of ``queues`` (minutes without jobs count zero)."""
    now, counts = series.read(queues, minutes=minutes)
    first = minute_of(now) - (minutes - 1) * MINUTE_MS
    rows = []
    for i in range(minutes):
        start = first + i * MINUTE_MS
        p, f, r, d = counts.get(start, (0, 0, 0, 0))
        rows.append(Minute(start, p, f, r, d))
    return Throughput(now, tuple(rows))
