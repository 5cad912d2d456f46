"""Rate limits as values: ``"100/s"``, ``"20/m"``, ``"1000/h"``, ``"5/10s"``. No Redis here;
the worker admits or defers each job of a limited task in one script
(``taskq/broker/lua/limit.lua``), so the limit holds across every worker of the fleet."""

from __future__ import annotations

import re
from typing import NamedTuple

from taskq.errors import ConfigError

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NAMES = {"sec": "s", "second": "s", "min": "m", "minute": "m", "hour": "h", "day": "d"}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")
MAX_STARTS = 1_000_000
"""The most starts a window may allow: the limit's sorted set holds up to this many slots."""
MAX_WINDOW_MS = 366 * 86_400_000
"""The longest window (a year): slot times stay far inside the integers that Lua's numbers
(doubles) hold exactly, and the limit's key expires within a year of its last start."""


class Rate(NamedTuple):
    """At most ``starts`` job starts in any window of ``window_ms``."""

    starts: int
    window_ms: int

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``"<count>/<unit>"`` or ``"<count>/<n><unit>"``, unit ``s``, ``m``, ``h`` or ``d``
        (or ``sec``, ``min``, ``hour``, ``day``).

        Raises:
            ConfigError: anything else, a count of 0 or above :data:`MAX_STARTS`, or a window
                of 0 or longer than :data:`MAX_WINDOW_MS`.
        """
        m = _RATE.match(text) if isinstance(text, str) else None
        word = m.group(3) if m else ""
        if word.endswith("s") and word[:-1] in _NAMES:  # "seconds", "mins", "hours"
            word = word[:-1]
        unit = _NAMES.get(word, word)
        if m is None or unit not in _UNITS_MS or unit == "ms":
            raise ConfigError(
                f"rate_limit {text!r}: expected '<count>/<unit>' such as '100/s', '20/m', "
                "'1000/h' or '5/10s'"
            )
        starts, per = _digits(m.group(1)), _digits(m.group(2) or "1")
        if starts < 1 or per < 1:
            raise ConfigError(f"rate_limit {text!r}: the count and the window must be > 0")
        if starts > MAX_STARTS or per * _UNITS_MS[unit] > MAX_WINDOW_MS:
            raise ConfigError(
                f"rate_limit {text!r}: at most {MAX_STARTS:,} starts in a window of at most "
                "366 days"
            )
        return cls(starts, per * _UNITS_MS[unit])


def _digits(text: str) -> int:
    """A run of digits as an int; one too long for any bound reads as past every bound
    (Python refuses to convert more than 4,300 digits)."""
    return int(text) if len(text) <= 18 else 10**18
