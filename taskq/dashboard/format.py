"""Template filters: durations, Redis-clock times and values as the pages print them."""

from __future__ import annotations

import time
from typing import Any

from taskq.codec import readable
from taskq.ops.jobview import when
from taskq.ops.render import fmt_ms

MAX_VALUE_CHARS = 10_000
"""Longer arguments and results are cut on the page (the JSON endpoints have them whole)."""


def utc(ms: int | None) -> str:
    """A Redis-clock time as UTC to the second ("-" for None)."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def value(v: Any) -> str:
    """A task argument or result as Python would print it (but times in ISO 8601, a Decimal
    or UUID as its string), cut when very long; the template escapes it (autoescape), so
    markup in it shows as text."""
    text = readable(v)
    if len(text) > MAX_VALUE_CHARS:
        return text[:MAX_VALUE_CHARS] + f"... ({len(text) - MAX_VALUE_CHARS} more characters)"
    return text


def percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


FILTERS = {"duration": fmt_ms, "utc": utc, "value": value, "percent": percent, "when": when}
