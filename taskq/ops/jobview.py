"""The text view of one job for ``taskq job ID``: a pure function of its status."""

from __future__ import annotations

import time
from typing import Any

from taskq.codec import readable
from taskq.ops.render import fmt_ms
from taskq.results import FAILED, RUNNING, SUCCEEDED, UNKNOWN, FlowView, JobStatus

MAX_VALUE_CHARS = 2_000
"""Longer arguments and results are cut in the text view (``--json`` has them whole)."""


def when(ms: int | None) -> str:
    """A Redis-clock time in ms as UTC, to the millisecond."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d} UTC"


def render_job(s: JobStatus, now_ms: int) -> list[str]:
    """The lines ``taskq job ID`` prints."""
    lines = [f"job {s.job_id}: {s.state}"]
    if s.state == UNKNOWN:
        return lines + checkpoint_lines(s)
    if not s.recorded:
        lines.append("(no status record: the job does not store results; seen from its entry)")
    rows = _rows(s, now_ms)
    lines += [f"  {name:<9} {value}" for name, value in rows if value is not None]
    for e in s.errors:
        lines.append(f"  attempt {e.attempt} failed at {when(e.finished_ms)}: ")
        lines[-1] += _short(f"{e.error_type}: {e.error}")
        if e.worker:
            lines.append(f"    on {e.worker}")
    if s.state == SUCCEEDED:
        lines.append(f"  {'result':<9} {_short(readable(s.shown_value))}")
    return lines + checkpoint_lines(s)


def checkpoint_lines(s: JobStatus) -> list[str]:
    """A resumable job's steps and iterations, one line each."""
    lines = []
    for step in s.steps:
        error = f" ({step.error})" if step.error else ""
        lines.append(f"  step {step.name}: {step.state}{error} at {when(step.at_ms)}")
    for c in s.cursors:
        end = ", finished" if c.finished else ""
        lines.append(f"  iteration {c.name}: {c.items:,} items{end}, saved at {when(c.at_ms)}")
    return lines


def _rows(s: JobStatus, now_ms: int) -> list[tuple[str, str | None]]:
    """Name and value of each line about the job (None: not shown)."""
    ran = None
    if s.finished_ms is not None and s.started_ms is not None:
        ran = fmt_ms(s.finished_ms - s.started_ms)
    return [
        ("task", s.task or None),
        ("queue", f"{s.queue} ({s.priority})" if s.queue else None),
        ("args", _short(_call(s.args, dict(s.kwargs))) if s.kwargs is not None else None),
        ("attempts", str(s.attempts)),
        ("worker", s.worker if s.state == RUNNING else None),
        ("enqueued", _at(s.enqueued_ms, now_ms)),
        ("due", _at(s.due_ms, now_ms)),
        ("batch", f"{s.batch} calls" if s.batch else None),
        ("started", when(s.started_ms) if s.started_ms is not None else None),
        ("finished", f"{when(s.finished_ms)} (ran {ran})" if s.finished_ms is not None else None),
    ]


def _at(ms: int | None, now_ms: int) -> str | None:
    """A time and how far it is from now."""
    if ms is None:
        return None
    gap = fmt_ms(abs(now_ms - ms))
    return f"{when(ms)} ({gap} ago)" if ms <= now_ms else f"{when(ms)} (in {gap})"


def _call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [readable(a) for a in args] + [f"{k}={readable(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _short(text: str) -> str:
    if len(text) <= MAX_VALUE_CHARS:
        return text
    return text[:MAX_VALUE_CHARS] + f"... ({len(text) - MAX_VALUE_CHARS} more characters)"


def render_flow(v: FlowView) -> list[str]:
    """The lines ``taskq job FLOW_ID`` prints: one per step, then each chord's header."""
    lines = [f"{v.kind} {v.flow_id}: {len(v.steps)} step(s) with a status record"]
    for n, s in enumerate(v.steps, 1):
        detail = ""
        if s.state == FAILED and s.cause is not None:
            detail = f" (not run: {s.cause.task} failed: {s.cause.error_type})"
        elif s.state == FAILED and s.last_error is not None:
            detail = f" ({_short(s.last_error.error_type + ': ' + s.last_error.error)})"
        elif s.state == SUCCEEDED:
            detail = f" -> {_short(readable(s.shown_value))}"
        lines.append(f"  {n}. {s.task or '?'} {s.job_id}: {s.state}{detail}")
    for done, size in v.chords:
        state = f"{done} of {size} header results in" if done is not None else "ended"
        lines.append(f"  chord of {size}: {state}")
    return lines


def render_event(kind: str, value: Any) -> str:
    """One line of ``taskq job ID --follow`` for a :class:`~taskq.telemetry.Follower` event."""
    if kind == "progress":
        share = f" ({value.done / value.total:.0%})" if value.total else ""
        of = f"/{value.total}" if value.total is not None else ""
        message = f" {value.message}" if value.message else ""
        return f"progress {value.done}{of}{share}{message}"
    if kind == "log":
        return f"log {when(value.time_ms)} {value.level} {_short(value.message)}"
    if kind == "chunk":
        shown = value.value if isinstance(value.value, str) else repr(value.value)
        return f"[{value.attempt}] {_short(shown)}"
    return f"ended: {value}"
