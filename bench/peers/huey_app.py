"""Huey 3 with Redis storage; process workers (``huey_consumer -w N -k process``)."""

from __future__ import annotations

from collections.abc import Sequence

from huey import RedisHuey

from bench.common.job import job
from bench.peers.base import Item, System, cli, redis_url

huey = RedisHuey("bench", url=redis_url())


@huey.task()
def noop(i: int, t_ns: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


class HueySystem(System):
    """Huey: call the task for one job, ``Task.map`` for a batch."""

    name = "huey"
    packages = ("huey", "redis")

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        return [
            cli("huey_consumer"),
            "bench.peers.huey_app.huey",
            "-w",
            str(procs),
            "-k",
            "process",
            "-q",
            *extra,
        ]

    def enqueue_one(self, i: int, t_ns: int) -> None:
        noop(i, t_ns)

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        noop.map(items)


SYSTEM = HueySystem()
