"""Periodic jobs: what a schedule enqueues, and which of its ticks are due.

A :class:`Periodic` is declared with ``@app.periodic(...)`` or ``app.add_periodic(...)``.
Every worker master that serves its queue runs it (taskq/worker/ticker.py): the master whose
claim script first moves the schedule's last tick forward enqueues the job, in that script, so
exactly one job is enqueued per tick however many workers run. No Redis here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from taskq.cron import Cron, Every, Schedule, ticks_between
from taskq.errors import ConfigError, EnqueueError
from taskq.message import Message

if TYPE_CHECKING:
    from taskq.task import Task

CatchUp = Literal["one", "none", "all"]
CATCH_UP_MODES: tuple[str, ...] = ("one", "none", "all")

MAX_CATCH_UP = 100
"""``catch_up="all"`` enqueues at most this many missed ticks (the latest ones)."""
ON_TIME_MS = 10_000
"""``catch_up="none"``: a tick this recent is on time (enqueued); an older one was missed
while no worker ran (skipped)."""


@dataclass(frozen=True)
class Periodic:
    """One schedule: run ``task`` with these arguments at every tick of ``schedule``."""

    name: str
    task: Task[..., Any]
    schedule: Schedule
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: str | None = None
    catch_up: CatchUp = "one"

    @property
    def key(self) -> str:
        """What the schedule is, stored with its last tick: a changed definition starts over."""
        return self.schedule.key

    def message(self, tick_ms: int) -> Message:
        """The job of one tick (it knows its tick: ``current_job().scheduled_ms``)."""
        msg = self.task.message(
            self.args, dict(self.kwargs), priority=self.priority, queue=self.queue
        )
        return msg._replace(tick_ms=tick_ms)

    def due(self, last_ms: int, now_ms: int) -> tuple[list[int], int]:
        """The ticks to enqueue now, given the last one enqueued, and the new last tick.

        By the catch-up mode: the latest due tick (``one``: one job for every tick missed),
        that tick only if it is on time (``none``), or every due tick up to
        :data:`MAX_CATCH_UP`, the latest ones (``all``).
        """
        wanted = MAX_CATCH_UP if self.catch_up == "all" else 1
        ticks = recent_ticks(self.schedule, last_ms, now_ms, wanted)
        if not ticks:
            return [], last_ms
        if self.catch_up == "none" and now_ms - ticks[-1] > ON_TIME_MS:
            return [], ticks[-1]
        return ticks, ticks[-1]


def schedule_of_key(key: str) -> Schedule | None:
    """The schedule a stored definition (``Schedule.key``) names, or None if it names none:
    a master ticks a newer definition registered by another deploy as stored."""
    kind, _, rest = key.partition(":")
    try:
        if kind == "every" and rest.isascii() and rest.isdigit():
            return Every(int(rest))
        expr, sep, tz = rest.rpartition(":")
        if kind == "cron" and sep:
            return Cron.parse(expr, tz)
    except ConfigError:
        pass
    return None


def recent_ticks(schedule: Schedule, after_ms: int, until_ms: int, n: int) -> list[int]:
    """The latest ``n`` ticks in ``(after_ms, until_ms]``, oldest first.

    Looks back over a growing window (an hour, a day, ...) rather than walking every tick
    since ``after_ms``: after a year without workers, a per-minute schedule has half a million.
    """
    span_ms = 3_600_000
    while True:
        start = max(after_ms, until_ms - span_ms)
        ticks = ticks_between(schedule, start, until_ms, 1_000_000)
        if len(ticks) >= n or start == after_ms:
            return ticks[-n:]
        span_ms *= 24


class PeriodicArgs(TypedDict, total=False):
    """The keyword options of ``@app.periodic(...)`` and ``app.add_periodic(task, ...)``."""

    every: float | timedelta
    cron: str
    tz: str
    args: Sequence[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: str
    catch_up: str
    name: str


def periodic_of(task: Task[..., Any], options: Mapping[str, Any]) -> Periodic:
    """Check a declaration (:class:`PeriodicArgs`) and build its :class:`Periodic`.

    Raises:
        ConfigError: an unknown option, neither or both of ``every`` and ``cron``, a bad
            cron, an unknown zone, a bad catch-up mode, or arguments that cannot be sent.
    """
    unknown = set(options) - set(PeriodicArgs.__annotations__)
    if unknown:
        raise ConfigError(f"periodic {task.name}: unknown option(s) {', '.join(sorted(unknown))}")
    every, cron, tz = options.get("every"), options.get("cron"), options.get("tz", "UTC")
    catch_up, name = options.get("catch_up", "one"), options.get("name")
    if (every is None) == (cron is None):
        raise ConfigError(f"periodic {task.name}: give every= or cron=, exactly one")
    if catch_up not in CATCH_UP_MODES:
        modes = ", ".join(CATCH_UP_MODES)
        raise ConfigError(
            f"periodic {task.name}: catch_up must be one of {modes}, not {catch_up!r}"
        )
    schedule: Schedule = Cron.parse(cron, tz) if cron is not None else Every.of(every or 0)
    if cron is None and tz != "UTC":
        raise ConfigError(f"periodic {task.name}: tz= goes with cron=; every= counts in UTC")
    periodic = Periodic(
        name or task.name,
        task,
        schedule,
        tuple(options.get("args", ())),
        dict(options.get("kwargs") or {}),
        options.get("queue"),
        options.get("priority"),
        cast(CatchUp, catch_up),
    )
    try:
        periodic.message(0).encode()  # bad arguments fail here, at declaration
    except EnqueueError as exc:
        raise ConfigError(f"periodic {periodic.name}: {exc}") from None
    return periodic
