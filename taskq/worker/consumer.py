"""One consumer process: fetch (acking the previous jobs in the same call), run, repeat.

On success the job is acked and deleted with the next fetch; on failure it stays pending for
a retry (``park``) or moves to the dead-letter stream; nothing is acked before it ran.
"""

from __future__ import annotations

import functools
import logging
import random
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, TypeVar

import redis

from taskq.broker import Broker, Delivery, Fetched
from taskq.errors import SoftTimeLimitExceeded
from taskq.executor import OK, Executor, Outcome, Prepared
from taskq.scoreboard import Slot
from taskq.settle import hand_back, settle
from taskq.task import Task

logger = logging.getLogger(__name__)
T = TypeVar("T")

OUTAGE_ERRORS = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
)
"""Replies that mean "Redis cannot take this now": wait and try again, keep what is held."""


def is_outage(exc: BaseException) -> bool:
    if isinstance(exc, OUTAGE_ERRORS):
        return True
    # Redis 6.2 reports an OOM inside a script as a plain script error.
    text = str(exc)
    return isinstance(exc, redis.ResponseError) and (
        text.startswith(("BUSY ", "MASTERDOWN")) or "OOM command not allowed" in text
    )


class _Interrupted(Exception):
    """Raised by the stop signal handler to leave an idle blocking read at once."""


@dataclass(frozen=True)
class ConsumerOptions:
    """How one consumer behaves (see ``taskq worker --help``).

    ``soft_time_limits``: raise :class:`SoftTimeLimitExceeded` in tasks that run past their
    soft limit (a SIGALRM timer: only in a worker's child, which owns its signals).
    """

    prefetch: int = 1
    max_tasks: int = 0
    max_memory_kb: int = 0
    burst: bool = False
    soft_time_limits: bool = False


