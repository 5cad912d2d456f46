"""The async runner: a consumer's loop for an app with ``async def`` tasks, and
:func:`serve`, the one place a consumer's loop is chosen.

One event loop per child, made when the child starts serving (only in children of an app
that has async tasks). The child runs up to ``async_concurrency`` async jobs at once, each in
an asyncio task of its own (so ``current_job()``, a context variable, is per job), and fetches
only as many jobs as it has free places: prefetch stays honest, and the fetch script's strict
priority order is unchanged.

A sync job runs alone, as in a sync child: when the child meets one, it starts nothing more
and lets its running coroutines finish, then runs the sync job in the loop's thread, with the
sync job's SIGALRM soft limit and signal cancellation, and hands back the jobs fetched after
it (they would wait behind it); after a sync job it fetches one job at a time until it meets
an async one. (Not in a thread beside the loop: a thread can have neither the soft limit nor
the cancellation, and CPU-bound code there would slow every coroutine anyway.)

Redis calls (the fetch with its acks, retries, dead letters) are the consumer's blocking
ones, made from the loop's thread: each is one short round trip. The child blocks in Redis
(``XREADGROUP BLOCK``) only when no coroutine runs; while some run and nothing is ready it
polls, backing off from ``POLL_MIN_S`` to ``POLL_MAX_S``, and fetches again as soon as a job
ends (which also sends its ack).

Each running job has an entry in the child's scoreboard slot, so the master enforces its hard
time limit and its cancellation on its own, and knows, if the child dies, which jobs ran.
Leases are the master's (it renews every entry pending under the child), so a coroutine that
blocks the loop with CPU work delays the others but never causes a second run. A soft time
limit is a loop timer that raises :class:`~taskq.errors.SoftTimeLimitExceeded` inside the
job's coroutine (see :mod:`taskq.worker.interrupt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Sequence

from taskq.broker import Delivery
from taskq.errors import JobCancelled, SoftTimeLimitExceeded
from taskq.worker.checkpoints import checkpointing
from taskq.worker.consumer import Consumer
from taskq.worker.executor import Prepared
from taskq.worker.interrupt import interrupt, pending
from taskq.worker.outcome import Outcome

logger = logging.getLogger(__name__)

POLL_MIN_S = 0.005
POLL_MAX_S = 0.1
"""While coroutines run and no job is ready, fetch again after this long (doubling)."""
TITLE_EVERY_S = 0.1


def serve(consumer: Consumer) -> None:
    """Serve until stopped (or, in burst mode, until nothing is ready), then send the last
    acks and leave the group: on an event loop for an app with ``async def`` tasks (unless
    its ``async_concurrency`` is 0), else in the consumer's sync loop."""
    concurrency = consumer.options.async_concurrency
    with checkpointing(consumer):  # the store of taskq.step() and taskq.iterate()
        if concurrency > 0 and consumer.executor.has_async_tasks:
            AsyncRunner(consumer, concurrency).run()
        else:
            consumer.run_sync()
    consumer.leave()


class _Run:
    """One async job in flight."""

    __slots__ = ("at", "begun", "prepared", "started", "task", "timer")

    def __init__(self, at: int, prepared: Prepared) -> None:
        self.at = at
        self.prepared = prepared
        self.begun = False
        """Its asyncio task has started (one cancelled before that would skip its cleanup)."""
        self.started = time.perf_counter()
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None


