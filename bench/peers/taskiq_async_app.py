"""taskiq with the taskiq-redis stream broker, async tasks (async family).

``taskiq worker --workers N --max-async-tasks C``: C tasks in flight per process
(taskiq's default is 100). ``consumer_id="0"`` as in bench/peers/taskiq_app.py, so the
workers also see the jobs enqueued before they started.
"""

from __future__ import annotations

import asyncio

from taskiq_redis import RedisStreamBroker

from bench.common.record import record
from bench.peers.base import cli, redis_url
from bench.peers.featurebase import NAP_S, Async

broker = RedisStreamBroker(url=redis_url(), consumer_id="0")


@broker.task
async def nap(i: int) -> None:
    """Async task: sleep, then record completion (no Redis round trip)."""
    await asyncio.sleep(NAP_S)
    record(i)


class TaskiqAsync(Async):
    """``await nap.kiq(i)``."""

    name = "taskiq"
    packages = ("taskiq", "taskiq-redis", "redis")

    async def astart(self) -> None:
        await broker.startup()

    async def aclose(self) -> None:
        await broker.shutdown()

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [[
            cli("taskiq"), "worker", "bench.peers.taskiq_async_app:broker",
            "--workers", str(procs), "--max-async-tasks", str(concurrency),
            "--log-level", "WARNING",
        ]]  # fmt: skip

    async def enqueue(self, i: int) -> None:
        await nap.kiq(i)


ASYNC = TaskiqAsync()
