"""Per-minute job counts in Redis (``<queue>:series:<minute ms>``), for the dashboard's charts.

Each worker master writes one hash field per minute bucket, its own id, holding how many of
its jobs succeeded, failed, were retried and were dead-lettered in that minute. The field is
set (HSET), not incremented, so a write repeated after a lost reply counts nothing twice,
and a worker that serves several queues writes the same field under each of them, which the
reader counts once. Buckets expire (:data:`SERIES_TTL_MS`): the series is bounded in time
and, per bucket, by the number of live workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from taskq.broker.link import Link
from taskq.broker.replies import flat_pairs, redis_ms, text
from taskq.broker.resp import Command
from taskq.keys import QueueKeys

MINUTE_MS = 60_000
SERIES_TTL_MS = 2 * 3_600_000
"""How long a bucket lives: the dashboard shows the last hour; the rest is slack."""

Counts = tuple[int, ...]
"""A worker's (processed, failed, retried, dead) in one minute."""


def minute_of(ms: int) -> int:
    """The start of the minute ``ms`` falls in."""
    return ms - ms % MINUTE_MS


class Series:
    """The per-minute buckets of a set of queues on one Redis server."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def link_ms(self) -> int:
        """The Redis clock (ms)."""
        return redis_ms(self.link.call("TIME"))

    def write(self, queues: Sequence[str], worker_id: str, minute_ms: int, counts: Counts) -> int:
        """Set this worker's counts of one minute under each queue; returns the Redis clock
        (ms), which the writer uses to pick its next bucket."""
        value = " ".join(str(n) for n in counts)
        commands: list[Command] = [("TIME",)]
        for q in queues:
            key = QueueKeys(q).series(minute_ms)
            commands += [("HSET", key, worker_id, value), ("PEXPIRE", key, SERIES_TTL_MS)]
        return redis_ms(self.link.pipeline(commands)[0])

    def read(self, queues: Sequence[str], *, minutes: int) -> tuple[int, dict[int, Counts]]:
        """The Redis clock and, for each of the last ``minutes`` minutes (the current one
        included) that has counts, the sum over the workers of ``queues``.

        Two round trips (the clock, then one HGETALL per queue and minute), whatever the
        number of jobs.
        """
        now = self.link_ms()
        first = minute_of(now) - (minutes - 1) * MINUTE_MS
        starts = [first + i * MINUTE_MS for i in range(minutes)]
        commands: list[Command] = [
            ("HGETALL", QueueKeys(q).series(m)) for q in queues for m in starts
        ]
        per_minute: dict[int, dict[str, Counts]] = {}
        for i, reply in enumerate(self.link.pipeline(commands) if commands else []):
            workers = per_minute.setdefault(starts[i % minutes], {})
            for worker, raw in flat_pairs(reply).items():
                workers[text(worker)] = _counts(text(raw))  # one worker, several queues: once
        out = {m: _sum(w.values()) for m, w in sorted(per_minute.items()) if w}
        return now, out


def _counts(raw: str) -> Counts:
    parts = raw.split()
    return tuple(int(p) if p.isdigit() else 0 for p in parts)


def _sum(rows: Iterable[Counts]) -> Counts:
    total = [0, 0, 0, 0]
    for row in rows:
        for i, n in enumerate(row[:4]):
            total[i] += n
    return tuple(total)
