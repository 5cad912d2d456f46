"""One consumer (a worker's child, or ``drain`` in-process): fetch, run, record, repeat.

On success the job is acked with the next fetch; on failure it moves to its retry set or to
the dead-letter stream; nothing is acked before it ran.

Adaptive prefetch (the default). A child takes several jobs per fetch only while the jobs it
runs are short: each batch is sized so that, at the pace of its recent jobs, it takes about
``BATCH_BUDGET_MS`` (one job after a slow one, up to 64 of no-op jobs). The child lists its
batch in the scoreboard, and when a job runs longer than the master's hand-back threshold,
the master hands the rest of the batch back for idle children (the child skips them). So no
short job waits in one child behind a long one while another child is free. ``--prefetch N``
fixes the batch size instead, with no hand-back.
"""

from __future__ import annotations

import functools
import logging
import resource
import signal
import time
from collections.abc import Callable, Collection, Sequence
from types import CodeType, FrameType
from typing import NamedTuple

from taskq.broker import Broker, Delivery, Fetched
from taskq.context import current_job
from taskq.errors import BrokerUnavailable, JobCancelled, SoftTimeLimitExceeded
from taskq.worker.cancels import StartCheck
from taskq.worker.executor import Executor, Prepared
from taskq.worker.finish import Finisher
from taskq.worker.interrupt import code_of, runs_in
from taskq.worker.lifeline import CANCEL_SIGNAL
from taskq.worker.limiter import Limiter, same_task_next
from taskq.worker.outage import OutageWaiter
from taskq.worker.outcome import OK, Outcome
from taskq.worker.scoreboard import MAX_BATCH, Slot

logger = logging.getLogger(__name__)

DEFAULT_ASYNC_CONCURRENCY = 16
"""Async jobs one child runs at once unless ``--async-concurrency`` says otherwise."""
BATCH_BUDGET_MS = 20.0
"""Adaptive prefetch sizes a batch to take about this long at the pace of recent jobs."""
PACE_SMOOTHING = 0.2
"""Weight of the newest job in the pace; a slower job than the pace counts at once."""
TRIM_EVERY_ACKS = 1_000
TRIM_EVERY_S = 0.05
"""A fetch also trims finished jobs from the streams after this many acks or this long. A
trim is a script call that costs Redis about as much as a 64-job read, so it runs at most
every 50 ms per busy consumer, not with every batch; finished entries wait that long."""


class _Interrupted(Exception):
    """Raised by the stop signal handler to leave an idle blocking read at once."""


class ConsumerOptions(NamedTuple):
    """How one consumer behaves (see ``taskq worker --help``).

    ``prefetch``: jobs per fetch; None (the default) adapts it (see the module docstring).
    ``soft_time_limits``: raise :class:`SoftTimeLimitExceeded` in tasks that run past their
    soft limit (a SIGALRM timer for sync tasks: only in a worker's child, which owns its
    signals; a loop timer for async ones).
    """

    prefetch: int | None = None
    max_tasks: int = 0
    max_memory_kb: int = 0
    burst: bool = False
    soft_time_limits: bool = False
    async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY
    """Async jobs run at once, in a consumer of an app with ``async def`` tasks
    (:mod:`taskq.worker.aio`)."""


