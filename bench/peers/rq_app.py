"""RQ with a worker pool of SimpleWorkers (``rq worker-pool -n N``).

RQ's default worker forks a fresh process per job; SimpleWorker runs jobs in
the worker process itself, which is the fast way to run short jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis
from rq import Queue

from bench.common.job import job
from bench.peers.base import Item, System, cli, redis_url


def noop(i: int, t_ns: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


class RQSystem(System):
    """RQ: ``Queue.enqueue`` for one job, ``Queue.enqueue_many`` for a batch."""

    name = "rq"
    packages = ("rq", "redis")

    def setup(self) -> None:
        self.queue = Queue("default", connection=Redis.from_url(redis_url()))

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        return [
            cli("rq"),
            "worker-pool",
            "-n",
            str(procs),
            "-u",
            redis_url(),
            "-w",
            "rq.worker.SimpleWorker",
            "-l",
            "WARNING",
            "default",
            *extra,
        ]

    def enqueue_one(self, i: int, t_ns: int) -> None:
        self.queue.enqueue(noop, i, t_ns)

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(noop, (i, t)) for i, t in items])


SYSTEM = RQSystem()
