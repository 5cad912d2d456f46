"""Per-task statistics over the last 72 hours, as the dashboard's Tasks page shows them,
read from the summaries workers write (:mod:`taskq.broker.taskstats`): the table of every
task seen, and one task's runs per minute (last hour) and per hour (last 72 hours)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskq.broker.link import Link
from taskq.broker.taskstats import HOUR_MS, MINUTE_MS, Summary, read
from taskq.ops.throughput import Minute, Throughput

HOURS = 72


@dataclass(frozen=True)
class TaskRow:
    """One task over the last 72 hours.

    Attributes:
        runs: runs that ended (succeeded or raised); failures: runs that raised; retries:
            failures sent round again.
        per_minute: runs per minute over the last hour.
    """

    task: str
    runs: int
    failures: int
    retries: int
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float
    per_minute: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _hour_starts(now_ms: int) -> list[int]:
    first = now_ms - now_ms % HOUR_MS - (HOURS - 1) * HOUR_MS
    return [first + i * HOUR_MS for i in range(HOURS)]


def _minute_starts(now_ms: int, minutes: int = 60) -> list[int]:
    first = now_ms - now_ms % MINUTE_MS - (minutes - 1) * MINUTE_MS
    return [first + i * MINUTE_MS for i in range(minutes)]


def _now_ms(link: Link) -> int:
    seconds, micros = link.call("TIME")
    return int(seconds) * 1000 + int(micros) // 1000


def task_table(link: Link, queues: Sequence[str]) -> tuple[int, list[TaskRow]]:
    """The Redis clock and every task seen in the last 72 hours, by name."""
    now = _now_ms(link)
    _, hours = read(link, queues, "h", _hour_starts(now))
    _, minutes = read(link, queues, "m", _minute_starts(now))
    totals: dict[str, Summary] = {}
    for tasks in hours.values():
        for task, s in tasks.items():
            totals.setdefault(task, Summary()).merge(s)
    last_hour: dict[str, int] = {}
    for tasks in minutes.values():
        for task, s in tasks.items():
            last_hour[task] = last_hour.get(task, 0) + s.runs
    return now, [_row(task, s, last_hour.get(task, 0)) for task, s in sorted(totals.items())]


def _row(task: str, s: Summary, runs_last_hour: int) -> TaskRow:
    p50, p95 = s.percentile_ms(0.5), s.percentile_ms(0.95)
    per_minute = round(runs_last_hour / 60, 3)
    return TaskRow(task, s.runs, s.failures, s.retries, p50, p95, s.max_ms, per_minute)


def task_history(link: Link, queues: Sequence[str], task: str) -> tuple[Throughput, Throughput]:
    """One task's runs per minute over the last hour, and per hour over the last 72 hours
    (succeeded as processed; failed, retried as the chart counts them)."""
    now = _now_ms(link)
    out = []
    for span, starts in (("m", _minute_starts(now)), ("h", _hour_starts(now))):
        _, buckets = read(link, queues, span, starts)
        rows = []
        for start in starts:
            s = buckets.get(start, {}).get(task, Summary())
            dead = s.failures - s.retries
            rows.append(Minute(start, s.runs - s.failures, s.failures, s.retries, dead))
        out.append(Throughput(now, tuple(rows)))
    return out[0], out[1]
