"""taskq periodic jobs (the periodic family, bench/features/periodic_bench.py).

``beat()`` runs every second (``app.add_periodic(beat, every=1, name="beat")``) on queue
``pbench``: every ``taskq worker`` of that queue schedules it, and exactly one job should be
enqueued per tick. Each run appends one record to the Redis list :data:`BEATS`, through a
plain redis-py client of its own (opened lazily in each process, after any fork)::

    <scheduled_ms> <job id> <start ms, 3 decimals> <pid>

``scheduled_ms`` is the tick the job is for (``taskq.current_job().scheduled_ms``); the
start time is ``time.time_ns()`` when the task body starts. The bench reads the list after
the workers have stopped: ticks, duplicates, gaps, lateness.

The app's other settings come from ``TASKQ_*`` variables, as every taskq app's do (the bench
sets ``TASKQ_VISIBILITY_TIMEOUT_MS`` and ``TASKQ_SWEEP_INTERVAL_MS`` for its kill phase).
"""

from __future__ import annotations

import os
import time

from redis import Redis

import taskq
from bench.common.job import counter_client
from bench.peers.base import redis_url
from bench.peers.featurebase import Feature, taskq_cli

QUEUE = "pbench"
NAME = "beat"  # the schedule's name: its field in the hash <queue>:periodic
EVERY_S = 1
BEATS = "beats"
MODULE = "bench.peers.taskq_periodic_app"

app = taskq.App(redis_url=redis_url())

_pid = -1
_client: Redis | None = None


def _redis() -> Redis:
    """This process's client of the bench's Redis (created on first use, after any fork)."""
    global _pid, _client
    if _pid != os.getpid():
        _client = counter_client(redis_url())
        _pid = os.getpid()
    assert _client is not None
    return _client


@app.task(queue=QUEUE)
def beat() -> None:
    """One record per run: the tick, the job id, the start time, the process."""
    start_ms = time.time_ns() / 1e6
    job = taskq.current_job()
    if job is None:  # called outside a worker: nothing to record
        return
    line = f"{job.scheduled_ms} {job.id} {start_ms:.3f} {os.getpid()}"
    _redis().rpush(BEATS, line)


def _schedule() -> str | None:
    """Declare the schedule; why it could not be, or None."""
    if not hasattr(app, "add_periodic"):
        return "App has no add_periodic (periodic jobs)"
    if not hasattr(taskq, "current_job"):
        return "taskq has no current_job"
    try:
        app.add_periodic(beat, every=EVERY_S, name=NAME)
    except Exception as exc:  # a taskq whose add_periodic differs
        return f"app.add_periodic(beat, every=1, name='beat') failed ({type(exc).__name__}: {exc})"
    return None


_PROBLEM = _schedule()


def problem(family: str) -> str | None:
    """Why the periodic family cannot run on this taskq, or None."""
    if _PROBLEM:
        return _PROBLEM
    fields = getattr(getattr(taskq, "JobContext", None), "_fields", None)
    if fields is None:
        from taskq.context import JobContext

        fields = JobContext._fields
    if "scheduled_ms" not in fields:
        return "taskq.current_job() has no scheduled_ms"
    return None


class TaskqPeriodic(Feature):
    """``procs`` separate ``taskq worker -Q pbench -c 1`` processes (each master schedules)."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")
    queue = QUEUE
    schedule = NAME
    beats = BEATS

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        argv = [
            *taskq_cli(), "worker", "-A", f"{MODULE}:app", "-Q", QUEUE, "-c", "1",
            "--loglevel", "warning",
        ]  # fmt: skip
        return [list(argv) for _ in range(procs)]


PERIODIC = TaskqPeriodic()
