"""Helpers for applications' own test suites: eager mode, and draining a queue in-process.

Two ways to test code that enqueues jobs (see docs/testing.md):

- :func:`eager` (or ``App(eager=True)``, or ``TASKQ_EAGER=1``) runs each task inline when it is
  enqueued: no Redis, no worker, and a task's exception reaches the caller of ``delay()``.
- :func:`drain` runs the real consumer loop in the calling process against a real Redis until
  the queue has nothing ready, and reports what became of every job. Jobs go through the same
  wire format, retry parking and dead-lettering as under ``taskq worker``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from taskq.app import App
from taskq.broker import Broker
from taskq.broker.fairness import claim_fairness
from taskq.config import Settings
from taskq.errors import TaskqError
from taskq.middleware import Middleware
from taskq.worker.aio import serve
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor
from taskq.worker.outcome import DEAD, OK, RETRY, Outcome

__all__ = ["DrainResult", "DrainTimeout", "drain", "eager", "flushdb", "override"]

_names = itertools.count(1)


@dataclass(frozen=True)
class DrainResult:
    """What :func:`drain` ran: one :class:`~taskq.worker.outcome.Outcome` per run, in order.

    A job that failed once and then succeeded shows up twice: once as ``retry``, once as ``ok``.
    """

    outcomes: tuple[Outcome, ...] = ()

    @property
    def ok(self) -> int:
        """Runs that succeeded."""
        return self._count(OK)

    @property
    def retried(self) -> int:
        """Runs that failed and left their job waiting for a retry."""
        return self._count(RETRY)

    @property
    def dead(self) -> int:
        """Runs that moved their job to the dead-letter stream."""
        return self._count(DEAD)

    @property
    def runs(self) -> int:
        return len(self.outcomes)

    def of_task(self, name: str) -> list[Outcome]:
        """The outcomes of one task (by its registered name), in the order they happened."""
        return [o for o in self.outcomes if o.msg is not None and o.msg.task == name]

    def _count(self, kind: str) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    def __str__(self) -> str:
        return f"{self.runs} runs: {self.ok} ok, {self.retried} retry, {self.dead} dead"


class DrainTimeout(TaskqError):
    """:func:`drain` reached its deadline with work left; ``result`` is what it did so far."""

    def __init__(self, message: str, result: DrainResult) -> None:
        super().__init__(message)
        self.result = result


class _Recorder(Middleware):
    """Collects outcomes and stops the consumer at the deadline or the job limit."""

    def __init__(self, deadline: float, max_jobs: int | None) -> None:
        self.deadline = deadline
        self.max_jobs = max_jobs
        self.outcomes: list[Outcome] = []
        self.consumer: Consumer | None = None
        self.timed_out = False

    @property
    def limit_reached(self) -> bool:
        return self.max_jobs is not None and len(self.outcomes) >= self.max_jobs

    def after_job(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        if time.monotonic() > self.deadline:
            self.timed_out = True
        if self.consumer is not None and (self.timed_out or self.limit_reached):
            self.consumer.stopping = True  # the consumer finishes its acks, then returns


def drain(
    app: App,
    *,
    queues: Iterable[str] | None = None,
    max_jobs: int | None = None,
    timeout_s: float = 10.0,
    wait_for_retries: bool = False,
) -> DrainResult:
    """Run the app's jobs in this process, with a real Redis, until none is ready.

    Args:
        queues: the queues to read (default: the app's queue), in priority order.
        max_jobs: stop after this many runs (each retry is a run).
        timeout_s: give up after this long; checked between jobs, since a running task is
            not interrupted (time limits are enforced by ``taskq worker``'s master only).
        wait_for_retries: also wait for failed jobs whose retry, and delayed jobs
            (``countdown``/``eta``) whose time, comes before the deadline. Without it, drain
            stops as soon as nothing is ready now, like ``rq --burst``.

    Returns:
        The outcome of every run, in order.

    Raises:
        DrainTimeout: the deadline passed while jobs were still running, ready or (with
            ``wait_for_retries``) due.
        ValueError: ``max_jobs`` is below 1.
        ConfigError: a queue the app does not name fair has jobs staged by fairness (as a
            worker refuses it); a fair one it marks fair, as a worker's start does.
    """
    if max_jobs is not None and max_jobs < 1:
        raise ValueError("max_jobs must be at least 1")
    names = tuple(queues) if queues is not None else (app.settings.queue,)
    deadline = time.monotonic() + timeout_s
    recorder = _Recorder(deadline, max_jobs)
    broker = app.broker_for(names)
    app.set_current()  # as under `taskq worker`: shared tasks enqueue through this app
    app.middleware.append(recorder)
    try:
        broker.ensure_groups()
        claim_fairness(broker.link, broker.queues, broker.fair)  # as a worker's start does
        while True:
            # The worker masters' housekeeping, done here: due delayed jobs and retries move
            # into their streams before each burst.
            broker.promote(force=True)
            _burst(app, broker, recorder)
            result = DrainResult(tuple(recorder.outcomes))
            if recorder.limit_reached:
                return result
            if recorder.timed_out:
                raise DrainTimeout(f"drain timed out after {timeout_s}s; {result}", result)
            due_in_ms = broker.promote(force=True)
            if due_in_ms == 0:
                continue  # came due meanwhile, and is in its stream now
            if due_in_ms < 0 or not wait_for_retries:
                # That promote may have moved the last one (then nothing is left to wait
                # for): run what it made ready before returning.
                _burst(app, broker, recorder)
                if len(recorder.outcomes) == len(result.outcomes):
                    return result
                continue
            wait_s = due_in_ms / 1000
            if time.monotonic() + wait_s > deadline:
                raise DrainTimeout(
                    f"drain timed out after {timeout_s}s: a job is due in {wait_s:.1f}s; {result}",
                    result,
                )
            time.sleep(wait_s)  # nothing is ready before then
    finally:
        app.middleware.remove(recorder)
        broker.disconnect()


def _burst(app: App, broker: Broker, recorder: _Recorder) -> None:
    """One consumer run in burst mode: it returns when nothing is ready (or when stopped)."""
    left = 0 if recorder.max_jobs is None else recorder.max_jobs - len(recorder.outcomes)
    consumer = Consumer(
        broker,
        Executor(app),
        name=f"drain:{socket.gethostname()}:{os.getpid()}:{next(_names)}",
        options=ConsumerOptions(burst=True, max_tasks=left),
    )
    recorder.consumer = consumer
    serve(consumer)


@contextlib.contextmanager
def override(app: App, **changes: Any) -> Iterator[App]:
    """Change some of ``app``'s settings inside the ``with`` block, e.g. a test Redis.

    The app's connection is closed on the way in and out, so a new ``redis_url`` takes
    effect. Meant for a module-level app that application code imports.

    Raises:
        ConfigError: an unknown setting name or an invalid value.
    """
    saved = app.settings
    changed = Settings.build(**{**dataclasses.asdict(saved), **changes})
    app.close()
    app.settings = changed
    try:
        yield app
    finally:
        app.close()
        app.settings = saved


@contextlib.contextmanager
def eager(app: App) -> Iterator[App]:
    """Run ``app``'s tasks inline at enqueue time inside the ``with`` block.

    Arguments are still encoded, so a job that could not be sent fails here too. The task's
    exceptions (``Retry`` included) reach the caller; there are no retries, delays (``countdown``
    and ``eta`` run at once) or time limits, and return values are discarded.
    """
    with override(app, eager=True):
        yield app


def flushdb(app: App) -> None:
    """Empty the database of the app's Redis (FLUSHDB): only for a Redis kept for tests."""
    app.link.call("FLUSHDB")
