"""The queues' figures as Prometheus metrics, read from Redis at each scrape: depths per
priority, scheduled, held, dead, ended, pauses, fair queues' active and top keys, and
the autoscaling signal (``taskq_desired_processes``). Served by :mod:`taskq.ops.metrics`'
server process.

prometheus_client is imported inside functions only (see :mod:`taskq.ops.metrics`: its
multiprocess mode is chosen at its first import).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from taskq.errors import BrokerError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from taskq.broker import Link
    from taskq.config import Settings
    from taskq.ops.inspect import QueueStats, StreamStats
    from taskq.worker.scaling import Scaler, ScaleSignal

logger = logging.getLogger(__name__)

DESIRED_GAUGE = "taskq_desired_processes"
"""The autoscaling signal's gauge (docs/scaling.md)."""


class QueueDepth:
    """A collector that reads the queues' figures from Redis at each scrape, and their
    autoscaling signal (each queue read at most once a second, however many scrapes).

    Args:
        settings: the target time-to-start and horizon of the signal (default: the
            defaults).
    """

    def __init__(
        self, redis_url: str, queues: Sequence[str] = (), *, settings: Settings | None = None
    ) -> None:
        self.redis_url = redis_url
        self.queues = tuple(queues)
        self.settings = settings
        self._link: Link | None = None
        self._scaler: Scaler | None = None

    def _reader_link(self) -> Link:
        from taskq.broker import connect

        if self._link is None:
            self._link = connect(self.redis_url)
        return self._link

    def signals(self) -> list[ScaleSignal]:
        """The queues' autoscaling signal (:mod:`taskq.worker.scaling`)."""
        from taskq.broker.reads import Reader
        from taskq.config import Settings
        from taskq.worker.scaling import Scaler

        if self._scaler is None or self._scaler.queues != self.queues:
            settings = self.settings or Settings(redis_url=self.redis_url)
            self._scaler = Scaler(Reader(self._reader_link()), self.queues, settings)
        return self._scaler.signals()

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        from taskq.broker.reads import Reader
        from taskq.ops.inspect import Inspector

        up = GaugeMetricFamily("taskq_redis_up", "1 if the last scrape could read Redis.")
        try:
            stats = Inspector(Reader(self._reader_link()), self.queues).queue_stats()
            desired = _desired_family(self.signals())
        except BrokerError as exc:
            logger.warning("metrics: cannot read queue depths: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _depth_families(stats)
        yield desired


def _desired_family(signals: Sequence[ScaleSignal]) -> Metric:
    from prometheus_client.core import GaugeMetricFamily

    g = GaugeMetricFamily(
        DESIRED_GAUGE,
        "Worker processes the queue wants now (see taskq scale and docs/scaling.md).",
        labels=["queue"],
    )
    for s in signals:
        g.add_metric([s.queue], s.desired_processes)
    return g


def _depth_families(stats: Sequence[QueueStats]) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    per_stream: dict[str, tuple[str, Callable[[StreamStats], float]]] = {
        "waiting": ("Jobs not yet delivered to a worker.", lambda s: s.waiting),
        "pending": (
            "Jobs delivered and not acked (running, held, retrying or orphaned).",
            lambda s: s.pending,
        ),
        "retrying": ("Pending jobs waiting out a retry backoff.", lambda s: s.retrying),
        "oldest_waiting_age_seconds": (
            "Age of the oldest waiting job (0 if none).",
            lambda s: (s.oldest_waiting_age_ms or 0) / 1000,
        ),
    }
    for name, (doc, value) in per_stream.items():
        g = GaugeMetricFamily(f"taskq_queue_{name}", doc, labels=["queue", "priority"])
        for q in stats:
            for s in q.streams:
                g.add_metric([q.queue, s.priority], value(s))
        yield g
    scheduled = GaugeMetricFamily("taskq_queue_scheduled", "Delayed jobs.", labels=["queue"])
    dead = GaugeMetricFamily("taskq_queue_dead", "Dead-lettered jobs.", labels=["queue"])
    held = GaugeMetricFamily(
        "taskq_queue_held", "Jobs waiting for a concurrency slot.", labels=["queue"]
    )
    ended = {
        name: GaugeMetricFamily(f"taskq_queue_{name}_total", doc, labels=["queue"])
        for name, doc in (
            ("expired", "Jobs not started before they expired, since the queue began."),
            ("cancelled", "Jobs cancelled, since the queue began."),
        )
    }
    for q in stats:
        scheduled.add_metric([q.queue], q.scheduled)
        dead.add_metric([q.queue], q.dead)
        held.add_metric([q.queue], q.held)
        ended["expired"].add_metric([q.queue], q.expired)
        ended["cancelled"].add_metric([q.queue], q.cancelled)
    yield scheduled
    yield dead
    yield held
    yield from ended.values()
    yield _paused_family(stats)
    yield from _fair_families(stats)


def _paused_family(stats: Sequence[QueueStats]) -> Metric:
    """``taskq_paused{queue,task,key}`` = 1 per pause (``""``: every task, every key)."""
    from prometheus_client.core import GaugeMetricFamily

    paused = GaugeMetricFamily(
        "taskq_paused", "1 per pause (taskq pause) in force.", labels=["queue", "task", "key"]
    )
    for q in stats:
        for p in q.paused:
            paused.add_metric([q.queue, p["task"] or "", p["key"] or ""], 1)
    return paused


def _fair_families(stats: Sequence[QueueStats]) -> Iterator[Metric]:
    """``taskq_fair_active_keys{queue}`` per fair queue, ``taskq_fair_key_waiting{queue,key}``
    for its top keys. Keys are user data: prometheus_client escapes label values (``\\``,
    ``"``, new lines), and a key shown twice (two long keys cut to one) is kept once, as a
    scrape refuses a series twice."""
    from prometheus_client.core import GaugeMetricFamily

    active = GaugeMetricFamily(
        "taskq_fair_active_keys", "Fairness keys with jobs waiting.", labels=["queue"]
    )
    top = GaugeMetricFamily(
        "taskq_fair_key_waiting",
        "Jobs waiting, for the fairness keys with the most.",
        labels=["queue", "key"],
    )
    for q in stats:
        if q.fair is None:
            continue
        active.add_metric([q.queue], q.fair.active_keys)
        shown: set[str] = set()
        for k in q.fair.top:
            if k.key not in shown:
                shown.add(k.key)
                top.add_metric([q.queue, k.key], k.waiting)
    yield active
    yield top
