"""One consumer (a worker's child, or ``drain`` in-process): fetch, run, record, repeat.

On success the job is acked and deleted with the next fetch; on failure it stays pending for
a retry or moves to the dead-letter stream; nothing is acked before it ran.
"""

from __future__ import annotations

import functools
import logging
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from taskq.broker import Broker, Delivery, Fetched
from taskq.errors import BrokerUnavailable, SoftTimeLimitExceeded
from taskq.task import Task
from taskq.worker.executor import Executor, Prepared
from taskq.worker.finish import Finisher
from taskq.worker.outage import OutageWaiter
from taskq.worker.outcome import Outcome
from taskq.worker.scoreboard import Slot

logger = logging.getLogger(__name__)


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
        self.finisher = Finisher(broker, executor)
        self.name = name
        self.options = options
        self.slot = slot
        self.set_title = set_title or (lambda _state: None)
        self.stopping = False
        self._idle = False
        self._done = 0
        self._outages = OutageWaiter(should_give_up=lambda: self._idle and self.stopping)
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
        self.set_title("idle")
        while not self.stopping:
            batch = self._next_batch()
            if batch is None:
                break
            for i, d in enumerate(batch):
                if self.stopping:
                    self._hand_back(batch[i:])
                    break
                self._process(d)
            self._check_limits()
        if self.finisher.acks:
            self._outages.call(lambda: self._fetch(0))
        self._outages.call(lambda: self.broker.forget_consumer(self.name))

    def _next_batch(self) -> list[Delivery] | None:
        if self._outages.happened:
            self._outages.call(self._reconcile)
            self._outages.happened = False
        fetched = self._outages.call(lambda: self._fetch(self.options.prefetch))
        if fetched.deliveries or self.stopping:
            return fetched.deliveries
        due_in_ms = fetched.next_due_in_ms
        if self.options.burst and (due_in_ms < 0 or due_in_ms > 50):
            return None
        block_ms = self.executor.app.settings.block_ms
        if due_in_ms >= 0:
            block_ms = max(1, min(block_ms, due_in_ms))
        return self._read_blocking(block_ms)

    def _fetch(self, count: int) -> Fetched:
        """Send the queued acks and take up to ``count`` jobs.

        The acks are taken from the finisher only once the call succeeded, so a fetch that
        is retried after an outage sends them again.
        """
        # Jobs fetched less than half a visibility timeout ago cannot have been swept, so their
        # acks skip the ownership check (it costs an XPENDING per batch).
        age_ms = (time.monotonic() - self._fetched_at) * 1000
        fence = age_ms > self.executor.app.settings.visibility_timeout_ms / 2
        fetched = self.broker.fetch(self.name, count, self.finisher.acks, fence_acks=fence)
        self.finisher.take_acks()
        self._fetched_at = time.monotonic()
        return fetched

    def _read_blocking(self, block_ms: int) -> list[Delivery]:
        self._idle = True
        try:
            if self.stopping:
                return []
            batch = self._outages.call(
                lambda: self.broker.read_blocking(self.name, self.options.prefetch, block_ms)
            )
            self._fetched_at = time.monotonic()
        except (_Interrupted, BrokerUnavailable):
            # Stopped while idle (or while Redis was down): the read may have been cut off
            # mid-reply, so drop that connection. Entries it may have delivered stay pending
            # under this consumer and are handed back by the master.
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

    def _process(self, d: Delivery) -> None:
        prepared = self.executor.prepare(d)
        outcome = prepared if isinstance(prepared, Outcome) else self._run(prepared)
        self._outages.call(lambda: self.finisher.record(outcome, owner=self.name))
        if self.slot is not None:
            self.slot.finish(outcome.kind)
        self._done += 1

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

    def _hand_back(self, rest: list[Delivery]) -> None:
        """Return prefetched jobs that did not start, without using up an attempt."""
        for d in rest:
            self._outages.call(functools.partial(self.finisher.hand_back, d, owner=self.name))

    def _reconcile(self) -> None:
        """After an outage, hand back entries pending here that this consumer does not hold.

        Called before the fetch that sends the queued acks (of finished jobs), with no other
        job held. A Redis restart can bring back entries whose ack was lost with the last
        second of writes; without this they would stay pending under a live consumer for good.
        """
        done = {d.entry_id for d, _ in self.finisher.acks}
        for d in self.broker.pending_of(self.name):
            if d.entry_id not in done:
                logger.warning(
                    "handing back %s %s: pending here after a Redis outage", d.stream, d.entry_id
                )
                self.finisher.hand_back(d, owner=self.name)

    def _check_limits(self) -> None:
        o = self.options
        if o.max_tasks and self._done >= o.max_tasks:
            logger.info("recycling after %d jobs (--max-tasks-per-child)", self._done)
            self.stopping = True
        elif o.max_memory_kb and _peak_rss_kb() > o.max_memory_kb:
            logger.info("recycling: memory above %d KiB (--max-memory-per-child)", o.max_memory_kb)
            self.stopping = True


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
