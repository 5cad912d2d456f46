"""The queue pages (``/queues/<queue>/<state>``): one state's jobs with the state's figures,
and the bulk actions ("all that match") that run in a thread while a page shows "N of M".

The figures are the ones ``taskq inspect --json`` prints for the queue (the same
:meth:`~taskq.broker.reads.Reader.queue` snapshot, and for a fair queue the same read of its
keys); the rows come from
:class:`~taskq.ops.browse.Jobs`, a page at a time.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from taskq.app import App
from taskq.broker.fairreads import fair_stats_steps
from taskq.broker.steps import run
from taskq.fairview import FairStats
from taskq.ops.browse import Jobs
from taskq.ops.jobrows import PER_PRIORITY, STATES, JobFilter, JobsPage, check_action

PAGE_SIZE = 50
MAX_BULKS = 100
"""Bulk actions whose progress is kept (the oldest finished ones are forgotten first)."""


@dataclass(frozen=True)
class QueuePage:
    """One state's page of a queue."""

    queue: str
    state: str
    priority: str
    figures: dict[str, int]
    """State (``waiting:high``... per priority, and plain totals) -> jobs in it."""
    page: JobsPage
    where: JobFilter
    actions: tuple[str, ...]
    """The actions that apply to this state."""
    held_task: str = ""
    """The task whose held jobs a ``held`` page lists (``?of=``)."""
    held_tasks: tuple[str, ...] = ()
    fair: FairStats | None = None
    """A fair queue's active keys and top keys (None: the queue is not fair)."""


def figures(app: App, queue: str) -> dict[str, int]:
    """The queue's jobs per state, as ``taskq inspect --json`` counts them."""
    snap = app.reader.queue(queue)
    out: dict[str, int] = {"scheduled": snap.scheduled, "held": snap.held}
    for s in snap.streams:
        out[f"waiting:{s.priority}"] = s.waiting
        out[f"running:{s.priority}"] = s.pending
        out[f"retrying:{s.priority}"] = s.retrying
    for state in ("waiting", "running", "retrying"):
        out[state] = sum(s_n for k, s_n in out.items() if k.startswith(state + ":"))
    return out


def queue_page(
    app: App,
    queue: str,
    state: str,
    *,
    priority: str,
    after: str | None,
    where: JobFilter,
    held_task: str = "",
) -> QueuePage:
    jobs = Jobs(app, queue, held_task=held_task)
    page = jobs.page(state, priority=priority, after=after, limit=PAGE_SIZE, where=where)
    applies = tuple(a for a in ("retry", "cancel", "delete", "move") if _applies(a, state))
    held = (jobs.held_task, tuple(jobs.held_tasks()))
    fair = run(app.link, fair_stats_steps([queue]), errors=False).get(queue)
    return QueuePage(
        queue, state, priority, figures(app, queue), page, where, applies, *held, fair=fair
    )


def _applies(action: str, state: str) -> bool:
    try:
        check_action(action, state)
    except Exception:
        return False
    return True


@dataclass
class Bulk:
    """One "all that match" action and how far it got."""

    id: str
    action: str
    queue: str
    state: str
    priority: str
    where: JobFilter
    to: str = ""
    held_task: str = ""
    found: int = 0
    done: int = 0
    handled: int = 0
    finished: bool = False
    error: str = ""
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0

    def run(self, app: App) -> None:
        """Find every matching job, then act on them a batch at a time (the figures move as
        it goes). Errors end it and are shown, never raised."""
        try:
            jobs = Jobs(app, self.queue, held_task=self.held_task)
            rows = []
            for batch in jobs.each(self.state, priority=self.priority, where=self.where):
                rows += batch
                self.found = len(rows)
            for i in range(0, len(rows), 500):
                batch = rows[i : i + 500]
                self.done += jobs.act(self.action, self.state, batch, to=self.to)
                self.handled += len(batch)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.elapsed_s = round(time.monotonic() - self.started, 3)
            self.finished = True


class Bulks:
    """The bulk actions of this dashboard process, by id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, Bulk] = {}

    def start(self, app: App, **spec: Any) -> Bulk:
        bulk = Bulk(id=secrets.token_hex(8), **spec)
        check_action(bulk.action, bulk.state)
        with self.lock:
            if len(self.running) >= MAX_BULKS:
                for key in [k for k, b in self.running.items() if b.finished][: MAX_BULKS // 2]:
                    del self.running[key]
            self.running[bulk.id] = bulk
        threading.Thread(target=bulk.run, args=(app,), name=f"bulk-{bulk.id}", daemon=True).start()
        return bulk

    def get(self, bulk_id: str) -> Bulk | None:
        with self.lock:
            return self.running.get(bulk_id)


__all__ = ["PER_PRIORITY", "STATES", "Bulk", "Bulks", "QueuePage", "figures", "queue_page"]
