"""taskq rate limits (the limits family, bench/features/limits_bench.py).

Two tasks on queue ``lbench``, same (default) priority:

* ``limited(i)``, ``rate_limit="50/s"``: writes job ``LIMITED_BASE + i``'s start record
  (:func:`bench.common.record.record`, ``time.time_ns()`` at the task's start, to a
  per-process file: no Redis round trip) and nothing else, so every Redis command of its
  phase is the queue's;
* ``noop(i)``, no limit: the main bench's task body (:func:`bench.common.job.job`: the
  record, then one ``INCR`` of ``bench:incr``), the counter a drain is timed by.

The bench reads the records after the workers stopped: starts per window, per second, and
which limited jobs started during a drain.
"""

from __future__ import annotations

import taskq
from bench.common.job import job
from bench.common.record import record
from bench.peers.base import redis_url
from bench.peers.featurebase import Feature, taskq_cli

QUEUE = "lbench"
RATE = "50/s"
LIMITED_BASE = 1 << 40  # record indices of limited jobs, apart from the noop jobs'
MODULE = "bench.peers.taskq_limits_app"

app = taskq.App(redis_url=redis_url(), queue=QUEUE)


@app.task(rate_limit=RATE)
def limited(i: int) -> None:
    """A start record, nothing else."""
    record(LIMITED_BASE + i)


@app.task
def noop(i: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


def problem(family: str) -> str | None:
    """Why the limits family cannot run on this taskq, or None (a taskq without rate limits
    already fails at ``@app.task(rate_limit=...)``, reported as the probe's error)."""
    if getattr(limited.options, "rate_limit", None) != RATE:
        return f"the task's options have no rate_limit {RATE!r}"
    return None


class TaskqLimits(Feature):
    """``procs`` separate ``taskq worker -c <concurrency>`` commands, each its own session."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")
    queue = QUEUE
    rate = RATE
    limited_base = LIMITED_BASE
    limited_task = limited.name

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        argv = [
            *taskq_cli(), "worker", "-A", f"{MODULE}:app", "-c", str(concurrency or 2),
            "--loglevel", "warning",
        ]  # fmt: skip
        return [list(argv) for _ in range(procs)]

    def enqueue_limited(self, n: int, batch: int = 1_000) -> None:
        """``n`` limited jobs, bulk (``starmap``, batches of ``batch``)."""
        for lo in range(0, n, batch):
            limited.starmap((i,) for i in range(lo, min(n, lo + batch)))

    def enqueue_noop(self, n: int, batch: int = 1_000) -> None:
        """``n`` unlimited no-op jobs, bulk (``starmap``, batches of ``batch``)."""
        for lo in range(0, n, batch):
            noop.starmap((i,) for i in range(lo, min(n, lo + batch)))


LIMITS = TaskqLimits()