class AsyncRunner:
    """Serves a consumer's jobs on one event loop (see the module docstring)."""

    def __init__(self, consumer: Consumer, concurrency: int) -> None:
        self.consumer = consumer
        self.concurrency = max(1, concurrency)
        self.running: dict[int, _Run] = {}
        self._free = list(range(self.concurrency - 1, -1, -1))  # entries; pop() takes 0 first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._poll_s = POLL_MIN_S
        self._after_sync = False
        """The last job was sync: fetch one at a time until an async job comes."""
        self._titled_at = 0.0

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> None:
        """Serve until the consumer stops; running coroutines finish first.

        Called where an event loop already runs (``drain()`` in an async test), it serves
        from a thread of its own meanwhile: a thread can run only one loop at a time.
        """
        if not _loop_running():  # (not inside the except: jobs' errors would chain to it)
            self._run_loop()
            return
        thread = threading.Thread(target=self._run_loop, name="taskq-async-runner")
        thread.start()
        thread.join()

    def _run_loop(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self.consumer.on_cancel_signal = self._cancel_signalled
        try:
            loop.run_until_complete(self._serve())
        finally:
            self.consumer.on_cancel_signal = None
            asyncio.set_event_loop(None)
            loop.close()

    async def _serve(self) -> None:
        c = self.consumer
        self._changed = asyncio.Event()
        c.set_title("idle")
        while not c.stopping:
            if len(self.running) >= self.concurrency:
                await self._wait_for_change(POLL_MAX_S)
                continue
            batch = self._fetch(self.concurrency - len(self.running))
            if batch is None:
                break  # burst mode, nothing left
            if not batch and self.running:
                await self._wait_for_change(self._poll_s)
                self._poll_s = min(POLL_MAX_S, self._poll_s * 2)
            c.starts.fetched(batch, c.fetched_at)
            for i, d in enumerate(batch):
                if c.stopping:
                    c.hand_back(batch[i:])
                    break
                sync = self._start(d, batch[i + 1 :])
                if sync is not None:
                    c.hand_back(batch[i + 1 :])  # they would wait behind the sync job
                    await self._run_sync(d, sync)
                    break
            c.check_limits()
            self._show(force=not self.running)
        await self._drain()

    def _fetch(self, room: int) -> list[Delivery] | None:
        """Up to ``room`` jobs; blocks in Redis only when no coroutine runs."""
        c = self.consumer
        if not self.running:
            self._poll_s = POLL_MIN_S
            return c.next_batch(1 if self._after_sync else room)
        return c.keep(c.poll(room, held=self._held).deliveries, room)

    def _held(self) -> set[str]:
        return {r.prepared.delivery.entry_id for r in self.running.values()}

    async def _wait_for_change(self, timeout_s: float) -> None:
        """Until a job ends (or ``timeout_s``); the loop runs the coroutines meanwhile."""
        changed = self._changed
        assert changed is not None
        if not changed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout_s)
        changed.clear()

    async def _drain(self) -> None:
        """Let every running coroutine finish (the master cuts a warm shutdown short at
        ``--grace`` with SIGKILL; what still runs then is handed back)."""
        while self.running:
            await self._wait_for_change(POLL_MAX_S)
            self._show()

    # -- one job -------------------------------------------------------------------------

    def _start(self, d: Delivery, rest: Sequence[Delivery]) -> Prepared | None:
        """Start one async job (or record a delivery that cannot run); a sync job is
        returned instead, for :meth:`_run_sync`. ``rest``: the batch after it, which the
        start check (cancelled, paused) reads with it, as in the sync loop."""
        c = self.consumer
        prepared = c.executor.prepare(d)
        if isinstance(prepared, Outcome):
            c.record(prepared)
            return None
        if not prepared.task.is_async:
            return prepared
        self._after_sync = False
        prepared = c.starts.check(prepared, rest)  # cancelled, paused, a run-time limit
        if isinstance(prepared, Outcome):  # cancelled, or paused: set aside
            c.record(prepared)
            return None
        if not c.limits_allow(prepared):
            return None  # deferred, or waiting for a running slot
        at = self._free.pop()
        run = _Run(at, prepared)
        if c.slot is not None:
            msg = prepared.msg
            index = c.broker.stream_position[d.stream]
            hard_s, recorded = prepared.hard_limit_s, d.recorded
            c.slot.start(index, d.entry_id, msg.task, msg.id, hard_s, at=at, recorded=recorded)
        loop = self._loop
        assert loop is not None
        run.task = loop.create_task(self._job(run))
        soft_s = prepared.soft_limit_s if c.options.soft_time_limits else None
        if soft_s:
            run.timer = loop.call_later(soft_s, self._soft_limit, run)
        self.running[at] = run
        self._poll_s = POLL_MIN_S
        return None

    async def _run_sync(self, d: Delivery, prepared: Prepared) -> None:
        """A sync job runs alone, as in a sync child: once the coroutines have finished."""
        await self._drain()
        self._show(force=True)
        self.consumer.process(d, prepared=prepared)
        self._after_sync = True

    def _soft_limit(self, run: _Run) -> None:
        if run.begun and run.task is not None:
            interrupt(run.task, SoftTimeLimitExceeded("soft time limit exceeded"))
        elif run.task is not None and not run.task.done():  # not started yet: try again soon
            loop = self._loop
            assert loop is not None
            run.timer = loop.call_later(0.001, self._soft_limit, run)

    async def _job(self, run: _Run) -> None:
        c = self.consumer
        p = run.prepared
        run.begun = True
        try:
            outcome = await c.executor.aexecute(p)
        except asyncio.CancelledError:  # interrupted outside the task's own code
            task = run.task
            exc = pending(task) if task is not None else None
            cause = exc if isinstance(exc, Exception) else JobCancelled(p.msg.id, "cancelled")
            outcome = c.executor.interrupted(p, cause, time.perf_counter() - run.started)
        finally:
            if run.timer is not None:
                run.timer.cancel()
            if run.task is not None:
                pending(run.task)  # an interruption that came too late
        try:
            c.record(outcome)
            if c.slot is not None:
                c.slot.finish(outcome.kind, at=run.at, ran_ms=outcome.duration_s * 1000)
        finally:
            del self.running[run.at]
            self._free.append(run.at)
            c.jobs_done += 1
            assert self._changed is not None
            self._changed.set()

    # -- signals -------------------------------------------------------------------------

    def _cancel_signalled(self) -> None:
        """CANCEL_SIGNAL while async jobs run (in the signal handler): look at the slot's
        cancel flags on the loop, soon."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._interrupt_cancelled)

    def _interrupt_cancelled(self) -> None:
        slot = self.consumer.slot
        if slot is None:
            return
        for run in list(self.running.values()):
            if run.begun and run.task is not None and slot.cancel_requested(run.at):
                msg = run.prepared.msg
                if interrupt(run.task, JobCancelled(msg.id, "cancelled while running")):
                    logger.info("%s[%s] cancelled: interrupting it", msg.task, msg.id)

    # -- the process title ---------------------------------------------------------------

    def _show(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._titled_at < TITLE_EVERY_S:
            return
        self._titled_at = now
        n = len(self.running)
        self.consumer.set_title(f"running {n}/{self.concurrency} async jobs" if n else "idle")


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
