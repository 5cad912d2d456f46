"""Dramatiq 2 with the Redis broker (``dramatiq -p N -t 8``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.common.job import job
from bench.peers.base import Item, System, cli, redis_url

broker = RedisBroker(url=redis_url())
dramatiq.set_broker(broker)
# The CLI has no log-level option (it logs at INFO, -v for DEBUG); WARNING here.
logging.getLogger("dramatiq").setLevel(logging.WARNING)


@dramatiq.actor
def noop(i: int, t_ns: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


class DramatiqSystem(System):
    """Dramatiq: ``send`` for one job, a ``group`` for a batch."""

    name = "dramatiq"
    packages = ("dramatiq", "redis")

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        return [cli("dramatiq"), "bench.peers.dramatiq_app", "-p", str(procs), "-t", "8", *extra]

    def enqueue_one(self, i: int, t_ns: int) -> None:
        noop.send(i, t_ns)

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        dramatiq.group(noop.message(i, t) for i, t in items).run()


SYSTEM = DramatiqSystem()
