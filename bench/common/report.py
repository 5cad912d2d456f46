"""What every bench report shares: medians, ratios, the best of several, number formats,
Markdown tables, verdicts.

The peer comparison (bench/compare/report.py) and every feature bench render with these, so a
figure, a ratio or a PASS/FAIL cell reads the same in RESULTS.md and RESULTS-features.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

Params = dict[str, Any]


def med(values: Sequence[float | None]) -> float | None:
    """Median of the values that exist, None if there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def div(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    return None if a is None or not b else a / b


def pct(v: float | None) -> str:
    """A share as "93.1 %", or "n/a"."""
    return "n/a" if v is None else f"{100 * v:.1f} %"


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as "1.23x", or "n/a"."""
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def best(values: Mapping[str, float | None], highest: bool) -> tuple[str, float] | None:
    """(name, value) of the highest (or the lowest) value present, None when there is none."""
    found = [(v, name) for name, v in values.items() if v is not None]
    if not found:
        return None
    value, name = max(found) if highest else min(found)
    return name, value


def vs_line(label: str, what: str, other: str, mine: float | None, theirs: float | None) -> str:
    """A ratio line of a report: ``- {label} {what} vs {other}: 1.23x``."""
    return f"- {label} {what} vs {other}: {ratio(mine, theirs)}"


def num(v: float | None, fmt: str = ",.0f") -> str:
    """A figure for humans, or "n/a"."""
    return "n/a" if v is None else format(v, fmt)


def verdict(passed: bool | None) -> str:
    """The cell of a target: **PASS**, **FAIL**, or n/a when it could not be judged."""
    return {True: "**PASS**", False: "**FAIL**", None: "n/a"}[passed]


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
