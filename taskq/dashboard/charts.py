"""The overview's two charts as SVG geometry, computed here so the page needs no chart
library and no script: throughput (stacked bars per minute) and failure rate (a line)."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.ops.throughput import Throughput

WIDTH, HEIGHT = 600, 120
"""The viewBox; the SVG scales to its container."""


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    kind: str
    """``ok`` or ``failed``: the CSS class that colours it."""
    title: str


@dataclass(frozen=True)
class Chart:
    """One chart: its bars or line, and the label of its top gridline."""

    bars: tuple[Bar, ...]
    points: str
    """A polyline's points ("x,y x,y"), empty for a bar chart."""
    top_label: str
    width: int = WIDTH
    height: int = HEIGHT


def _x(i: int, n: int) -> float:
    return round(i * WIDTH / n, 2)


def throughput_chart(t: Throughput) -> Chart:
    """Jobs per minute: succeeded, with the failed runs stacked on top."""
    n = len(t.minutes)
    peak = max((m.processed + m.failed for m in t.minutes), default=0) or 1
    scale = HEIGHT / peak
    bars = []
    slot = WIDTH / n
    for i, m in enumerate(t.minutes):
        title = f"{m.processed} succeeded, {m.failed} failed ({n - 1 - i} min ago)"
        ok_h, failed_h = m.processed * scale, m.failed * scale
        x, w = _x(i, n) + 0.5, round(max(1.0, slot - 1), 2)
        if ok_h:
            bars.append(Bar(x, round(HEIGHT - ok_h, 2), w, round(ok_h, 2), "ok", title))
        if failed_h:
            y = round(HEIGHT - ok_h - failed_h, 2)
            bars.append(Bar(x, y, w, round(failed_h, 2), "failed", title))
    return Chart(tuple(bars), "", f"{peak}/min")


def failure_chart(t: Throughput) -> Chart:
    """Failed runs among the runs that ended, per minute (minutes without runs are skipped)."""
    n = len(t.minutes)
    slot = WIDTH / n
    points = []
    for i, m in enumerate(t.minutes):
        rate = m.failure_rate
        if rate is not None:
            x = round(_x(i, n) + slot / 2, 2)
            points.append(f"{x},{round(HEIGHT - rate * HEIGHT, 2)}")
    return Chart((), " ".join(points), "100%")
