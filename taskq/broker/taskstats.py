"""Per-task run summaries (``<queue>:taskstats:m|h:<start ms>``) for the dashboard's Tasks
page: runs, failures, retries and a duration histogram per task, per minute (kept 62 minutes) and
per hour (kept 73 h).

Workers merge what their children ran into the buckets at most once per second
(``taskstats.lua``), never per job. Durations go in logarithmic buckets 10 % wide, so a
percentile read from the merged histogram (a bucket's middle) is within 5 % of the exact
one, and a summary stays a few hundred bytes however many jobs it counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgpack

from taskq.broker.link import Link
from taskq.broker.replies import flat_pairs, redis_ms, text
from taskq.broker.resp import Command
from taskq.keys import QueueKeys

MINUTE_MS, HOUR_MS = 60_000, 3_600_000
MINUTE_TTL_MS = 62 * MINUTE_MS
HOUR_TTL_MS = 73 * HOUR_MS
RATIO = 1.1
"""Each duration bucket's upper bound is this times its lower one."""
FLOOR_MS = 0.01
"""Durations below this (10 µs) share bucket 0."""


def bucket_of(duration_ms: float) -> int:
    """The histogram bucket of a duration."""
    if duration_ms <= FLOOR_MS:
        return 0
    return 1 + int(math.log(duration_ms / FLOOR_MS, RATIO))


def bucket_ms(index: int) -> float:
    """The middle (geometric) of a bucket, the duration it stands for."""
    if index == 0:
        return FLOOR_MS
    return float(FLOOR_MS * RATIO ** (index - 0.5))


class Summary:
    """Runs of one task: how many ended, failed (raised) and were retried, their longest
    duration, and their durations' histogram (bucket index -> runs). A plain class: a worker
    defines it at its start, where a dataclass costs about 2M instructions to define."""

    __slots__ = ("buckets", "failures", "max_ms", "retries", "runs")

    def __init__(
        self,
        runs: int = 0,
        failures: int = 0,
        retries: int = 0,
        max_ms: float = 0.0,
        buckets: dict[int, int] | None = None,
    ):
        self.runs, self.failures, self.retries, self.max_ms = runs, failures, retries, max_ms
        self.buckets: dict[int, int] = {} if buckets is None else buckets

    def add(self, duration_ms: float, *, failed: bool, retried: bool) -> None:
        self.runs += 1
        self.failures += failed
        self.retries += retried
        self.max_ms = max(self.max_ms, duration_ms)
        b = bucket_of(duration_ms)
        self.buckets[b] = self.buckets.get(b, 0) + 1

    def merge(self, other: Summary) -> None:
        self.runs += other.runs
        self.failures += other.failures
        self.retries += other.retries
        self.max_ms = max(self.max_ms, other.max_ms)
        for b, n in other.buckets.items():
            self.buckets[b] = self.buckets.get(b, 0) + n

    def percentile_ms(self, q: float) -> float | None:
        """The ``q`` quantile (0-1) of the durations, from the histogram (None: no run)."""
        total = sum(self.buckets.values())
        if not total:
            return None
        rank = q * total
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                return min(bucket_ms(b), self.max_ms) if self.max_ms else bucket_ms(b)
        return self.max_ms

    def pack(self) -> bytes:
        data = [self.runs, self.failures, self.retries, round(self.max_ms, 3), self.buckets]
        return bytes(msgpack.packb(data))

    @classmethod
    def unpack(cls, raw: bytes) -> Summary | None:
        """A stored summary, or None for anything else (it is untrusted)."""
        try:
            runs, failures, retries, max_ms, buckets = msgpack.unpackb(raw, strict_map_key=False)
            if isinstance(buckets, list):  # Lua packs a table keyed 1..n as an array
                buckets = {i + 1: n for i, n in enumerate(buckets)}
            counts = {int(b): int(n) for b, n in dict(buckets).items()}
            return cls(int(runs), int(failures), int(retries), float(max_ms), counts)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None


def write(link: Link, queues: Sequence[str], now_ms: int, summaries: Mapping[str, Summary]) -> None:
    """Merge ``summaries`` (task -> runs since the last write) into the buckets of ``now_ms``
    of each queue: one script call per queue."""
    args: list[str | bytes | int] = [MINUTE_TTL_MS, HOUR_TTL_MS]
    for task, s in summaries.items():
        args += [task, s.pack()]
    for q in queues:
        k = QueueKeys(q)
        minute, hour = now_ms - now_ms % MINUTE_MS, now_ms - now_ms % HOUR_MS
        link.script("taskstats", [k.task_stats("m", minute), k.task_stats("h", hour)], args)


def read(
    link: Link, queues: Sequence[str], span: str, starts: Iterable[int]
) -> tuple[int, dict[int, dict[str, Summary]]]:
    """The Redis clock and, per bucket start, per task, the summary over ``queues``."""
    starts = list(starts)
    commands: list[Command] = [("TIME",)]
    commands += [("HGETALL", QueueKeys(q).task_stats(span, m)) for q in queues for m in starts]
    now, *replies = link.pipeline(commands)
    out: dict[int, dict[str, Summary]] = {}
    for i, reply in enumerate(replies):
        tasks = out.setdefault(starts[i % len(starts)], {})
        for task, raw in flat_pairs(reply).items():
            found = Summary.unpack(raw)
            if found is not None:
                tasks.setdefault(text(task), Summary()).merge(found)
    return redis_ms(now), out