class Consumer:
    """Runs jobs from ``broker`` until asked to stop, in the loop that
    :func:`taskq.worker.aio.serve` chooses: its public members are what both loops drive.

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
        settings = executor.app.settings
        self.limiter = Limiter(broker, name, settings)
        self.name = name
        self.options = options
        self.slot = slot
        self.set_title = set_title or (lambda _state: None)
        self.stopping = False
        self._idle = False
        self.jobs_done = 0
        """Jobs run to an outcome here (``--max-tasks-per-child`` counts them)."""
        self._outages = OutageWaiter(should_give_up=lambda: self._idle and self.stopping)
        self.starts = StartCheck(broker, self._outages)
        self.finisher.limits = self.starts.pauses.options_for
        self.fetched_at = time.monotonic()
        self._task_code: CodeType | None = None
        self._pace_ms = BATCH_BUDGET_MS  # until measured: one job per fetch
        self._acks_since_trim = 0
        self._trimmed_at = time.monotonic()
        self._dirty: set[str] = set()
        self._ahead: dict[tuple[str, str], Prepared] = {}
        """Jobs of the current batch decoded ahead of their turn (for a batched limit call)."""
        self._settled: set[tuple[str, str]] = set()
        """Jobs of the current batch that such a call deferred (or found lost) already."""
        self.on_cancel_signal: Callable[[], None] | None = None
        """Set by the async runner: CANCEL_SIGNAL while no sync job runs."""

    # -- signals -------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: finish the current job, then stop. SIGALRM: soft time limit.
        SIGUSR1: the master was asked to cancel the running job."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_soft_limit)
        signal.signal(CANCEL_SIGNAL, self._on_cancel)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self._idle:
            self._idle = False  # raise once, even if a second signal follows at once
            raise _Interrupted()

    def _on_soft_limit(self, signum: int, frame: FrameType | None) -> None:
        # Only inside the task's own code: a timer that fires as the task returns must not
        # turn its success into a failure, nor hit taskq's bookkeeping after it.
        if self._task_code is not None and runs_in(frame, self._task_code):
            raise SoftTimeLimitExceeded("soft time limit exceeded")

    def _on_cancel(self, signum: int, frame: FrameType | None) -> None:
        # As for the soft limit: only inside the task's code (the master checked, under the
        # slot's lock, that this child still runs the job it was asked to stop).
        if self._task_code is not None:
            if runs_in(frame, self._task_code):
                job = current_job()
                raise JobCancelled(job.id if job else "?", "cancelled while running")
        elif self.on_cancel_signal is not None:
            self.on_cancel_signal()

    # -- main loop -----------------------------------------------------------------------

    def run_sync(self) -> None:
        """The sync loop: one job at a time, until stopped (burst mode: until none is ready)."""
        self.set_title("idle")
        while not self.stopping:
            batch = self.next_batch()
            if batch is None:
                break
            self.starts.fetched(batch, self.fetched_at)
            if self.slot is not None and self.options.prefetch is None:
                self.slot.list_batch(
                    [(self.broker.stream_position[d.stream], d.entry_id) for d in batch]
                )
            prepared = self.executor.prepare_ahead(batch)  # expiry: checked again at the turn
            for i, d in enumerate(batch):
                if self.stopping:
                    self._hand_back_rest(batch[i:])
                    break
                if not self.process(d, batch[i + 1 :], prepared[i]):
                    break  # the master revoked the rest of the batch and hands it back
            self._ahead.clear()
            self._settled.clear()
            self.set_title("idle")  # once per batch: the title names the task while it runs
            self.check_limits()

    def leave(self) -> None:
        """Send the last acks and leave the group."""
        if self.slot is not None:
            self.slot.count_runs()
        if self.finisher.acks:
            self._outages.call(lambda: self._fetch(0))
        self._outages.call(lambda: self.broker.forget_consumer(self.name))

    def next_batch(self, count: int | None = None) -> list[Delivery] | None:
        """The next jobs (``count``, else :attr:`batch_size`), blocking in Redis while none
        is ready; None in burst mode once nothing is left."""
        if self.starts.pauses.wait_if_all_paused(self.options.burst):
            return []  # every queue paused: nothing fetched meanwhile
        count = self.batch_size if count is None else count
        fetched = self.poll(count)
        if fetched.deliveries or self.stopping:
            return self.keep(fetched.deliveries, count)
        if self.options.burst:
            return None if fetched.due_in_ms != 0 else []
        block_ms = self.executor.app.settings.block_ms
        if fetched.due_in_ms > 0:
            block_ms = min(block_ms, fetched.due_in_ms)
        return self._read_blocking(max(1, block_ms), count)

    def poll(self, count: int, held: Callable[[], Collection[str]] = frozenset) -> Fetched:
        """Send the queued acks and take up to ``count`` ready jobs (or more: see :meth:`keep`)
        without blocking. After an outage, first hand back what is pending here but not
        ``held`` (the entry ids of the jobs running meanwhile, asked only then)."""
        if self.slot is not None:
            self.slot.count_runs()  # the short runs that ended since the last fetch
        if self._outages.happened:
            self._outages.call(lambda: self._reconcile(held()))
            self._outages.happened = False
        fetched = self._outages.call(lambda: self._fetch(count))
        if fetched.due_in_ms == 0:
            # A delayed job or retry is due: move them into their streams now (the next
            # fetch takes them in priority order with everything else).
            self._outages.call(self.broker.promote)
        return fetched

    @property
    def batch_size(self) -> int:
        """Jobs the next fetch takes: fixed, or sized by the pace of recent jobs."""
        if self.options.prefetch is not None:
            return self.options.prefetch
        return max(1, min(MAX_BATCH, int(BATCH_BUDGET_MS / max(self._pace_ms, 0.01))))

    def _fetch(self, count: int) -> Fetched:
        """Send the queued acks and take up to ``count`` jobs. The acks are taken from the
        finisher only once the call succeeded, so a fetch retried after an outage sends them
        again."""
        # Jobs fetched less than half a visibility timeout ago cannot have been swept, so their
        # acks skip the ownership check (it costs an XPENDING per batch).
        now = time.monotonic()
        half_visibility_s = self.executor.app.settings.visibility_timeout_ms / 2000
        fence = now - self.fetched_at > half_visibility_s
        acks, completions = self.finisher.acks, self.finisher.completions
        dirty = self._dirty | {d.stream for d in acks}
        self._acks_since_trim += len(acks)
        trim = self._acks_since_trim >= TRIM_EVERY_ACKS or (
            bool(dirty) and now - self._trimmed_at >= TRIM_EVERY_S
        )
        fetched = self.broker.fetch(
            self.name,
            count,
            acks,
            completions=completions,
            fence_acks=fence,
            trim=trim,
            dirty=sorted(dirty),
        )
        self.finisher.take_acks()
        if trim or not fetched.deliveries:  # the dirty streams were trimmed
            self._dirty, self._acks_since_trim, self._trimmed_at = set(), 0, now
        else:
            self._dirty = dirty
        self.fetched_at = time.monotonic()
        return fetched

    def _read_blocking(self, block_ms: int, count: int) -> list[Delivery]:
        self._idle = True
        try:
            if self.stopping:
                return []
            batch = self._outages.call(
                lambda: self.broker.read_blocking(self.name, count, block_ms)
            )
            self.fetched_at = time.monotonic()
        except (_Interrupted, BrokerUnavailable):
            # Stopped while idle (or while Redis was down): the read may have been cut off
            # mid-reply, so drop that connection. Entries it may have delivered stay pending
            # under this consumer and are handed back by the master.
            self.broker.disconnect()
            return []
        finally:
            self._idle = False
        return self.keep(batch, count)

    def keep(self, batch: list[Delivery], count: int) -> list[Delivery]:
        """XREADGROUP's COUNT is per stream: a read of several streams at once can bring up
        to `count` jobs from each. Keep the best `count` (the batch is in priority order) and
        hand the others back at once, for any idle child to take. (Keeping them would run a
        lower-priority job before the rest of a higher stream.)
        """
        if len(batch) > count:
            self.hand_back(batch[count:])
        return batch[:count]

    def process(
        self,
        d: Delivery,
        rest: Sequence[Delivery] = (),
        prepared: Prepared | Outcome | None = None,
    ) -> bool:
        """Run and record one delivery (``rest``: the batch after it; ``prepared``: it decoded
        already); False if the rest of the batch was revoked."""
        if self._settled and (d.stream, d.entry_id) in self._settled:
            return self.slot is None or self.slot.claim_next()  # deferred ahead of its turn
        if prepared is None:
            prepared = self._ahead.pop((d.stream, d.entry_id), None) or self.executor.prepare(d)
        if not isinstance(prepared, Outcome):  # it may have expired, been cancelled or paused
            prepared = self.starts.check(self.executor.still_current(prepared), rest)
        if isinstance(prepared, Outcome):
            if self.slot is not None and not self.slot.claim_next():
                return False
            outcome = prepared
        else:
            o = prepared.task.options  # a limited job is claimed first: revoked, it takes no slot
            limited = o.rate_limit is not None or o.concurrency_limit is not None
            if limited and self.slot is not None and not self.slot.claim_next():
                return False
            if limited and not self.limits_allow(prepared, rest):
                return True  # deferred, or lost
            if not self._mark_started(prepared, claimed=limited):
                return False
            outcome = self._run(prepared)
            self._pace(outcome.duration_s * 1000)
        self.record(outcome)
        if self.slot is not None:
            self.slot.finish(outcome.kind, ran_ms=outcome.duration_s * 1000)
        self.jobs_done += 1
        return True

    def _mark_started(self, p: Prepared, *, claimed: bool) -> bool:
        """The job's start in the scoreboard; False if the master revoked it (skip it)."""
        if self.slot is None:
            return True
        d, msg, index = p.delivery, p.msg, self.broker.stream_position[p.delivery.stream]
        recorded = d.recorded
        return self.slot.start(
            index, d.entry_id, msg.task, msg.id, p.hard_limit_s, recorded=recorded, claimed=claimed
        )

    def record(self, outcome: Outcome) -> None:
        """A success's ack waits for the next fetch; other ends move the job now."""
        if outcome.kind == OK:  # queued for the next fetch: no Redis call to wait out
            self.finisher.record(outcome, owner=self.name)
        else:
            self._outages.call(lambda: self.finisher.record(outcome, owner=self.name))

    def limits_allow(self, p: Prepared, rest: Sequence[Delivery] = ()) -> bool:
        """A job of a limited task may start: it got its start slot and its running slot
        (else it now waits for them, out of its stream). The jobs of the same rate limit
        right behind it in the batch are admitted or deferred in the same call."""
        o = p.task.options
        if o.rate_limit is None and o.concurrency_limit is None:
            return True
        asked = time.monotonic()
        allowed, settled = True, list[Prepared]()
        if o.rate_limit is not None:
            following = same_task_next(p, rest, self.executor.prepare, self._ahead)
            allowed, settled = self.limiter.admitted(p, self._outages.call, following)
            self._settled.update((q.delivery.stream, q.delivery.entry_id) for q in settled)
        if allowed and o.concurrency_limit is not None:
            allowed = self.limiter.took_slot(p, self._outages.call)
        if not allowed:  # deferrals are short work: they size the next batch as short jobs
            self._pace((time.monotonic() - asked) * 1000 / (1 + len(settled)))
        return allowed

    def _pace(self, ms: float) -> None:
        """Fold one job's duration into the pace that sizes the next batch."""
        pace = self._pace_ms
        self._pace_ms = ms if ms > pace else pace + PACE_SMOOTHING * (ms - pace)

    def _run(self, p: Prepared) -> Outcome:
        self.set_title(f"running {p.msg.task}")  # (set when it changes: see ChildTitle)
        soft_s = p.soft_limit_s if self.options.soft_time_limits else None
        self._task_code = code_of(p.task)
        if soft_s:
            signal.setitimer(signal.ITIMER_REAL, soft_s)
        try:
            return self.executor.execute(p)
        finally:
            if soft_s:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self._task_code = None

    def _hand_back_rest(self, rest: list[Delivery]) -> None:
        """Stopping: hand back the jobs of the batch that did not start (unless the master
        revoked them already and hands them back itself)."""
        listed = self.slot is not None and self.options.prefetch is None
        if not listed or (self.slot is not None and self.slot.take_rest()):
            self.hand_back(rest)

    def hand_back(self, rest: list[Delivery]) -> None:
        """Return prefetched jobs that did not start, without using up an attempt."""
        for d in rest:
            self._outages.call(functools.partial(self.finisher.hand_back, d, owner=self.name))

    def _reconcile(self, keep: Collection[str] = ()) -> None:
        """After an outage, hand back entries pending here that this consumer does not hold
        (``keep``: the entry ids of the jobs it runs).

        Called before the fetch that sends the queued acks (of finished jobs), with no other
        job held. A Redis restart can bring back entries whose ack was lost with the last
        second of writes; without this they would stay pending under a live consumer for good.
        """
        done = {d.entry_id for d in self.finisher.acks} | set(keep)
        for d in self.broker.pending_of(self.name):
            if d.entry_id not in done:
                logger.warning(
                    "handing back %s %s: pending here after a Redis outage", d.stream, d.entry_id
                )
                self.finisher.hand_back(d, owner=self.name)

    def check_limits(self) -> None:
        """Stop after ``max_tasks`` jobs, or past ``max_memory_kb`` (the child is recycled)."""
        o = self.options
        if o.max_tasks and self.jobs_done >= o.max_tasks:
            logger.info("recycling after %d jobs (--max-tasks-per-child)", self.jobs_done)
            self.stopping = True
        elif (
            o.max_memory_kb and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > o.max_memory_kb
        ):
            logger.info("recycling: memory above %d KiB (--max-memory-per-child)", o.max_memory_kb)
            self.stopping = True
