"""The master's periodic work in Redis, for its children and for the fleet: move due delayed
jobs and retries into their streams, enqueue periodic jobs' ticks, renew the children's
leases, run the crash-recovery sweep, write the heartbeat record (claiming the queues'
visibility timeout), all on the master's own connection.

Every step is guarded: a Redis outage or a bug in one step is logged and the step is tried
again on a later tick; the supervisor never dies of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from taskq.app import App
from taskq.broker import Broker
from taskq.broker.fairness import RECOUNT_EVERY_S, claim_fairness, recount_fair
from taskq.broker.schedules import Schedules
from taskq.broker.series import Series
from taskq.broker.workers import WorkerRegistry
from taskq.errors import BrokerError, ConfigError
from taskq.keys import RECOVER_CONSUMER
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from taskq.worker.pausing import run_time_limits
from taskq.worker.record import WorkerRecord
from taskq.worker.taskstats import Take, TaskStatsWriter
from taskq.worker.throughput import ThroughputWriter
from taskq.worker.ticker import Ticker

logger = logging.getLogger(__name__)

FORGET_CONSUMERS_AFTER_MS = 3_600_000
"""A consumer with nothing pending, idle for this long, is deleted from the group."""
HOUSEKEEPING_S = 1.0
"""How often a master moves due delayed jobs and retries into their streams itself (children
do it as soon as their fetch reports one due)."""
REDIS_FRESH_S = 3.0
"""Redis counts as reachable while the last step succeeded less than this long ago (the
housekeeping step runs every second)."""


class Maintenance:
    """Periodic Redis work of one worker's master."""

    def __init__(
        self,
        app: App,
        queues: Sequence[str],
        worker_id: str,
        executor: Executor,
        *,
        periodic: bool = True,
        runs: Take | None = None,
    ) -> None:
        self.app = app
        self.executor = executor
        self.queues = tuple(queues)
        self.worker_id = worker_id
        self._broker: Broker | None = None
        self._due: dict[str, float] = {}
        self._visibility_conflict = False
        self.ticker = Ticker(app, queues) if periodic else None
        self.throughput = ThroughputWriter(worker_id)
        self.task_stats = TaskStatsWriter(runs)
        self._redis_ok_at = 0.0
        self._redis_failing = False

    @property
    def broker(self) -> Broker:
        """The master's broker (its connection opens on first use)."""
        if self._broker is None:
            self._broker = self.app.broker_for(self.queues)
        return self._broker

    def step(self, action: Callable[[Broker], object]) -> bool:
        """Run one step; returns False (and logs) if it failed."""
        try:
            action(self.broker)
        except BrokerError as exc:
            self._redis_failing = True
            logger.warning("maintenance step failed (%s); will retry", exc)
            return False
        except Exception:  # the supervisor must outlive any bug in one step
            logger.exception("maintenance step failed; will retry")
            return False
        self._redis_failing = False
        self._redis_ok_at = time.monotonic()
        return True

    def redis_reachable(self) -> bool:
        """The last step reached Redis, recently (what ``/ready`` reports)."""
        fresh = time.monotonic() - self._redis_ok_at < REDIS_FRESH_S
        return fresh and not self._redis_failing

    def tick(
        self, *, consumers: Sequence[str], record: Callable[[], WorkerRecord], sweep: bool
    ) -> None:
        """Whatever is due: leases every third of the visibility timeout, the heartbeat, and
        (unless ``sweep`` is False, in a shutdown) periodic jobs' ticks and the sweep."""
        s = self.app.settings
        # Due delayed jobs and retries: children promote them when their fetch says so; this
        # is the safety net (idle or busy children, members added without the due key).
        self._every("promote", HOUSEKEEPING_S, lambda b: b.promote(force=True))
        self._every("renew", s.visibility_timeout_ms / 3000, lambda b: b.renew(consumers))
        self._every("heartbeat", s.heartbeat_interval_ms / 1000, lambda b: self._beat(b, record()))
        self._every("fair", RECOUNT_EVERY_S, lambda b: recount_fair(b.link, b.fair_queues))
        if sweep and self.ticker is not None and self.ticker.periodics:
            ticker = self.ticker
            self.step(lambda b: ticker.step(Schedules(b.link)))
        if sweep:
            self._every("sweep", s.sweep_interval_ms / 1000, lambda b: self._sweep(b, consumers))

    def unregister(self, record: WorkerRecord) -> None:
        """Write the last counts of the minute and the last runs per task, then delete this
        worker's record (a clean stop)."""
        self.step(lambda b: self.throughput.write(Series(b.link), b.queues, record.counts))
        self.step(lambda b: self.task_stats.write(b.link))
        self.step(lambda b: WorkerRegistry(b.link, b.queues).unregister(self.worker_id))

    def claim_queues(self, record: WorkerRecord) -> None:
        """The first heartbeat, before any child exists: refuse to serve queues whose live
        workers use another visibility timeout, or plainly a queue with jobs staged by
        fairness; mark the fair queues fair.

        Raises:
            ConfigError: they do.
        """
        try:
            claim_fairness(self.broker.link, self.broker.queues, self.broker.fair)
            conflict = self.beat(self.broker, record)
        except BrokerError as exc:
            logger.warning("first heartbeat failed (%s); will retry", exc)
            return
        if conflict is not None:
            raise ConfigError(conflict)

    def _beat(self, broker: Broker, record: WorkerRecord) -> None:
        """The heartbeat, then the minute's job counts for the dashboard's charts and the
        runs per task for its Tasks page."""
        self.beat(broker, record)
        self.throughput.write(Series(broker.link), broker.queues, record.counts)
        self.task_stats.write(broker.link)

    def beat(self, broker: Broker, record: WorkerRecord) -> str | None:
        """Write the heartbeat record; returns (and logs once) a visibility-timeout conflict."""
        s = self.app.settings
        conflict = WorkerRegistry(broker.link, broker.queues).heartbeat(
            self.worker_id,
            record.to_fields(),
            ttl_ms=s.worker_ttl_ms,
            visibility_timeout_ms=s.visibility_timeout_ms,
        )
        if conflict is None:
            return None
        queue, theirs = conflict
        message = (
            f"queue {queue}: its live workers use visibility_timeout_ms={theirs}, this worker "
            f"{s.visibility_timeout_ms}; every worker of a queue must use the same (leases, "
            "fences and crash recovery depend on it)"
        )
        if not self._visibility_conflict:
            self._visibility_conflict = True
            logger.error("%s", message)
        return message

    def _every(self, name: str, every_s: float, action: Callable[[Broker], object]) -> None:
        now = time.monotonic()
        if now >= self._due.get(name, 0.0):
            self._due[name] = now + every_s
            self.step(action)

    def _sweep(self, broker: Broker, live: Sequence[str]) -> None:
        """Crash recovery for the fleet (one master per interval, by lease): settle the jobs of
        dead workers, delete finished jobs that linger behind long ones, forget old consumers."""
        s = self.app.settings
        finisher = Finisher(broker, self.executor)
        finisher.limits = run_time_limits(broker)  # a slot a lost job held is freed under them
        for queue in broker.queues:  # (a partitioned queue's partitions, one by one)
            if not broker.try_lead_sweep(queue, self.worker_id, s.sweep_interval_ms):
                continue
            recovered = broker.recover(queue, min_idle_ms=s.visibility_timeout_ms)
            for d in recovered:
                finisher.recover(d, owner=RECOVER_CONSUMER)
            if recovered:
                logger.warning("recovered %d jobs of lost workers on %s", len(recovered), queue)
            broker.tidy(queue)
        broker.forget_consumers(idle_ms=FORGET_CONSUMERS_AFTER_MS, keep=live)
