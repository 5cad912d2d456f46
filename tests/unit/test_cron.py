"""Cron expressions and fixed intervals: parsing, next ticks, DST gaps and repeats, errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.cron import Cron, Every, Schedule, ticks_between
from taskq.errors import ConfigError

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """Milliseconds since the epoch of a UTC date and time."""
    moment = datetime(year, month, day, hour, minute, tzinfo=timezone.utc)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def local(
    tz: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, fold: int = 0
) -> int:
    """Milliseconds since the epoch of a wall time in ``tz``."""
    moment = datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz), fold=fold)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def wall(ms: int, tz: str = "UTC") -> datetime:
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(ZoneInfo(tz))


# --- parsing ------------------------------------------------------------------------------


def test_fields_with_numbers_ranges_steps_and_lists() -> None:
    cron = Cron.parse("1,5-7,*/20 0-23/6 1/10 2-4 *")
    assert cron.minutes == (0, 1, 5, 6, 7, 20, 40)
    assert cron.hours == (0, 6, 12, 18)
    assert cron.days == (1, 11, 21, 31)
    assert cron.months == (2, 3, 4)
    assert cron.weekdays == tuple(range(7))


def test_month_and_weekday_names_in_any_case() -> None:
    cron = Cron.parse("0 0 * JAN,Jun-aug MON-fri")
    assert cron.months == (1, 6, 7, 8)
    assert cron.weekdays == (1, 2, 3, 4, 5)
    assert Cron.parse("0 0 * * sun,SAT").weekdays == (0, 6)


def test_seven_is_sunday_like_zero() -> None:
    assert Cron.parse("0 0 * * 7").weekdays == (0,)
    assert Cron.parse("0 0 * * 5-7").weekdays == (0, 5, 6)
    # 2026-01-04 is a Sunday.
    assert Cron.parse("0 0 * * 7").next_after(utc(2026, 1, 1)) == utc(2026, 1, 4)
    assert Cron.parse("0 0 * * 0").next_after(utc(2026, 1, 1)) == utc(2026, 1, 4)


@pytest.mark.parametrize(
    ("nickname", "same_as"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_nicknames(nickname: str, same_as: str) -> None:
    start = utc(2026, 5, 17, 13, 27)
    got = ticks_between(Cron.parse(nickname), start, start + 2000 * DAY_MS, 5)
    assert got == ticks_between(Cron.parse(same_as), start, start + 2000 * DAY_MS, 5)
    assert len(got) == 5


def test_whitespace_is_normalized_in_expr_describe_and_key() -> None:
    cron = Cron.parse("  */5\t*  * * * ", "Europe/Paris")
    assert cron.expr == "*/5 * * * *"
    assert cron.describe() == 'cron "*/5 * * * *" Europe/Paris'
    assert cron.key == "cron:*/5 * * * *:Europe/Paris"
    assert cron == Cron("*/5 * * * *", "Europe/Paris")
    assert Cron.parse("*/5 * * * *").key != cron.key


# --- next ticks ---------------------------------------------------------------------------


def test_vixie_or_rule_when_both_days_are_restricted() -> None:
    # Every 13th and every Friday: 2026-02-06 Fri, 13 Fri, 20 Fri, 27 Fri, 2026-03-06 Fri,
    # 03-13 (Fri too), ... then 2026-04-13 is a Monday.
    got = ticks_between(Cron.parse("0 0 13 * fri"), utc(2026, 2, 1), utc(2026, 4, 14), 100)
    days = [wall(t).date().isoformat() for t in got]
    assert days[:6] == [
        "2026-02-06",
        "2026-02-13",
        "2026-02-20",
        "2026-02-27",
        "2026-03-06",
        "2026-03-13",
    ]
    assert "2026-04-13" in days and wall(utc(2026, 4, 13)).weekday() == 0
    assert all(wall(t).day == 13 or wall(t).weekday() == 4 for t in got)


def test_and_rule_when_one_day_field_starts_with_a_star() -> None:
    # dow "*/2" starts with '*': both must match -> 13ths that fall on Sun, Tue, Thu or Sat.
    got = ticks_between(Cron.parse("0 0 13 * */2"), utc(2026, 1, 1), utc(2027, 1, 1), 100)
    # Tue 13 Jan, Sat 13 Jun, Thu 13 Aug, Sun 13 Sep, Tue 13 Oct, Sun 13 Dec.
    assert [wall(t).month for t in got] == [1, 6, 8, 9, 10, 12]
    assert all(wall(t).day == 13 for t in got)


def test_leap_day_and_month_ends() -> None:
    leap = Cron.parse("0 0 29 2 *")
    assert leap.next_after(utc(2026, 1, 1)) == utc(2028, 2, 29)
    assert leap.next_after(utc(2028, 2, 29)) == utc(2032, 2, 29)
    assert Cron.parse("0 0 31 * *").next_after(utc(2026, 4, 1)) == utc(2026, 5, 31)
    assert Cron.parse("59 23 31 1 *").next_after(utc(2026, 12, 31, 23, 59)) == utc(
        2027, 1, 31, 23, 59
    )


def test_far_ticks_are_found_by_skipping_fields() -> None:
    yearly = Cron.parse("@yearly", "America/New_York")
    ticks = ticks_between(yearly, utc(2026, 1, 1), utc(2100, 1, 1), 1000)
    assert len(ticks) == 74
    assert ticks[0] == local("America/New_York", 2026, 1, 1)


def test_give_up_after_years_without_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    # Feb 29 on a Sunday (AND rule): 2004, then 2032, within the default horizon.
    cron = Cron.parse("0 0 29 2 */7")
    assert cron.next_after(utc(2003, 1, 1)) == utc(2004, 2, 29)
    assert cron.next_after(utc(2005, 1, 1)) == utc(2032, 2, 29)
    monkeypatch.setattr("taskq.cron.SEARCH_YEARS", 5)
    with pytest.raises(ConfigError, match="no tick within 5 years"):
        cron.next_after(utc(2005, 1, 1))


def test_next_after_is_strictly_after() -> None:
    cron = Cron.parse("*/5 * * * *")
    assert cron.next_after(utc(2026, 1, 1, 0, 5)) == utc(2026, 1, 1, 0, 10)
    assert cron.next_after(utc(2026, 1, 1, 0, 5) - 1) == utc(2026, 1, 1, 0, 5)
    assert cron.next_after(utc(1969, 12, 31, 23, 58)) == 0


# --- daylight saving ----------------------------------------------------------------------


def test_paris_gap_fires_once_at_the_end_of_the_gap() -> None:
    cron = Cron.parse("30 2 * * *", "Europe/Paris")
    # 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z): 02:30 does not exist.
    assert cron.next_after(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1)
    assert cron.next_after(utc(2026, 3, 29, 1)) == utc(2026, 3, 30, 0, 30)


def test_paris_gap_collapses_many_times_into_one_tick() -> None:
    cron = Cron.parse("*/15 2 * * *", "Europe/Paris")
    got = ticks_between(cron, utc(2026, 3, 28), utc(2026, 3, 30, 12), 100)
    assert got == [
        *(utc(2026, 3, 28, 1, m) for m in (0, 15, 30, 45)),
        utc(2026, 3, 29, 1),
        *(utc(2026, 3, 30, 0, m) for m in (0, 15, 30, 45)),
    ]


def test_paris_hourly_across_the_gap() -> None:
    got = ticks_between(
        Cron.parse("0 * * * *", "Europe/Paris"), utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 2), 10
    )
    # 01:00 CET, then 02:00 (missing) and 03:00 CEST share 01:00Z, then 04:00 CEST.
    assert got == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]


def test_paris_repeat_fires_at_the_first_occurrence() -> None:
    cron = Cron.parse("30 2 * * *", "Europe/Paris")
    # 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z): 02:30 happens at 00:30Z and 01:30Z.
    assert cron.next_after(utc(2026, 10, 24, 12)) == utc(2026, 10, 25, 0, 30)
    assert cron.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)


def test_paris_hourly_across_the_repeat() -> None:
    cron = Cron.parse("30 * * * *", "Europe/Paris")
    got = ticks_between(cron, utc(2026, 10, 24, 23), utc(2026, 10, 25, 3), 10)
    # 01:30 CEST, 02:30 CEST, (02:30 CET skipped), 03:30 CET.
    assert got == [utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 2, 30)]
    # From inside the repeated hour the next tick is 03:30 CET, not a second 02:30.
    assert cron.next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 2, 30)


def test_new_york_gap_and_repeat() -> None:
    tz = "America/New_York"
    # 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z).
    gap = Cron.parse("30 2 * * *", tz)
    assert gap.next_after(utc(2026, 3, 7, 12)) == utc(2026, 3, 8, 7)
    assert gap.next_after(utc(2026, 3, 8, 7)) == utc(2026, 3, 9, 6, 30)
    # 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:30 happens at 05:30Z and 06:30Z.
    repeat = Cron.parse("30 1 * * *", tz)
    assert repeat.next_after(utc(2026, 10, 31, 12)) == utc(2026, 11, 1, 5, 30)
    assert repeat.next_after(utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 2, 6, 30)
    assert local(tz, 2026, 11, 1, 1, 30, fold=1) == utc(2026, 11, 1, 6, 30)


def test_every_ignores_zones() -> None:
    hourly = Every.of(3600)
    got = ticks_between(hourly, utc(2026, 3, 29, 0), utc(2026, 3, 29, 3), 10)
    assert got == [utc(2026, 3, 29, h) for h in (1, 2, 3)]


# --- cross-check against a brute-force minute scan ------------------------------------------

Wall = datetime
CASES: dict[str, Callable[[Wall], bool]] = {
    "* * * * *": lambda w: True,
    "*/15 2 * * *": lambda w: w.hour == 2 and w.minute % 15 == 0,
    "30 * * * *": lambda w: w.minute == 30,
    "0,45 1-3 * * *": lambda w: w.minute in (0, 45) and 1 <= w.hour <= 3,
    "7 */5 * * mon-fri": lambda w: w.minute == 7 and w.hour % 5 == 0 and w.weekday() < 5,
    "0 0 13 * fri": lambda w: w.minute == w.hour == 0 and (w.day == 13 or w.weekday() == 4),
    "59 23 * * 7": lambda w: (w.hour, w.minute) == (23, 59) and w.weekday() == 6,
    "10 2 1-10/3 * *": lambda w: (w.hour, w.minute) == (2, 10) and w.day in (1, 4, 7, 10),
    "*/20 0-4 * mar,oct,nov *": lambda w: (
        w.minute % 20 == 0 and w.hour <= 4 and w.month in (3, 10, 11)
    ),
}
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"]  # Lord Howe: 30 min
ANCHORS = [
    utc(2026, 3, 28),  # Paris gap, Lord Howe is months past its change
    utc(2026, 10, 24),  # Paris repeat
    utc(2026, 3, 7),  # New York gap
    utc(2026, 10, 31),  # New York repeat
    utc(2026, 4, 4),  # Lord Howe repeat (02:00 -> 01:30 on 2026-04-05)
    utc(2026, 10, 3),  # Lord Howe gap (02:00 -> 02:30 on 2026-10-04)
    utc(2028, 2, 27),  # leap day
]
SPAN_MS = 2 * DAY_MS


def brute_force(match: Callable[[Wall], bool], tz: str, after_ms: int, until_ms: int) -> list[int]:
    """Every UTC minute in (after_ms, until_ms] is a tick if its wall time matches and is its
    first occurrence, or if it ends a jump over a matching wall time."""
    zone = ZoneInfo(tz)
    ticks = []
    t = (after_ms // MINUTE_MS + 1) * MINUTE_MS
    prev = (EPOCH + timedelta(milliseconds=t - MINUTE_MS)).astimezone(zone).replace(tzinfo=None)
    while t <= until_ms:
        now = (EPOCH + timedelta(milliseconds=t)).astimezone(zone)
        here = now.replace(tzinfo=None)
        skipped = []
        jump = prev + timedelta(minutes=1)
        while jump < here:
            skipped.append(jump)
            jump += timedelta(minutes=1)
        if (match(here) and now.fold == 0) or any(map(match, skipped)):
            ticks.append(t)
        prev = here
        t += MINUTE_MS
    return ticks


@settings(max_examples=50, deadline=None, database=None)
@given(
    expr=st.sampled_from(sorted(CASES)),
    tz=st.sampled_from(ZONES),
    anchor=st.sampled_from(ANCHORS),
    shift=st.integers(-DAY_MS, DAY_MS),
)
def test_matches_a_brute_force_minute_scan(expr: str, tz: str, anchor: int, shift: int) -> None:
    start = anchor + shift
    cron = Cron.parse(expr, tz)
    expected = brute_force(CASES[expr], tz, start, start + SPAN_MS)
    assert ticks_between(cron, start, start + SPAN_MS, 10_000) == expected
    assert all(a < b for a, b in pairwise(expected))


def test_brute_force_sees_the_gap_and_the_repeat() -> None:
    # The reference itself follows the rules: one tick for the gap, one for the repeat.
    gap = brute_force(CASES["*/15 2 * * *"], "Europe/Paris", utc(2026, 3, 29), utc(2026, 3, 29, 3))
    assert gap == [utc(2026, 3, 29, 1)]
    repeat = brute_force(
        CASES["30 * * * *"], "Europe/Paris", utc(2026, 10, 25), utc(2026, 10, 25, 2)
    )
    assert repeat == [utc(2026, 10, 25, 0, 30)]


# --- fixed intervals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("every", "interval_ms", "text"),
    [
        (30, 30_000, "every 30s"),
        (1.5, 1_500, "every 1500ms"),
        (0.1, 100, "every 100ms"),
        (0.001, 1, "every 1ms"),
        (timedelta(minutes=5), 300_000, "every 5m"),
        (timedelta(hours=2), 7_200_000, "every 2h"),
        (86_400, 86_400_000, "every 1d"),
    ],
)
def test_every_of(every: float | timedelta, interval_ms: int, text: str) -> None:
    schedule = Every.of(every)
    assert schedule.interval_ms == interval_ms
    assert schedule.describe() == text
    assert schedule.key == f"every:{interval_ms}"


def test_every_aligns_to_the_epoch() -> None:
    every = Every.of(30)
    assert every.next_after(0) == 30_000
    assert every.next_after(29_999) == 30_000
    assert every.next_after(30_000) == 60_000
    assert every.next_after(-1) == 0
    assert ticks_between(every, 10_000, 100_000, 2) == [30_000, 60_000]


# --- ticks_between ------------------------------------------------------------------------


def test_ticks_between_bounds_and_limit() -> None:
    schedule: Schedule = Cron.parse("*/10 * * * *")
    start = utc(2026, 1, 1)
    assert ticks_between(schedule, start, start + HOUR_MS, 100) == [
        start + m * MINUTE_MS for m in (10, 20, 30, 40, 50, 60)
    ]
    assert ticks_between(schedule, start, start + HOUR_MS, 2) == [
        start + 10 * MINUTE_MS,
        start + 20 * MINUTE_MS,
    ]
    assert ticks_between(schedule, start, start + 9 * MINUTE_MS, 100) == []
    assert ticks_between(schedule, start, start + HOUR_MS, 0) == []
    with pytest.raises(ConfigError, match="limit=-1"):
        ticks_between(schedule, start, start + HOUR_MS, -1)


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("*/0 * * * *", 'cron "*/0 * * * *": step 0 in minute field'),
        ("61 * * * *", 'cron "61 * * * *": 61 is out of range 0-59 for minute'),
        ("* 24 * * *", "24 is out of range 0-23 for hour"),
        ("* * 0 * *", "0 is out of range 1-31 for day-of-month"),
        ("* * * 13 *", "13 is out of range 1-12 for month"),
        ("* * * * 8", "8 is out of range 0-7 for day-of-week"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "got 7"),
        ("", "got 0"),
        ("0 * * * * *", "seconds are not supported"),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "'@fortnightly'"),
        ("x * * * *", "'x' is not a valid minute"),
        ("* * * foo *", "'foo' is not a valid month"),
        ("* * * * funday", "'funday' is not a valid day-of-week"),
        ("1,,2 * * * *", "'' is not a valid minute"),
        ("-5 * * * *", "'-5' is not a valid minute"),
        ("5-1 * * * *", "range 5-1 runs backwards"),
        ("*/x * * * *", "step 'x' is not a number"),
        ("*/-1 * * * *", "step '-1' is not a number"),
        ("0 0 30 2 *", 'cron "0 0 30 2 *": can never fire'),
        ("0 0 31 4,6,9,11 *", "can never fire"),
        ("0 0 30 feb */2", "can never fire"),
    ],
)
def test_bad_expressions(expr: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Cron.parse(expr)
    assert message in str(caught.value)


def test_restricted_weekday_rescues_an_impossible_day() -> None:
    # OR rule: Feb 30 never comes, but Fridays in February do (2026-02-06).
    assert Cron.parse("0 0 30 2 fri").next_after(utc(2026, 1, 1)) == utc(2026, 2, 6)


@pytest.mark.parametrize("tz", ["Mars/Base", "", "Europe", "../etc/passwd", "/etc/localtime"])
def test_unknown_time_zone(tz: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Cron.parse("* * * * *", tz)
    assert f"unknown time zone {tz!r}" in str(caught.value)


def test_expression_must_be_text() -> None:
    with pytest.raises(ConfigError, match="expected a string"):
        Cron.parse(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("every", "message"),
    [
        (0, "every=0"),
        (-5, "every=-5"),
        (0.0004, "at least 1 ms"),
        (timedelta(0), "at least 1 ms"),
        (timedelta(microseconds=999), "at least 1 ms"),
        (True, "every=True"),
        (float("nan"), "every=nan"),
        (float("inf"), "every=inf"),
        ("30", "every='30'"),
    ],
)
def test_bad_intervals(every: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Every.of(every)  # type: ignore[arg-type]
    assert message in str(caught.value)


@pytest.mark.parametrize("interval_ms", [0, -1, True, 1.5])
def test_every_checks_its_interval_ms(interval_ms: object) -> None:
    with pytest.raises(ConfigError, match="interval_ms="):
        Every(interval_ms)  # type: ignore[arg-type]
