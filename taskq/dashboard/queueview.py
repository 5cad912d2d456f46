"""The queue pages (``/queues/<queue>/<state>``): one state's jobs with the state's figures,
and the bulk actions ("all that match") that run in a thread while a page shows "N of M".

The figures are the ones ``taskq inspect --json`` prints for the queue (the same
:meth:`~taskq.broker.reads.Reader.queue` snapshot, and for a fair queue the same read of its
keys); the rows come from
:class:`~taskq.ops.browse.Jobs`, a page at a time.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from taskq.app import App
from taskq.broker.fairreads import fair_stats_steps
from taskq.broker.replies import as_int, flat_pairs, text
from taskq.broker.steps import run
from taskq.errors import ConfigError
from taskq.fairview import FairStats
from taskq.keys import QueueKeys
from taskq.ops import gathered
from taskq.ops.browse import Audit, Jobs, no_audit
from taskq.ops.jobrows import PAUSED, PER_PRIORITY, STATES, JobFilter, JobsPage, check_action

logger = logging.getLogger(__name__)

PAGE_SIZE = 50
BULK_TTL_MS = 86_400_000
"""How long a bulk action's progress stays in Redis after its last update."""
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
    """The task whose held jobs a ``held`` page lists, or the pause whose jobs a ``paused``
    page lists (``?of=``)."""
    held_tasks: tuple[str, ...] = ()
    fair: FairStats | None = None
    """A fair queue's active keys and top keys (None: the queue is not fair)."""


def figures(app: App, queue: str) -> dict[str, int]:
    """The queue's jobs per state, as ``taskq inspect --json`` counts them (paused jobs, bursts
    and batches as ``taskq inspect gathering`` and the pauses' sets hold them)."""
    snap = app.reader.queue(queue)
    out: dict[str, int] = {"scheduled": snap.scheduled, "held": snap.held}
    for s in snap.streams:
        out[f"waiting:{s.priority}"] = s.waiting
        out[f"running:{s.priority}"] = s.pending
        out[f"retrying:{s.priority}"] = s.retrying
    for state in ("waiting", "running", "retrying"):
        out[state] = sum(s_n for k, s_n in out.items() if k.startswith(state + ":"))
    return {**out, **gathered.figures(app.link, queue)}


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
    if state == PAUSED:  # the tabs are the queue's pauses
        held = (jobs.pause_field(), tuple(gathered.pause_fields(app.link, queue)))
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
    audit: Audit = no_audit
    """Records the action once, when it ends, with how many jobs it acted on."""
    found: int = 0
    done: int = 0
    handled: int = 0
    finished: bool = False
    error: str = ""
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0

    def run(self, app: App) -> None:
        """Find every matching job, then act on them a batch at a time (the figures move as
        it goes, in this process and in Redis). Errors end it and are shown, never raised."""
        try:
            jobs = Jobs(app, self.queue, held_task=self.held_task)
            rows = []
            for batch in jobs.each(self.state, priority=self.priority, where=self.where):
                rows += batch
                self.found = len(rows)
                self._save(app)
            for i in range(0, len(rows), 500):
                batch = rows[i : i + 500]
                self.done += jobs.act(self.action, self.state, batch, to=self.to)
                self.handled += len(batch)
                self._save(app)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.elapsed_s = round(time.monotonic() - self.started, 3)
            self._audited()
            self.finished = True
            self._save(app)

    def _save(self, app: App) -> None:
        """The progress in ``<queue>:bulk:<id>`` (one HSET and PEXPIRE per batch of jobs);
        a failed write only leaves other processes a step behind."""
        shown = {
            "action": self.action, "state": self.state, "priority": self.priority,
            "where": json.dumps(self.where.__dict__), "found": self.found, "done": self.done,
            "handled": self.handled, "finished": int(self.finished), "error": self.error,
            "elapsed_ms": int(self.elapsed_s * 1000),
        }  # fmt: skip
        fields = [x for k, v in shown.items() for x in (k, str(v))]
        key = QueueKeys(self.queue).bulk(self.id)
        try:
            app.link.pipeline([("HSET", key, *fields), ("PEXPIRE", key, BULK_TTL_MS)])
        except Exception:
            logger.warning("bulk %s: progress not saved", self.id, exc_info=True)

    @classmethod
    def load(cls, app: App, queue: str, bulk_id: str) -> Bulk | None:
        """A bulk action another process runs (or ran), from Redis; None if unknown. The
        hash is untrusted: an action or state that is not one, or a bad id, reads as none."""
        if not (len(bulk_id) == 16 and all(c in "0123456789abcdef" for c in bulk_id)):
            return None
        raw = app.link.call("HGETALL", QueueKeys(queue).bulk(bulk_id))
        f = {text(k): text(v) for k, v in flat_pairs(raw).items()}
        try:
            check_action(f.get("action", ""), f.get("state", ""))
            where = JobFilter(**json.loads(f.get("where", "{}")))
        except (ConfigError, ValueError, TypeError):
            return None
        found = cls(bulk_id, f["action"], queue, f["state"], f.get("priority", ""), where)
        found.found, found.done = as_int(f.get("found")), as_int(f.get("done"))
        found.handled, found.finished = as_int(f.get("handled")), f.get("finished") == "1"
        found.error, found.elapsed_s = f.get("error", "")[:1000], as_int(f.get("elapsed_ms")) / 1000
        return found

    def _audited(self) -> None:
        try:
            self.audit(self.action, self.queue, self.state, self.done)
        except Exception as exc:  # the jobs were acted on: say the entry is missing
            self.error = self.error or f"not in the audit trail: {type(exc).__name__}: {exc}"


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

    def get(self, bulk_id: str, app: App, queue: str) -> Bulk | None:
        """This process's bulk action, else the one Redis keeps for ``queue`` (run by another
        dashboard process, or by this one before a restart)."""
        with self.lock:
            found = self.running.get(bulk_id)
        return found if found is not None else Bulk.load(app, queue, bulk_id)


__all__ = ["PER_PRIORITY", "STATES", "Bulk", "Bulks", "QueuePage", "figures", "queue_page"]
