"""The prefork supervisor behind ``taskq worker -c N``.

The master imports the app once, forks N children (each opens its own Redis connection after
the fork), and then only supervises: it reaps and respawns children with a backoff, enforces
time limits, renews the leases of running jobs, hands back the jobs of children that died,
sweeps for jobs of dead workers, writes the heartbeat record, and turns signals into warm or
cold shutdowns. Between ticks it answers health probes (``--health-port``); with
``--autoscale`` it also grows and shrinks the number of children.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, NamedTuple

import setproctitle

from taskq import __version__
from taskq.app import App
from taskq.keys import consumer_name, worker_id
from taskq.middleware import emit
from taskq.worker.aio import serve
from taskq.worker.cancels import Canceller
from taskq.worker.consumer import DEFAULT_ASYNC_CONCURRENCY, Consumer, ConsumerOptions
from taskq.worker.durations import DurationMeter
from taskq.worker.executor import Executor
from taskq.worker.health import HealthServer, Probe, pause, readiness
from taskq.worker.lifeline import ChildTitle, describe_exit, die_with_parent, kill, signal_name
from taskq.worker.maintenance import Maintenance
from taskq.worker.marks import RunningMarks
from taskq.worker.outcome import JobCounts
from taskq.worker.reclaim import Backoff, Reclaimer
from taskq.worker.record import ChildRecord, WorkerRecord
from taskq.worker.scoreboard import LOCK_TIMEOUT_S, Scoreboard
from taskq.worker.slotview import Running, SlotView
from taskq.worker.taskstats import taken

if TYPE_CHECKING:
    from taskq.worker.autoscale import Autoscaler

logger = logging.getLogger(__name__)

TICK_S = 0.1
HANDBACK_AFTER_S = 0.1
"""Adaptive prefetch: once a job has run this long, the master hands the rest of its child's
batch back for other children."""


class PoolOptions(NamedTuple):
    """Options of ``taskq worker`` (see its ``--help``); a named tuple: cheaper to define."""

    concurrency: int = 1
    queues: tuple[str, ...] = ("tasks",)
    prefetch: int | None = None
    max_tasks_per_child: int = 0
    max_memory_per_child_kb: int = 0
    time_limit_s: float | None = None
    soft_time_limit_s: float | None = None
    grace_s: float = 25.0
    app_name: str = "app"
    periodic: bool = True
    async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY
    """Async jobs each child runs at once (apps with ``async def`` tasks)."""
    autoscale_min: int | None = None  # --autoscale MAX,MIN: MIN (MAX is concurrency)
    health: HealthServer | None = None  # --health-port: the bound socket probes reach


class _Child:
    def __init__(self, index: int, pid: int, consumer: str, started: float) -> None:
        self.index, self.pid, self.consumer, self.started = index, pid, consumer, started
        self.killed_for = ""
        self.leaving = False  # stopped warm by the autoscaler: its fetched jobs go back at once
        self.culprits: frozenset[str] = frozenset()
        """Entry ids of the jobs it was killed for (its other running jobs go back uncounted)."""


class Pool:
    """Supervises ``options.concurrency`` children serving ``options.queues``."""

    def __init__(self, app: App, options: PoolOptions) -> None:
        self.app, self.options = app, options
        self.children: dict[int, _Child] = {}
        self.stopping = self.cold = False
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.worker_id = worker_id(self.host, self.pid)
        self.executor = Executor(
            self.app,
            time_limit_s=self.options.time_limit_s,
            soft_time_limit_s=self.options.soft_time_limit_s,
        )
        self.async_concurrency = (
            max(1, self.options.async_concurrency) if self.executor.has_async_tasks else 0
        )
        self.scoreboard = Scoreboard(self.options.concurrency, jobs=self.async_concurrency)
        self.maintenance = Maintenance(
            self.app,
            self.options.queues,
            self.worker_id,
            self.executor,
            periodic=self.options.periodic,
            runs=lambda: taken(self.scoreboard, self.maintenance.broker.streams, self.children),
        )
        self.reclaimer = Reclaimer(self.maintenance, self.executor)
        self.canceller = Canceller(self.maintenance, self.scoreboard)
        self.marks = RunningMarks(self.maintenance, self.worker_id)
        self._backoff = Backoff()  # respawns while children die young or forks fail
        self._deadline = 0.0
        self._shown_title = ""
        self._started_mono = time.monotonic()
        self._settled = JobCounts()  # of children that exited, and what the master recorded
        self._last_processed = (0, time.monotonic())
        self.durations = DurationMeter()
        low, high, b = self.options.autoscale_min, self.options.concurrency, self.maintenance.broker
        self.size = low or high  # children to run now
        self.autoscaler: Autoscaler | None = None
        if low:  # --autoscale: its modules load only then
            from taskq.worker.autoscale import Autoscaler

            self.autoscaler = Autoscaler.of(b, self.app.settings, low, high)

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        """Serve until a shutdown completes; returns the process exit code."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.app.set_current()  # shared tasks enqueue through the app this worker runs
        self.maintenance.claim_queues(self._record())
        self.app.link.disconnect()  # no open connection crosses the fork
        emit(self.app.middleware, "worker_start", self.options.queues)
        self._title()
        # Frozen, the loaded objects escape a child's full collections, which write to every
        # object they scan (12 MB of copied pages a child); once: later it would keep garbage.
        gc.freeze()
        for i in range(self.size):
            self._spawn(i)
        self.maintenance.step(lambda b: b.ensure_groups())
        queues = ",".join(self.options.queues)
        logger.info("worker %s: %d children on %s", self.worker_id, self.size, queues)
        while not self.stopping or self.children or self.reclaimer.holds_shutdown(self.cold):
            self._tick()
            pause(self.options.health, TICK_S, self._probe)
        self.maintenance.unregister(self._record())
        emit(self.app.middleware, "worker_stop")
        logger.info(
            "worker %s stopped (%s shutdown)", self.worker_id, "cold" if self.cold else "warm"
        )
        return 0

    def _tick(self) -> None:
        # Each step is guarded: the supervisor must outlive a bug in any one of them.
        for step in (self._reap, self._watch_busy_children, self._check_grace):
            self._guarded(step)
        self._settled += self.reclaimer.tick(cold=self.cold)
        # Leases and the heartbeat go on while children finish their jobs in a warm shutdown.
        consumers = [c.consumer for c in self.children.values()]
        self.maintenance.tick(consumers=consumers, record=self._record, sweep=not self.stopping)
        if not self.stopping:
            self._guarded(self._resize)
            self._guarded(self._respawn)
        self._guarded(self._title)

    def _resize(self) -> None:
        if self.autoscaler:
            children = list(self.children.values())
            self.size = self.autoscaler.tick(self.maintenance.step, children)

    def _probe(self) -> Probe:
        reachable, n = self.maintenance.redis_reachable(), len(self.children)
        return readiness(stopping=self.stopping, redis_reachable=reachable, children=n)

    def _guarded(self, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception:
            logger.exception("supervisor step %s failed; carrying on", step.__name__)

    def _check_grace(self) -> None:
        if self.stopping and not self.cold and time.monotonic() > self._deadline:
            logger.warning("grace period over: cold shutdown")
            self._go_cold()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            logger.warning("second signal: cold shutdown")
            self._go_cold()
            return
        logger.info("%s: warm shutdown (grace %.0fs)", signal_name(signum), self.options.grace_s)
        self.stopping = True
        self._deadline = time.monotonic() + self.options.grace_s
        for child in self.children.values():
            kill(child.pid, signal.SIGTERM)

    def _go_cold(self) -> None:
        self.cold = True
        for child in self.children.values():
            kill(child.pid, signal.SIGKILL)

    # -- children ------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        self.scoreboard.prepare(index)  # before the fork: the child may write at once
        try:
            pid = os.fork()
        except OSError as exc:  # EAGAIN/ENOMEM under a pid or memory limit: try again later
            logger.error("cannot fork child %d: %s", index + 1, exc)
            self._backoff.failed()
            return
        if pid == 0:
            os._exit(self._child_main(index))
        consumer = consumer_name(self.worker_id, index, pid)
        self.children[index] = _Child(index, pid, consumer, time.monotonic())
        self.scoreboard.set_pid(index, pid)

    def _child_main(self, index: int) -> int:
        die_with_parent(self.pid)  # nobody would renew its jobs' leases
        if self.options.health is not None:
            self.options.health.close()  # the master's socket: probes must not reach a child
        started = False
        try:
            n, queues = self.size, ",".join(self.options.queues)
            prefix = f"taskq: child {index + 1}/{n} [{queues}]"
            consumer = Consumer(
                self.app.broker_for(self.options.queues),
                self.executor,
                name=consumer_name(self.worker_id, index, os.getpid()),
                options=ConsumerOptions(
                    prefetch=self.options.prefetch,
                    max_tasks=self.options.max_tasks_per_child,
                    max_memory_kb=self.options.max_memory_per_child_kb,
                    soft_time_limits=True,
                    async_concurrency=self.async_concurrency,
                ),
                slot=self.scoreboard.slot(index),
                set_title=ChildTitle(prefix),
            )
            consumer.install_signal_handlers()
            emit(self.app.middleware, "child_start")
            started = True
            serve(consumer)
            return 0
        except BaseException:
            logger.exception("child %d crashed", index + 1)
            return 1
        finally:
            if started:  # the child leaves by os._exit: no atexit handler flushes for it
                emit(self.app.middleware, "child_stop")

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = next((c for c in self.children.values() if c.pid == pid), None)
            if child is None:  # a process a middleware forked (the metrics server, say)
                logger.warning("process %d exited: %s", pid, _describe(status, ""))
                continue
            view = self.scoreboard.read(child.index)
            streams = self.maintenance.broker.streams  # its runs, before its slot is reused
            self.maintenance.task_stats.add(taken(self.scoreboard, streams, [child.index], True))
            cause = _describe(status, child.killed_for)
            self.reclaimer.child_exited(child.consumer, view, cause, child.culprits)
            del self.children[child.index]
            self._settled += view.counts
            self._note_exit(child, status, cause)

    def _note_exit(self, child: _Child, status: int, cause: str) -> None:
        lived = time.monotonic() - child.started
        clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if not clean and not self.stopping:
            logger.warning("child %d (pid %d) died: %s", child.index + 1, child.pid, cause)
        if not clean and lived < 5:
            self._backoff.failed()
        elif lived >= 5:
            self._backoff.failures = 0

    def _respawn(self) -> None:
        if time.monotonic() < self._backoff.not_before:
            return
        for i in range(self.size):
            if i not in self.children:
                self._spawn(i)

    def _watch_busy_children(self) -> None:
        """Act on what each busy child's slot says (one read per child and tick): kill it for
        a job past its hard limit, or take back the rest of its batch behind a long job."""
        now = time.monotonic()
        adaptive = self.options.prefetch is None
        busy, slots = [], []
        for child in self.children.values():
            view = self.scoreboard.read(child.index)
            slots.append(((child.index, child.pid), view))
            if not view.busy or child.killed_for:
                continue
            busy.append((child.index, child.pid, view))
            late = [j for j in view.running if j.hard_deadline and now > j.hard_deadline]
            long_job = view.oldest if adaptive and view.waiting_in_batch else None
            if late:
                self._kill_for_hard_limit(child, late)
            elif long_job and (
                self.stopping or child.leaving or now - long_job.started_mono > HANDBACK_AFTER_S
            ):  # leaving: the jobs behind the running one start elsewhere at once
                self._revoke_rest(child, view, long_job)
        self.durations.sample(slots)
        self.canceller.tick(busy, self._queue_of, self._mark_killed)
        self.marks.tick(busy, self._queue_of)

    def _queue_of(self, job: Running) -> str:
        return job.stream(self.maintenance.broker.streams).rsplit(":", 1)[0]

    def _mark_killed(self, index: int, reason: str, culprits: frozenset[str]) -> None:
        if index in self.children:
            self.children[index].killed_for = reason
            self.children[index].culprits = culprits

    def _kill_for_hard_limit(self, child: _Child, late: list[Running]) -> None:
        """(Soft limits are the child's own timers.) The kill happens under the slot's lock
        after checking that the slot still shows one of the same jobs, so a child that has
        just moved on to its next job is not killed for the last one."""
        lock = self.scoreboard.lock(child.index)
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            return  # next tick
        try:
            again = self.scoreboard.read(child.index)
            still = [j for j in late if again.job(j.seq) is not None]
            if not still:
                return
            child.killed_for = "hard time limit exceeded"
            child.culprits = frozenset(j.entry_id for j in still)
            kill(child.pid, signal.SIGKILL)
        finally:
            lock.release()
        others = len(again.running) - len(still)
        for job in still:
            logger.warning(
                "%s[%s] exceeded its hard time limit; killed child %d%s",
                job.task,
                job.job_id,
                child.index + 1,
                f" (its {others} other running job(s) go back uncounted)" if others else "",
            )

    def _revoke_rest(self, child: _Child, view: SlotView, long_job: Running) -> None:
        """Adaptive prefetch: hand back the jobs waiting in the batch behind a long one."""
        rest = self.scoreboard.revoke_rest(child.index, view)
        if rest:
            logger.info(
                "handing back %d job(s) waiting behind %s[%s] in child %d",
                len(rest),
                long_job.task,
                long_job.job_id,
                child.index + 1,
            )
            self.reclaimer.revoked(child.consumer, rest)

    # -- the heartbeat record --------------------------------------------------------------

    def _record(self) -> WorkerRecord:
        views = [self.scoreboard.read(c.index) for c in self.children.values()]
        totals = self._settled
        for v in views:
            totals += v.counts
        done, at = self._last_processed
        now = time.monotonic()
        rate = (totals.processed - done) / (now - at) if now > at else 0.0
        self._last_processed = (totals.processed, now)
        recent = self.durations.recent()
        streams = self.maintenance.broker.streams
        children = tuple(
            ChildRecord.of(c.index + 1, c.pid, c.consumer, v.running, streams, now)
            for c, v in zip(self.children.values(), views, strict=True)
        )
        return WorkerRecord(
            id=self.worker_id,
            host=self.host,
            pid=self.pid,
            version=__version__,
            app=self.options.app_name,
            uptime_ms=int((now - self._started_mono) * 1000),
            visibility_timeout_ms=self.app.settings.visibility_timeout_ms,
            concurrency=self.options.concurrency,
            queues=tuple(self.maintenance.broker.queues),  # (partitions as such)
            tasks=tuple(self.app.registered()),
            counts=totals,
            rate_per_s=round(rate, 1),
            children=children,
            recent_jobs=recent.jobs,
            recent_busy_ms=recent.busy_ms,
            recent_tasks=recent.tasks,
        )

    def _title(self) -> None:
        state = "stopping" if self.stopping else "running"
        title = (
            f"taskq: master {self.options.app_name} [{','.join(self.options.queues)}] "
            f"{len(self.children)}/{self.size} children {state}"
        )
        if title != self._shown_title:  # set only when it changes: the tick runs 20x a second
            setproctitle.setproctitle(title)
            self._shown_title = title


def run_pool(app: App, options: PoolOptions) -> int:
    """Entry point used by the CLI."""
    return Pool(app, options).run()


def _describe(status: int, killed_for: str) -> str:
    return killed_for or describe_exit(status)
