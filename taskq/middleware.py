"""Lifecycle hooks: subclass Middleware, override what you need, ``app.add_middleware(m)``.

A hook that raises is logged with the middleware's name and the pipeline carries on. Only
hooks a middleware overrides are called, so an app without middleware pays nothing per job.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskq.context import JobContext
    from taskq.message import Message
    from taskq.worker.outcome import Outcome

logger = logging.getLogger(__name__)


class Middleware:
    """No-op hooks, called in the process named by each method."""

    def worker_start(self, queues: Sequence[str]) -> None:
        """In the worker's master, before it forks its children."""

    def child_start(self) -> None:
        """In each child, right after the fork."""

    def child_stop(self) -> None:
        """In each child that ran ``child_start``, as it exits (flush buffers here): after its
        last job, or after it crashed; not when it is killed."""

    def before_enqueue(self, msg: Message) -> Message:
        """In the producer, before a job is encoded: return it, or a copy with ``headers``
        (``msg._replace(headers={...})``) that the worker's hooks read from ``job.headers``.
        Jobs the worker writes itself (retries, workflow steps) keep the headers they had."""
        return msg

    def around_job(self, job: JobContext, run: Callable[[], Outcome]) -> Outcome:
        """In the child, around one run: call ``run()`` once and return its outcome.

        The task runs inside (``current_job()`` is set there), so a context opened here (a
        span, an error-reporting scope, a database connection check) is current in the
        task. The outcome says what became of the run (``kind``: ok, retry, dead, ...) and
        carries the exception the task raised, if any; it is applied to Redis afterwards.
        """
        return run()

    async def around_async_job(
        self, job: JobContext, run: Callable[[], Awaitable[Outcome]]
    ) -> Outcome:
        """:meth:`around_job` for ``async def`` tasks: ``await run()`` once, return its outcome.

        It runs on the child's event loop, in the job's own asyncio task (so a context
        variable set here is seen by this job only). ``around_job`` is not called for async
        jobs: a sync hook cannot wrap an ``await``.
        """
        return await run()

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


def overriding(middleware: Sequence[Middleware], hook: str) -> list[Middleware]:
    """The middleware whose class overrides ``hook`` (the others' hook does nothing)."""
    default = getattr(Middleware, hook)
    return [m for m in middleware if getattr(type(m), hook, default) is not default]


class Hooks:
    """:func:`overriding` for one list of middleware, worked out again only when the list
    changes (a per-job lookup must cost nothing when no middleware wants the hook)."""

    __slots__ = ("_found", "_hook", "_middleware", "_seen")

    def __init__(self, middleware: list[Middleware], hook: str) -> None:
        self._middleware, self._hook = middleware, hook
        self._seen: list[Middleware] = []
        self._found: list[Middleware] = []

    def __call__(self) -> list[Middleware]:
        if self._seen != self._middleware:
            self._seen = list(self._middleware)
            self._found = overriding(self._seen, self._hook)
        return self._found


def enqueue_through(middleware: Sequence[Middleware], msg: Message) -> Message:
    """``msg`` after every ``before_enqueue`` hook; a hook that raises is logged and skipped."""
    for m in middleware:
        try:
            msg = m.before_enqueue(msg)
        except Exception:
            logger.exception("middleware %s.before_enqueue failed", type(m).__name__)
    return msg


def run_around(
    middleware: Sequence[Middleware], job: JobContext, run: Callable[[], Outcome]
) -> Outcome:
    """``run()`` inside every ``around_job`` hook, the first outermost. A hook that raises is
    logged; the run still happens exactly once, and its outcome is returned."""
    if not middleware:
        return run()
    outer, inner = middleware[0], middleware[1:]
    done: list[Outcome] = []

    def rest() -> Outcome:
        if not done:
            done.append(run_around(inner, job, run))
        return done[0]

    try:
        outcome = outer.around_job(job, rest)
    except Exception:
        logger.exception("middleware %s.around_job failed", type(outer).__name__)
        return rest()
    return outcome if done else rest()


async def arun_around(
    middleware: Sequence[Middleware], job: JobContext, run: Callable[[], Awaitable[Outcome]]
) -> Outcome:
    """:func:`run_around` for async jobs, with every ``around_async_job`` hook."""
    if not middleware:
        return await run()
    outer, inner = middleware[0], middleware[1:]
    done: list[Outcome] = []

    async def rest() -> Outcome:
        if not done:
            done.append(await arun_around(inner, job, run))
        return done[0]

    try:
        outcome = await outer.around_async_job(job, rest)
    except Exception:
        logger.exception("middleware %s.around_async_job failed", type(outer).__name__)
        return await rest()
    return outcome if done else await rest()
