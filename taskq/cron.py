"""Schedules of periodic jobs: cron expressions and fixed intervals, in a time zone.

Every time here is an integer count of milliseconds since the Unix epoch (UTC).

``Every`` ticks at the multiples of its interval since the epoch, with no regard for zones.
``Cron`` reads a five-field expression in the wall time of an IANA zone. Across daylight
saving changes:

* a wall time that does not exist (the clocks jump over it) fires once, at the instant the
  jump ends; several such times in one jump share that single tick;
* a wall time that happens twice (the clocks go back) fires once, at its first occurrence.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import NamedTuple, Protocol
from zoneinfo import ZoneInfo

from taskq.errors import ConfigError

SEARCH_YEARS = 30
"""``Cron.next_after`` gives up when no tick falls within this many years."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)


class Schedule(Protocol):
    """When a periodic job is due."""

    def next_after(self, after_ms: int) -> int:
        """The first tick strictly after ``after_ms``."""
        ...

    def describe(self) -> str:
        """A short human text, e.g. ``every 30s`` or ``cron "*/5 * * * *" Europe/Paris``."""
        ...

    @property
    def key(self) -> str:
        """Stable text naming the schedule's definition: it changes when the schedule does."""
        ...


def ticks_between(schedule: Schedule, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The ticks ``t`` with ``after_ms < t <= until_ms``, oldest first: the first ``limit``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"ticks_between: limit={limit!r} must be an int >= 0")
    ticks: list[int] = []
    tick = after_ms
    while len(ticks) < limit:
        tick = schedule.next_after(tick)
        if tick > until_ms:
            break
        ticks.append(tick)
    return ticks


# --- fixed intervals ----------------------------------------------------------------------

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000))


@dataclass(frozen=True)
class Every:
    """A fixed interval, aligned to the epoch: ticks at the multiples of ``interval_ms``."""

    interval_ms: int

    def __post_init__(self) -> None:
        ms = self.interval_ms
        if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
            raise ConfigError(f"Every(interval_ms={ms!r}): the interval must be an int >= 1 ms")

    @classmethod
    def of(cls, every: float | int | timedelta) -> Every:
        """An interval of ``every`` seconds (int or float) or a ``timedelta``, rounded to ms."""
        if isinstance(every, timedelta):
            ms = every / _MS
        elif isinstance(every, bool) or not isinstance(every, int | float):
            raise ConfigError(f"every={every!r}: expected seconds (int or float) or a timedelta")
        elif not math.isfinite(every):
            raise ConfigError(f"every={every!r}: the interval must be a finite number of seconds")
        else:
            ms = every * 1000
        if ms < 1:
            raise ConfigError(f"every={every!r}: the interval must be at least 1 ms")
        return cls(every * 1000 if isinstance(every, int) else round(ms))

    def next_after(self, after_ms: int) -> int:
        return (after_ms // self.interval_ms + 1) * self.interval_ms

    def describe(self) -> str:
        for unit, size in _UNITS:
            if self.interval_ms % size == 0:
                return f"every {self.interval_ms // size}{unit}"
        return f"every {self.interval_ms}ms"

    @property
    def key(self) -> str:
        return f"every:{self.interval_ms}"


# --- cron expressions ---------------------------------------------------------------------

_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {name: number for number, name in enumerate(_MONTH_NAMES, 1)}
_WEEKDAYS = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February at its longest

_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class _Field(NamedTuple):
    name: str
    lo: int
    hi: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, _WEEKDAYS),  # 0 and 7 are both Sunday
)


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str):
        raise ConfigError(f"unknown time zone {tz!r}: expected an IANA name like 'Europe/Paris'")
    try:
        return ZoneInfo(tz)
    except (KeyError, ValueError, OSError):
        raise ConfigError(f"unknown time zone {tz!r}") from None


