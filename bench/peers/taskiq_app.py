"""taskiq with the taskiq-redis stream broker (``taskiq worker --workers N``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from taskiq_redis import RedisStreamBroker

from bench.common.job import job
from bench.peers.base import Item, System, cli, redis_url

# consumer_id="0": a group created by the worker also sees jobs enqueued
# before it started (the default "$" would skip them).
broker = RedisStreamBroker(url=redis_url(), consumer_id="0")


@broker.task
async def noop(i: int, t_ns: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


class TaskiqSystem(System):
    """taskiq: ``kiq`` for one job, ``asyncio.gather`` of ``kiq`` for a batch."""

    name = "taskiq"
    packages = ("taskiq", "taskiq-redis", "redis")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def setup(self) -> None:
        self.loop.run_until_complete(broker.startup())

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        return [
            cli("taskiq"),
            "worker",
            "bench.peers.taskiq_app:broker",
            "--workers",
            str(procs),
            "--log-level",
            "WARNING",
            *extra,
        ]

    def enqueue_one(self, i: int, t_ns: int) -> None:
        self.loop.run_until_complete(noop.kiq(i, t_ns))

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        async def kick_all() -> None:
            await asyncio.gather(*(noop.kiq(i, t) for i, t in items))

        self.loop.run_until_complete(kick_all())


SYSTEM = TaskiqSystem()
