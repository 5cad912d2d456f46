"""arq (asyncio, Redis) for the results and async families: ``arq <WorkerSettings>``.

arq polls on both sides: the worker reads its queue every ``poll_delay`` (default 0.5 s)
and ``Job.result()`` polls every ``poll_delay`` (default 0.5 s). With those defaults one
result round trip costs about half a second, which measures the defaults rather than
arq, so the bench polls every :data:`POLL_S` (5 ms; ``BENCH_ARQ_POLL_S``) on both sides.
One arq worker is one process: the bench starts ``procs`` of them. Its per-job INFO log
lines are turned off (``--custom-log-dict``: WARNING), as every worker runs at WARNING.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.jobs import Job

from bench.common.record import record
from bench.peers.base import cli, redis_url
from bench.peers.featurebase import NAP_S, Async, Results

POLL_S = float(os.environ.get("BENCH_ARQ_POLL_S", "0.005"))
LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"arq.standard": {"level": "WARNING", "class": "logging.StreamHandler"}},
    "loggers": {"arq": {"handlers": ["arq.standard"], "level": "WARNING"}},
}


async def add(ctx: dict[str, Any], a: int, b: int) -> int:
    """Results task."""
    return a + b


async def nap(ctx: dict[str, Any], i: int) -> None:
    """Async task: sleep, then record completion (no Redis round trip)."""
    await asyncio.sleep(NAP_S)
    record(i)


class WorkerSettings:
    """arq's defaults (``max_jobs`` 10) except the poll delay."""

    functions: ClassVar[list[Any]] = [add, nap]
    redis_settings = RedisSettings.from_dsn(redis_url())
    poll_delay = POLL_S


class AsyncWorkerSettings:
    """``max_jobs`` = the async family's concurrency per process (``BENCH_ASYNC_CONCURRENCY``).

    Not a subclass: arq reads only the settings class's own attributes.
    """

    functions: ClassVar[list[Any]] = [add, nap]
    redis_settings = RedisSettings.from_dsn(redis_url())
    poll_delay = POLL_S
    max_jobs = int(os.environ.get("BENCH_ASYNC_CONCURRENCY", "500"))


def worker_argvs(settings: str, procs: int) -> list[list[str]]:
    """``procs`` single-process arq workers."""
    argv = [
        cli("arq"), f"bench.peers.arq_app.{settings}",
        "--custom-log-dict", "bench.peers.arq_app.LOG_CONFIG",
    ]  # fmt: skip
    return [argv] * procs


class ArqResults(Results):
    """``await (await redis.enqueue_job("add", 1, 2)).result(timeout=...)``."""

    name = "arq"
    packages = ("arq", "redis")
    result_keys = "arq:result:*"

    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool: ArqRedis = self.loop.run_until_complete(
            create_pool(RedisSettings.from_dsn(redis_url()))
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.pool.aclose())
        self.loop.close()

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return worker_argvs("WorkerSettings", procs)

    def submit(self) -> Job | None:
        return self.loop.run_until_complete(self.pool.enqueue_job("add", 1, 2))

    def wait(self, handle: Any, timeout_s: float) -> Any:
        return self.loop.run_until_complete(handle.result(timeout=timeout_s, poll_delay=POLL_S))


class ArqAsync(Async):
    """``await redis.enqueue_job("nap", i)``; ``procs`` workers with ``max_jobs`` each."""

    name = "arq"
    packages = ("arq", "redis")

    async def astart(self) -> None:
        self.pool: ArqRedis = await create_pool(RedisSettings.from_dsn(redis_url()))

    async def aclose(self) -> None:
        await self.pool.aclose()

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return worker_argvs("AsyncWorkerSettings", procs)

    async def enqueue(self, i: int) -> None:
        await self.pool.enqueue_job("nap", i)


RESULTS = ArqResults()
ASYNC = ArqAsync()
