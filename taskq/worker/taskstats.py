"""Per-task run summaries for the dashboard's Tasks page (``taskq worker --task-stats``): a
middleware that counts each run in its child's memory and merges the counts into Redis
(:mod:`taskq.broker.taskstats`) at most once per :data:`FLUSH_S`, never per job.

A run that ends while a write is not due is written by the next run's hook, or by a timer
thread of the child one interval later, or when the child stops: nothing counted is kept
back for longer than about one interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from taskq.broker import taskstats
from taskq.broker.link import Link
from taskq.middleware import Middleware
from taskq.worker.outcome import CANCELLED, DEAD, EXPIRED, OK, RETRY, Outcome

logger = logging.getLogger(__name__)

FLUSH_S = 1.0
"""The longest a child keeps runs it counted before writing them."""


class TaskStats(Middleware):
    """Counts every run that ended (succeeded or raised) per queue and task.

    Args:
        link: opens the child's own link to Redis (called in the child, after the fork).
    """

    def __init__(self, link: Callable[[], Link], *, flush_s: float = FLUSH_S) -> None:
        self.open_link = link
        self.flush_s = flush_s
        self._link: Link | None = None
        self._pending: dict[str, dict[str, taskstats.Summary]] = {}
        self._lock = threading.Lock()
        self._written = time.monotonic()
        self._timer: threading.Timer | None = None

    def after_job(self, outcome: Outcome) -> None:
        if outcome.kind in (EXPIRED, CANCELLED) or outcome.msg is None:
            return  # it did not run to an end
        if outcome.kind not in (OK, RETRY, DEAD) or outcome.error_type == "Rejected":
            return
        failed, retried = outcome.kind != OK, outcome.kind == RETRY
        with self._lock:
            tasks = self._pending.setdefault(outcome.delivery.queue, {})
            summary = tasks.setdefault(outcome.msg.task, taskstats.Summary())
            summary.add(outcome.duration_s * 1000, failed=failed, retried=retried)
            due = time.monotonic() - self._written >= self.flush_s
            if not due and self._timer is None:
                self._timer = threading.Timer(self.flush_s, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if due:
            self.flush()

    def child_stop(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Write what was counted since the last write (a failed write is logged; its runs
        are not counted again)."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._written = time.monotonic()
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if not pending:
            return
        try:
            if self._link is None:
                self._link = self.open_link()
            now = self._link.call("TIME")
            now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
            for queue, summaries in pending.items():
                taskstats.write(self._link, [queue], now_ms, summaries)
        except Exception:
            logger.warning("task statistics not written", exc_info=True)
