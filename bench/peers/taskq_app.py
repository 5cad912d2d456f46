"""taskq, the system under test (``taskq worker -A ... -c N``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common.job import job
from bench.peers.base import Item, System, redis_url
from taskq import App

app = App(redis_url=redis_url(), queue="tasks")


@app.task
def noop(i: int, t_ns: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


def _taskq_cli() -> list[str]:
    """The ``taskq`` console script of this venv, else ``python -m taskq``."""
    script = Path(sys.executable).parent / "taskq"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "taskq"]


class TaskqSystem(System):
    """taskq: ``delay`` for one job, ``starmap`` for a batch."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        return [
            *_taskq_cli(),
            "worker",
            "-A",
            "bench.peers.taskq_app:app",
            "-c",
            str(procs),
            "--loglevel",
            "warning",
            *extra,
        ]

    def enqueue_one(self, i: int, t_ns: int) -> None:
        noop.delay(i, t_ns)

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        noop.starmap(items)


SYSTEM = TaskqSystem()
