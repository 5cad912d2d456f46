"""Text views for ``taskq inspect``: pure functions from :mod:`taskq.ops.inspect` values to lines.

Kept apart from the click wiring so that the layout can be unit-tested without Redis.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from taskq.broker.reads import GatheringRow
from taskq.fairview import INVALID_WEIGHT, FairStats
from taskq.ops.inspect import ChildState, Overview, Ping, QueueStats, WorkerState
from taskq.ops.pendingview import PendingJob


def fmt_ms(ms: float | None) -> str:
    """A duration for people: ``850ms``, ``12.3s``, ``4m05s``, ``3h12m``, ``2d04h``; ``-``."""
    if ms is None:
        return "-"
    if ms < 1_000:
        return f"{ms:.0f}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    s = int(ms // 1000)
    if s < 3_600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Aligned columns; numbers right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) for r in rows) for i in range(len(headers))
    ]
    out = []
    for r in cells:
        parts = [
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric, strict=True)
        ]
        out.append("  ".join(parts).rstrip())
    return out


def render_queues(queues: Sequence[QueueStats]) -> list[str]:
    """Per queue and priority: waiting and pending jobs and their oldest ages."""
    rows = [
        (
            q.queue,
            s.priority,
            s.waiting,
            fmt_ms(s.oldest_waiting_age_ms),
            s.pending,
            s.retrying,
            fmt_ms(s.oldest_pending_age_ms),
        )
        for q in queues
        for s in q.streams
    ]
    headers = ("QUEUE", "PRIORITY", "WAITING", "OLDEST", "PENDING", "RETRYING", "OLDEST PENDING")
    lines = table(headers, rows)
    for q in queues:
        due = q.next_scheduled_in_ms
        when = f" (next {due_in(due)})" if due is not None else ""
        retries = [s.next_retry_in_ms for s in q.streams if s.next_retry_in_ms is not None]
        retry = f", {q.retrying} retrying (next {due_in(min(retries))})" if retries else ""
        ended = (
            f", {q.expired} expired, {q.cancelled} cancelled" if q.expired or q.cancelled else ""
        )
        held = f", {q.held} held for a concurrency slot" if q.held else ""
        line = (
            f"{q.queue}: {q.scheduled} scheduled{when}{retry}{held}, {q.dead} dead-lettered{ended}"
        )
        lines.append(line)
        lines += [f"{q.queue}: paused ({_paused(p)})" for p in q.paused]
        if q.fair is not None:
            lines += render_fair(q.queue, q.fair)
    return lines


def render_fair(queue: str, fair: FairStats) -> list[str]:
    """A fair queue's active keys, then its top keys by waiting jobs, indented."""
    mark = "" if fair.on else " (not marked on: keys left waiting)"
    head = f"{queue}: fair{mark}, {fair.active_keys} active key(s)"
    if not fair.top:
        return [head]
    rows = [(_cut(printable(k.key)), k.waiting, _weight(k.weight)) for k in fair.top]
    return [f"{head}, top {len(rows)} by waiting jobs:"] + [
        "  " + line for line in table(("KEY", "WAITING", "WEIGHT"), rows)
    ]


KEY_CHARS = 80
"""Longer keys are cut to this in the text view (``--json`` has them whole)."""


def _cut(key: str) -> str:
    return key if len(key) <= KEY_CHARS else key[: KEY_CHARS - 1] + "…"


def _weight(weight: int) -> int | str:
    return "invalid" if weight == INVALID_WEIGHT else weight


def printable(key: str) -> str:
    """A key (user data) for a terminal: characters that are not printable (escape
    sequences, new lines) written as Python escapes, so a key cannot redraw the screen."""
    if key.isprintable():
        return key
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in key)


def _paused(p: dict[str, Any]) -> str:
    """One pause as inspect shows it: what it covers, since when."""
    what = ", ".join(f"{k} {p[k]}" for k in ("task", "key") if p.get(k)) or "the whole queue"
    since = p.get("since_ms")
    return f"{what}, since {fmt_ms(int(time.time() * 1000) - since)} ago" if since else what


def render_queue_details(queues: Sequence[QueueStats]) -> list[str]:
    """``inspect queues``: the overview's figures plus stream length, consumers and cursor."""
    lines = render_queues(queues)
    rows = [
        (
            s.stream,
            s.length,
            s.consumers,
            s.last_delivered_id or "-",
            "-" if s.lag is None else s.lag,
        )
        for q in queues
        for s in q.streams
    ]
    return [
        *lines,
        "",
        *table(("STREAM", "LENGTH", "CONSUMERS", "LAST DELIVERED", "REDIS LAG"), rows),
    ]


