"""Celery 5 with the Redis broker; prefork pool (``celery worker -c N``)."""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery, group

from bench.common.job import job
from bench.peers.base import Item, System, cli, redis_url

app = Celery("bench", broker=redis_url())
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)


@app.task
def noop(i: int, t_ns: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


class CelerySystem(System):
    """Celery: ``delay`` for one job, a ``group`` for a batch."""

    name = "celery"
    packages = ("celery", "kombu", "redis")

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        # mingle/gossip/heartbeat only talk to other workers; turning them off
        # is the usual advice and does not change delivery semantics.
        return [
            cli("celery"),
            "-A",
            "bench.peers.celery_app",
            "worker",
            "-P",
            "prefork",
            "-c",
            str(procs),
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            *extra,
        ]

    def enqueue_one(self, i: int, t_ns: int) -> None:
        noop.delay(i, t_ns)

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        group(noop.s(i, t) for i, t in items).apply_async()


SYSTEM = CelerySystem()