def _split(expr: str) -> list[str]:
    """The five fields of ``expr`` (already whitespace-normalized), nicknames expanded."""
    if expr.startswith("@"):
        nick = expr.lower()
        if nick == "@reboot":
            raise ConfigError(f'cron "{expr}": @reboot is not supported (it is not a schedule)')
        if nick not in _NICKNAMES:
            known = ", ".join(sorted(_NICKNAMES))
            raise ConfigError(f'cron "{expr}": unknown nickname {expr!r} (known: {known})')
        expr = _NICKNAMES[nick]
    parts = expr.split()
    if len(parts) == 6:
        raise ConfigError(
            f'cron "{expr}": 6 fields, but seconds are not supported; '
            "use 5 fields: minute hour day-of-month month day-of-week"
        )
    if len(parts) != 5:
        raise ConfigError(
            f'cron "{expr}": expected 5 fields '
            f"(minute hour day-of-month month day-of-week), got {len(parts)}"
        )
    return parts


def _value(text: str, part: str, spec: _Field, expr: str) -> int:
    name = text.lower()
    if name in spec.names:
        return spec.names[name]
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f'cron "{expr}": {part!r} is not a valid {spec.name}')
    number = int(text)
    if not spec.lo <= number <= spec.hi:
        raise ConfigError(
            f'cron "{expr}": {number} is out of range {spec.lo}-{spec.hi} for {spec.name}'
        )
    return number


def _part(part: str, spec: _Field, expr: str) -> range:
    """The values of one comma-separated item: ``*``, ``a``, ``a-b``, each with ``/step``."""
    base, slash, step_text = part.partition("/")
    step = 1
    if slash:
        if not (step_text.isascii() and step_text.isdigit()):
            raise ConfigError(
                f'cron "{expr}": step {step_text!r} is not a number in {spec.name} field'
            )
        step = int(step_text)
        if step == 0:
            raise ConfigError(f'cron "{expr}": step 0 in {spec.name} field')
    if base == "*":
        lo, hi = spec.lo, spec.hi
    elif "-" in base:
        first, _, last = base.partition("-")
        lo, hi = _value(first, part, spec, expr), _value(last, part, spec, expr)
        if lo > hi:
            raise ConfigError(f'cron "{expr}": range {base} runs backwards in {spec.name} field')
    else:
        lo = _value(base, part, spec, expr)
        hi = spec.hi if slash else lo
    return range(lo, hi + 1, step)


def _field(text: str, spec: _Field, expr: str) -> tuple[int, ...]:
    values: set[int] = set()
    for part in text.split(","):
        values.update(_part(part, spec, expr))
    if spec.name == "day-of-week":
        values = {v % 7 for v in values}
    return tuple(sorted(values))


def _first_at_least(values: Sequence[int], floor: int) -> int | None:
    i = bisect_left(values, floor)
    return values[i] if i < len(values) else None


def _to_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // _MS


def _offset_at(ms: int, zone: ZoneInfo) -> timedelta | None:
    return (_EPOCH + ms * _MS).astimezone(zone).utcoffset()