def render_worker_table(workers: Sequence[WorkerState]) -> list[str]:
    """One line per live worker, then the fleet's totals."""
    if not workers:
        return ["no workers alive"]
    rows = [
        (
            w.id,
            ",".join(w.queues),
            w.concurrency,
            w.busy,
            w.idle,
            w.processed,
            w.failed,
            w.rate_per_s,
            f"{fmt_ms(w.heartbeat_age_ms)} ago",
        )
        for w in workers
    ]
    headers = (
        "WORKER",
        "QUEUES",
        "CHILDREN",
        "BUSY",
        "IDLE",
        "PROCESSED",
        "FAILED",
        "JOBS/S",
        "HEARTBEAT",
    )
    busy = sum(w.busy for w in workers)
    children = sum(w.busy + w.idle for w in workers)
    rate = sum(w.rate_per_s for w in workers)
    total = f"{len(workers)} worker(s) alive: {busy}/{children} children busy, {rate:.1f} jobs/s"
    return [*table(headers, rows), total]


def render_overview(o: Overview) -> list[str]:
    lines = [*render_queues(o.queues), "", *render_worker_table(o.workers)]
    if o.gathering:
        lines += ["", *render_gathering(o.gathering, o.now_ms)]
    return lines


def render_workers(workers: Sequence[WorkerState]) -> list[str]:
    """``inspect workers``: each worker's record, child by child."""
    if not workers:
        return ["no workers alive"]
    lines: list[str] = []
    for w in workers:
        lines += [
            f"{w.id}  app={w.app} v{w.version} queues={','.join(w.queues)} "
            f"up {fmt_ms(w.heartbeat_ms - w.started_ms)}",
            f"  heartbeat {fmt_ms(w.heartbeat_age_ms)} ago, "
            f"record expires in {fmt_ms(w.expires_in_ms)}",
            f"  processed {w.processed}  failed {w.failed}  retried {w.retried}  "
            f"dead-lettered {w.dead}  {w.rate_per_s} jobs/s",
            f"  children {w.busy + w.idle}/{w.concurrency}: {w.busy} busy, {w.idle} idle",
        ]
        for c in w.children:
            doing = f"{c.task} job {c.job_id} for {fmt_ms(c.running_ms)}" if c.busy else "idle"
            if c.jobs > 1:
                doing += f" (oldest of {c.jobs} async jobs)"
            lines.append(f"    #{c.index} pid {c.pid}: {doing}")
    return lines


def render_active(busy: Sequence[ChildState]) -> list[str]:
    if not busy:
        return ["no jobs running"]
    rows = [
        (c.worker, c.index, c.pid, c.task, c.job_id, c.entry_id, fmt_ms(c.running_ms)) for c in busy
    ]
    return table(("WORKER", "CHILD", "PID", "TASK", "JOB", "ENTRY", "RUNNING"), rows)


def render_pending(jobs: Sequence[PendingJob]) -> list[str]:
    if not jobs:
        return ["no pending jobs"]
    rows = [
        (
            j.stream,
            j.entry_id,
            j.task or "?",
            j.state,
            j.consumer,
            fmt_ms(j.idle_ms),
            j.deliveries,
            fmt_ms(j.age_ms),
        )
        for j in jobs
    ]
    headers = ("STREAM", "ENTRY", "TASK", "STATE", "CONSUMER", "IDLE", "DELIVERIES", "AGE")
    return table(headers, rows)


def render_gathering(rows: Sequence[GatheringRow], now_ms: int) -> list[str]:
    if not rows:
        return ["no debounce bursts or batches waiting"]
    cells = [
        (r.queue, r.kind, r.key, r.job_id, r.count, fmt_ms(max(0, r.due_ms - now_ms))) for r in rows
    ]
    return table(("QUEUE", "KIND", "KEY", "JOB", "CALLS", "DUE IN"), cells)


def render_registered(workers: Sequence[WorkerState]) -> list[str]:
    if not workers:
        return ["no workers alive"]
    lines: list[str] = []
    for w in workers:
        lines.append(f"{w.id}: {len(w.tasks)} task(s)")
        lines += [f"  {t}" for t in w.tasks]
    return lines


def render_ping(p: Ping) -> list[str]:
    lines = [f"redis: pong in {p.redis_ms:.1f}ms"]
    for w in p.workers:
        state = "pong" if w.answered else "LATE"
        lines.append(
            f"{w.worker}: {state} (heartbeat {fmt_ms(w.heartbeat_age_ms)} ago, "
            f"record expires in {fmt_ms(w.expires_in_ms)})"
        )
    answered = sum(w.answered for w in p.workers)
    lines.append(f"{answered}/{len(p.workers)} worker(s) answered")
    return lines


def due_in(ms: int) -> str:
    """ "due in 3.0s", or "overdue 1.4s" for work that is late (every child busy)."""
    return f"due in {fmt_ms(ms)}" if ms >= 0 else f"overdue {fmt_ms(-ms)}"
