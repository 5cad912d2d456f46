"""The prefork supervisor behind ``taskq worker -c N``.

The master imports the app once, forks N children (each opens its own Redis connection after
the fork), and then only supervises: it reaps and respawns children with a backoff, enforces
time limits, renews the leases of running jobs, hands back the jobs of children that died,
sweeps for jobs of dead workers, writes the heartbeat record, and turns signals into warm or
cold shutdowns.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import redis
import setproctitle

from taskq import __version__
from taskq.app import App
from taskq.broker import Broker
from taskq.errors import TaskqError
from taskq.executor import COUNTED, COUNTERS, Executor
from taskq.keys import consumer_name
from taskq.message import now_ms
from taskq.middleware import emit
from taskq.scoreboard import Scoreboard, SlotView
from taskq.settle import settle_exited
from taskq.worker import Consumer, ConsumerOptions

logger = logging.getLogger(__name__)

TICK_S = 0.1
FORGET_CONSUMERS_AFTER_MS = 3_600_000


@dataclass(frozen=True)
class PoolOptions:
    """Options of ``taskq worker`` (see its ``--help``)."""

    concurrency: int = 1
    queues: tuple[str, ...] = ("tasks",)
    prefetch: int = 1
    max_tasks_per_child: int = 0
    max_memory_per_child_kb: int = 0
    time_limit_s: float | None = None
    soft_time_limit_s: float | None = None
    grace_s: float = 25.0
    app_name: str = "app"


@dataclass
class _Child:
    index: int
    pid: int = 0
    consumer: str = ""
    started: float = 0.0
    killed_for: str = ""
    soft_signalled_at: float = 0.0


@dataclass
class _Backoff:
    failures: int = 0
    not_before: float = 0.0


@dataclass
class Pool:
    """Supervises ``options.concurrency`` children serving ``options.queues``."""

    app: App
    options: PoolOptions
    children: dict[int, _Child] = field(default_factory=dict)
    stopping: bool = False
    cold: bool = False

    def __post_init__(self) -> None:
        self.pid = os.getpid()
        self.worker_id = f"{socket.gethostname()}:{self.pid}"
        self.scoreboard = Scoreboard(self.options.concurrency)
        self.executor = Executor(
            self.app,
            time_limit_s=self.options.time_limit_s,
            soft_time_limit_s=self.options.soft_time_limit_s,
        )
        self._broker: Broker | None = None
        self._backoff = _Backoff()
        self._orphans: list[tuple[_Child, SlotView, str]] = []
        self._deadline = 0.0
        self._due: dict[str, float] = {}
        self._started_ms = now_ms()
        self._settled: collections.Counter[str] = collections.Counter()  # exited children, master
        self._last_processed = (0, time.monotonic())

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        """Serve until a shutdown completes; returns the process exit code."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        emit(self.app.middleware, "worker_start", self.options.queues)
        self._title()
        for i in range(self.options.concurrency):
            self._spawn(i)
        self._maintain(lambda b: b.ensure_groups())  # connects only now: after the forks
        logger.info(
            "worker %s: %d children on %s",
            self.worker_id,
            self.options.concurrency,
            ",".join(self.options.queues),
        )
        while not self.stopping or self.children or self._orphans:
            self._tick()
            time.sleep(TICK_S)
        self._maintain(lambda b: b.unregister(self.worker_id))
        emit(self.app.middleware, "worker_stop")
        logger.info(
            "worker %s stopped (%s shutdown)", self.worker_id, "cold" if self.cold else "warm"
        )
        return 0

    def _tick(self) -> None:
        self._reap()
        self._enforce_time_limits()
        if self.stopping and not self.cold and time.monotonic() > self._deadline:
            logger.warning("grace period over: cold shutdown")
            self._go_cold()
        self._settle_orphans()
        s = self.app.settings
        # Leases and the heartbeat go on while children finish their jobs in a warm shutdown.
        self._periodic("renew", s.visibility_timeout_ms / 3000, self._renew)
        self._periodic("heartbeat", s.heartbeat_interval_ms / 1000, self._beat)
        if not self.stopping:
            self._respawn()
            self._periodic("sweep", s.sweep_interval_ms / 1000, self._sweep)
        self._title()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            logger.warning("second signal: cold shutdown")
            self._go_cold()
            return
        logger.info(
            "%s: warm shutdown (grace %.0fs)", signal.Signals(signum).name, self.options.grace_s
        )
        self.stopping = True
        self._deadline = time.monotonic() + self.options.grace_s
        for child in self.children.values():
            _kill(child.pid, signal.SIGTERM)

    def _go_cold(self) -> None:
        self.cold = True
        for child in self.children.values():
            _kill(child.pid, signal.SIGKILL)

    # -- children ------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        self.scoreboard.reset(index, 0)
        try:
            pid = os.fork()
        except OSError as exc:  # EAGAIN/ENOMEM under a pid or memory limit: try again later
            logger.error("cannot fork child %d: %s", index + 1, exc)
            self._backoff.failures += 1
            self._backoff.not_before = time.monotonic() + min(30.0, 2.0**self._backoff.failures)
            return
        if pid == 0:
            os._exit(self._child_main(index))
        consumer = consumer_name(self.worker_id, index, pid)
        self.children[index] = _Child(index, pid, consumer, time.monotonic())
        self.scoreboard.reset(index, pid)

    def _child_main(self, index: int) -> int:
        try:
            n, queues = self.options.concurrency, ",".join(self.options.queues)
            prefix = f"taskq: child {index + 1}/{n} [{queues}]"
            consumer = Consumer(
                self.app.broker_for(self.options.queues),
                self.executor,
                name=consumer_name(self.worker_id, index, os.getpid()),
                options=ConsumerOptions(
                    prefetch=self.options.prefetch,
                    max_tasks=self.options.max_tasks_per_child,
                    max_memory_kb=self.options.max_memory_per_child_kb,
                    parent_pid=self.pid,
                ),
                slot=self.scoreboard.slot(index),
                set_title=lambda state: setproctitle.setproctitle(f"{prefix} {state}"),
            )
            consumer.install_signal_handlers()
            emit(self.app.middleware, "child_start")
            consumer.run()
            return 0
        except BaseException:
            logger.exception("child %d crashed", index + 1)
            return 1

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
            del self.children[child.index]
            view = self.scoreboard.read(child.index)
            for name in COUNTERS:
                self._settled[name] += getattr(view, name)
            self._orphans.append((child, view, _describe(status, child.killed_for)))
            self._note_exit(child, status)

    def _note_exit(self, child: _Child, status: int) -> None:
        lived = time.monotonic() - child.started
        clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if not clean and not self.stopping:
            logger.warning(
                "child %d (pid %d) died: %s",
                child.index + 1,
                child.pid,
                _describe(status, child.killed_for),
            )
        if not clean and lived < 5:
            self._backoff.failures += 1
            delay = min(30.0, 0.5 * 2 ** (self._backoff.failures - 1))
            self._backoff.not_before = time.monotonic() + delay
        elif lived >= 5:
            self._backoff.failures = 0

    def _respawn(self) -> None:
        if time.monotonic() < self._backoff.not_before:
            return
        for i in range(self.options.concurrency):
            if i not in self.children:
                self._spawn(i)

    def _enforce_time_limits(self) -> None:
        now = time.time()
        for child in self.children.values():
            view = self.scoreboard.read(child.index)
            if not view.busy or child.killed_for:
                continue
            if view.hard_deadline and now > view.hard_deadline:
                logger.warning(
                    "%s[%s] exceeded its hard time limit; killing child %d",
                    view.task,
                    view.job_id,
                    child.index + 1,
                )
                child.killed_for = "hard time limit exceeded"
                _kill(child.pid, signal.SIGKILL)
            elif view.soft_deadline and now > view.soft_deadline != child.soft_signalled_at:
                child.soft_signalled_at = view.soft_deadline
                _kill(child.pid, signal.SIGUSR1)

    # -- jobs of children that exited ------------------------------------------------------

    def _settle_orphans(self) -> None:
        """Deal with every entry still pending under children that exited."""
        while self._orphans:
            child, view, cause = self._orphans[0]
            settle = functools.partial(self._settle_child, child=child, view=view, cause=cause)
            if not self._maintain(settle):
                return
            self._orphans.pop(0)

    def _settle_child(self, broker: Broker, *, child: _Child, view: SlotView, cause: str) -> None:
        # A job running when its child died counts as a failed attempt, unless a cold
        # shutdown killed it.
        running = (view.stream, view.entry_id) if view.busy and not self.cold else None
        for kind in settle_exited(broker, self.executor, child.consumer, running, cause):
            self._settled.update(COUNTED[kind])

    # -- periodic maintenance --------------------------------------------------------------

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = self.app.broker_for(self.options.queues)
        return self._broker

    def _periodic(self, name: str, every_s: float, action: Callable[[Broker], object]) -> None:
        now = time.monotonic()
        if now >= self._due.get(name, 0.0):
            self._due[name] = now + every_s
            self._maintain(action)

    def _maintain(self, action: Callable[[Broker], object]) -> bool:
        """Run one maintenance step; a Redis outage is logged and retried on a later tick."""
        try:
            action(self.broker)
        except (redis.RedisError, TaskqError) as exc:
            logger.warning("maintenance step failed (%s); will retry", exc)
            return False
        except Exception:  # the supervisor must outlive any bug in one step
            logger.exception("maintenance step failed; will retry")
            return False
        return True

    def _renew(self, broker: Broker) -> None:
        broker.renew([c.consumer for c in self.children.values()])

    def _sweep(self, broker: Broker) -> None:
        s = self.app.settings
        for queue in self.options.queues:
            if broker.try_lead_sweep(queue, self.worker_id, s.sweep_interval_ms):
                recovered = broker.sweep(queue, min_idle_ms=s.visibility_timeout_ms)
                if recovered:
                    logger.warning("recovered %d jobs of lost workers on %s", recovered, queue)
        live = [c.consumer for c in self.children.values()]
        broker.forget_consumers(idle_ms=FORGET_CONSUMERS_AFTER_MS, keep=live)

    def _beat(self, broker: Broker) -> None:
        broker.heartbeat(self.worker_id, self._record(), ttl_ms=self.app.settings.worker_ttl_ms)

    def _record(self) -> dict[str, str | int]:
        views = [self.scoreboard.read(c.index) for c in self.children.values()]
        totals = [self._settled[k] + sum(getattr(v, k) for v in views) for k in COUNTERS]
        done, at = self._last_processed
        now = time.monotonic()
        rate = (totals[0] - done) / (now - at) if now > at else 0.0
        self._last_processed = (totals[0], now)
        children = [
            {
                "index": c.index + 1,
                "pid": c.pid,
                "consumer": c.consumer,
                "task": v.task if v.busy else None,
                "job_id": v.job_id if v.busy else None,
                "entry_id": v.entry_id if v.busy else None,
                "stream": v.stream if v.busy else None,
                "started_ms": int(v.started * 1000) if v.busy else None,
            }
            for c, v in zip(self.children.values(), views, strict=True)
        ]
        host, pid = self.worker_id.rsplit(":", 1)
        return {
            "id": self.worker_id,
            "host": host,
            "pid": int(pid),
            "version": __version__,
            "app": self.options.app_name,
            "started_ms": self._started_ms,
            "heartbeat_ms": now_ms(),
            "concurrency": self.options.concurrency,
            "queues": ",".join(self.options.queues),
            "tasks": json.dumps(self.app.registered()),
            "processed": totals[0],
            "failed": totals[1],
            "retried": totals[2],
            "dead": totals[3],
            "rate_per_s": round(rate, 1),
            "children": json.dumps(children),
        }

    def _title(self) -> None:
        state = "stopping" if self.stopping else "running"
        setproctitle.setproctitle(
            f"taskq: master {self.options.app_name} [{','.join(self.options.queues)}] "
            f"{len(self.children)}/{self.options.concurrency} children {state}"
        )


def run_pool(app: App, options: PoolOptions) -> int:
    """Entry point used by the CLI."""
    return Pool(app, options).run()


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _describe(status: int, killed_for: str) -> str:
    if killed_for:
        return killed_for
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.WEXITSTATUS(status)}"
