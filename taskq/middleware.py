"""Lifecycle hooks: subclass Middleware, override what you need, ``app.add_middleware(m)``.

A hook that raises is logged with the middleware's name and the pipeline carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskq.worker.outcome import Outcome

logger = logging.getLogger(__name__)


class Middleware:
    """No-op hooks, called in the process named by each method."""

    def worker_start(self, queues: Sequence[str]) -> None:
        """In the worker's master, before it forks its children."""

    def child_start(self) -> None:
        """In each child, right after the fork."""

    def after_job(self, outcome: Outcome) -> None:
        """Once a job's fate (ok, retry or dead) is settled in Redis.

        In the child that ran the job; in the master for a job whose child died under it
        (open connections lazily there with care: the master forks again later).
        """

    def worker_stop(self) -> None:
        """In the master, after the last child exited."""


def emit(middleware: Sequence[Middleware], hook: str, *args: Any) -> None:
    """Call ``hook`` on every middleware; log, never raise, a hook's error."""
    for m in middleware:
        try:
            getattr(m, hook)(*args)
        except Exception:
            logger.exception("middleware %s.%s failed", type(m).__name__, hook)