class Consumer:
    """Runs jobs from ``broker`` until asked to stop.

    Args:
        name: the consumer name in the group (unique per process).
        slot: the child's scoreboard slot, or None when run in-process.
        set_title: process-title setter, or None.
    """

    def __init__(
        self,
        broker: Broker,
        executor: Executor,
        *,
        name: str,
        options: ConsumerOptions,
        slot: Slot | None = None,
        set_title: Callable[[str], None] | None = None,
    ) -> None:
        self.broker = broker
        self.executor = executor
        self.name = name
        self.options = options
        self.slot = slot
        self.set_title = set_title or (lambda _state: None)
        self.stopping = False
        self._idle = False
        self._done = 0
        self._outage_since = 0.0
        self._reconcile_due = False
        self._fetched_at = time.monotonic()
        self._task_code: CodeType | None = None

    # -- signals -------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: finish the current job, then stop. SIGALRM: soft time limit."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_soft_limit)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self._idle:
            self._idle = False  # raise once, even if a second signal follows at once
            raise _Interrupted()

    def _on_soft_limit(self, signum: int, frame: FrameType | None) -> None:
        # Only inside the task's own code: a timer that fires as the task returns must not
        # turn its success into a failure, nor hit taskq's bookkeeping after it.
        if self._task_code is not None and _runs(frame, self._task_code):
            raise SoftTimeLimitExceeded("soft time limit exceeded")

    # -- main loop -----------------------------------------------------------------------

    def run(self) -> None:
        """Serve until stopped (or, in burst mode, until nothing is ready)."""
        acks: list[tuple[Delivery, bool]] = []
        self.set_title("idle")
        while not self.stopping:
            batch, acks = self._next_batch(acks), []
            if batch is None:
                break
            for i, d in enumerate(batch):
                if self.stopping:
                    self._hand_back(batch[i:])
                    break
                outcome = self._process(d)
                if outcome.kind == OK:
                    acks.append((d, outcome.failed_before))
            self._check_limits()
        if acks:
            self._retrying(functools.partial(self._fetch, 0, acks))
        self._retrying(lambda: self.broker.forget_consumer(self.name))

    def _next_batch(self, acks: list[tuple[Delivery, bool]]) -> list[Delivery] | None:
        if self._reconcile_due:
            self._retrying(functools.partial(self._reconcile, {d.entry_id for d, _ in acks}))
            self._reconcile_due = False
        fetched = self._retrying(functools.partial(self._fetch, self.options.prefetch, acks))
        if fetched.deliveries or self.stopping:
            return fetched.deliveries
        due_in_ms = fetched.next_due_in_ms
        if self.options.burst and (due_in_ms < 0 or due_in_ms > 50):
            return None
        block_ms = self.executor.app.settings.block_ms
        if due_in_ms >= 0:
            block_ms = max(1, min(block_ms, due_in_ms))
        return self._read_blocking(block_ms)

    def _fetch(self, count: int, acks: list[tuple[Delivery, bool]]) -> Fetched:
        # Jobs fetched less than half a visibility timeout ago cannot have been swept, so their
        # acks skip the ownership check (it costs an XPENDING per batch).
        age_ms = (time.monotonic() - self._fetched_at) * 1000
        fence = age_ms > self.executor.app.settings.visibility_timeout_ms / 2
        fetched = self.broker.fetch(self.name, count, acks, fence_acks=fence)
        self._fetched_at = time.monotonic()
        return fetched

    def _read_blocking(self, block_ms: int) -> list[Delivery]:
        self._idle = True
        try:
            if self.stopping:
                return []
            batch = self._retrying(
                lambda: self.broker.read_blocking(self.name, self.options.prefetch, block_ms)
            )
            self._fetched_at = time.monotonic()
        except _Interrupted:
            # The read was cut off mid-reply: drop that connection. Entries it may have
            # delivered stay pending under this consumer and are handed back by the master.
            self.broker.disconnect()
            return []
        finally:
            self._idle = False
        # XREADGROUP's COUNT is per stream: a read that woke on several streams at once
        # brought up to `prefetch` jobs from each. Keep the best `prefetch` (the batch is in
        # priority order) and hand the others back at once, for any idle child to take.
        keep, extra = batch[: self.options.prefetch], batch[self.options.prefetch :]
        self._hand_back(extra)
        return keep

    def _process(self, d: Delivery) -> Outcome:
        prepared = self.executor.prepare(d)
        if isinstance(prepared, Outcome):
            self._settle(prepared)
            return prepared
        outcome = self._run(prepared)
        self._settle(outcome)
        return outcome

    def _run(self, p: Prepared) -> Outcome:
        self.set_title(f"running {p.msg.task} {p.delivery.entry_id}")
        if self.slot is not None:
            index = self.broker.stream_position[p.delivery.stream]
            self.slot.start(index, p.delivery.entry_id, p.msg.task, p.msg.id, p.hard_limit_s)
        soft_s = p.soft_limit_s if self.options.soft_time_limits else None
        self._task_code = _code_of(p.task)
        if soft_s:
            signal.setitimer(signal.ITIMER_REAL, soft_s)
        try:
            return self.executor.execute(p)
        finally:
            if soft_s:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self._task_code = None
            self.set_title("idle")

    def _settle(self, o: Outcome) -> None:
        """Record the job's fate (a success is acked by the next fetch) and count it."""
        self._retrying(functools.partial(settle, self.broker, self.executor, o, owner=self.name))
        if self.slot is not None:
            self.slot.finish(o.kind)
        self._done += 1

    def _hand_back(self, rest: list[Delivery]) -> None:
        """Return prefetched jobs that did not start, without using up an attempt."""
        for d in rest:
            self._retrying(
                functools.partial(hand_back, self.broker, self.executor, d, owner=self.name)
            )

    def _reconcile(self, done: set[str]) -> None:
        """After an outage, hand back entries pending here that this consumer does not hold.

        Called before the fetch that acks ``done`` (finished jobs), with no other job held.
        A Redis restart can bring back entries whose ack was lost with the last second of
        writes; without this they would stay pending under a live consumer for good.
        """
        for d in self.broker.pending_of(self.name):
            if d.entry_id not in done:
                logger.warning(
                    "handing back %s %s: pending here after a Redis outage", d.stream, d.entry_id
                )
                hand_back(self.broker, self.executor, d, owner=self.name)

    def _check_limits(self) -> None:
        o = self.options
        if o.max_tasks and self._done >= o.max_tasks:
            logger.info("recycling after %d jobs (--max-tasks-per-child)", self._done)
            self.stopping = True
        elif o.max_memory_kb and _peak_rss_kb() > o.max_memory_kb:
            logger.info("recycling: memory above %d KiB (--max-memory-per-child)", o.max_memory_kb)
            self.stopping = True

    # -- Redis outages -------------------------------------------------------------------

    def _retrying(self, call: Callable[[], T]) -> T:
        """Run a broker call, waiting out Redis outages with capped, jittered backoff."""
        delay = 0.05
        while True:
            try:
                result = call()
            except redis.RedisError as exc:
                if not is_outage(exc):
                    raise
                self._note_outage(exc)
                if self._idle and self.stopping:
                    raise _Interrupted() from None
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 5.0)
                continue
            if self._outage_since:
                logger.warning("Redis is back after %.1fs", time.monotonic() - self._outage_since)
                self._outage_since = 0.0
            return result

    def _note_outage(self, exc: BaseException) -> None:
        self._reconcile_due = True
        if not self._outage_since:
            self._outage_since = time.monotonic()
            logger.warning("Redis unavailable (%s); retrying with backoff", exc)


def _code_of(task: Task[..., Any]) -> CodeType:
    """The code object whose frame marks "inside the task" (the function's, else Task.run's)."""
    code = getattr(task.fn, "__code__", None)
    return code if isinstance(code, CodeType) else Task.run.__code__


def _runs(frame: FrameType | None, code: CodeType) -> bool:
    """Whether ``code`` is running in ``frame`` or one of its callers."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