def _instant_ms(wall: datetime, zone: ZoneInfo) -> int:
    """The instant a matching wall time fires: its first occurrence, or for a wall time the
    clocks jump over, the instant the jump ends."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return _to_ms(first)
    # In a gap, fold=1 reads the wall time with the later offset (an instant before the jump)
    # and fold=0 with the earlier one (after it); the jump lies between: find it to the ms.
    before = _to_ms(wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc))
    after = _to_ms(first)
    offset_after = _offset_at(after, zone)
    while after - before > 1:
        mid = (before + after) // 2
        if _offset_at(mid, zone) == offset_after:
            after = mid
        else:
            before = mid
    return after


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression (minute hour day-of-month month day-of-week) read in the
    wall time of the IANA zone ``tz``.

    Day-of-month and day-of-week follow Vixie cron: when both are restricted (neither starts
    with ``*``) a day matches if either does; otherwise both must match.
    """

    expr: str
    tz: str = "UTC"
    minutes: tuple[int, ...] = field(init=False, repr=False)
    hours: tuple[int, ...] = field(init=False, repr=False)
    days: tuple[int, ...] = field(init=False, repr=False)
    months: tuple[int, ...] = field(init=False, repr=False)
    weekdays: tuple[int, ...] = field(init=False, repr=False)  # 0 = Sunday
    either_day: bool = field(init=False, repr=False)  # the Vixie OR rule applies

    @classmethod
    def parse(cls, expr: str, tz: str = "UTC") -> Cron:
        """The schedule of ``expr`` in zone ``tz``; ``ConfigError`` names any bad part."""
        return cls(expr, tz)

    def __post_init__(self) -> None:
        if not isinstance(self.expr, str):
            raise ConfigError(f"cron {self.expr!r}: expected a string expression")
        expr = " ".join(self.expr.split())
        if expr.startswith("@"):
            expr = expr.lower()
        _zone(self.tz)
        texts = _split(expr)
        values = [_field(text, spec, expr) for text, spec in zip(texts, _FIELDS, strict=True)]
        names = ("expr", "minutes", "hours", "days", "months", "weekdays")
        for name, value in zip(names, [expr, *values], strict=True):
            object.__setattr__(self, name, value)
        either = not texts[2].startswith("*") and not texts[4].startswith("*")
        object.__setattr__(self, "either_day", either)
        if not either and min(self.days) > max(_MONTH_DAYS[m - 1] for m in self.months):
            raise ConfigError(
                f'cron "{expr}": can never fire: no allowed month has a day '
                f"{', '.join(map(str, self.days))}"
            )

    def describe(self) -> str:
        return f'cron "{self.expr}" {self.tz}'

    @property
    def key(self) -> str:
        return f"cron:{self.expr}:{self.tz}"

    def next_after(self, after_ms: int) -> int:
        zone = _zone(self.tz)
        # Wall times before the one of `after_ms` all fire at or before it.
        wall = (_EPOCH + after_ms * _MS).astimezone(zone).replace(tzinfo=None)
        wall = wall.replace(second=0, microsecond=0)
        horizon = wall.year + SEARCH_YEARS
        while True:
            found = self._next_wall(wall, horizon)
            if found is None:
                raise ConfigError(
                    f'cron "{self.expr}" {self.tz}: no tick within {SEARCH_YEARS} years after '
                    f"{wall:%Y-%m-%d %H:%M}"
                )
            tick = _instant_ms(found, zone)
            if tick > after_ms:  # wall order is tick order, so the first one past is the next
                return tick
            wall = found + _MINUTE

    def _day_matches(self, wall: datetime) -> bool:
        dom = wall.day in self.days
        dow = wall.isoweekday() % 7 in self.weekdays
        return (dom or dow) if self.either_day else (dom and dow)

    def _next_wall(self, wall: datetime, horizon: int) -> datetime | None:
        """The first matching wall time at or after ``wall`` (whole minutes), skipping
        field by field: month, then day, hour and minute; None past year ``horizon``."""
        while wall.year <= horizon:
            if wall.month not in self.months:
                month = _first_at_least(self.months, wall.month)
                year = wall.year if month is not None else wall.year + 1
                wall = datetime(year, month or self.months[0], 1)
                continue
            midnight = wall.replace(hour=0, minute=0)
            if not self._day_matches(wall):
                wall = midnight + _DAY
                continue
            hour = _first_at_least(self.hours, wall.hour)
            if hour is None:
                wall = midnight + _DAY
                continue
            if hour != wall.hour:
                wall = wall.replace(hour=hour, minute=0)
            minute = _first_at_least(self.minutes, wall.minute)
            if minute is None:
                wall = wall.replace(minute=0) + timedelta(hours=1)
                continue
            return wall.replace(minute=minute)
        return None
