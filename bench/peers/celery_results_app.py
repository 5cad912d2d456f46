"""Celery 5 with the Redis broker and the Redis result backend (results and chords families).

Chords: Celery documents that tasks in a chord must not ignore their results; its Redis
backend joins a chord natively (a Lua script per header result keeps the results and the
counter in the backend, and the header that completes the chord sends the body), so no
``chord_unlock`` polling task runs. ``result_extended`` is not needed for that.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, chord, group
from celery.result import AsyncResult

from bench.peers.base import cli, redis_url
from bench.peers.featurebase import Chords, Results

app = Celery("bench_results", broker=redis_url(), backend=redis_url())
app.conf.update(task_ignore_result=False, broker_connection_retry_on_startup=True)


@app.task
def add(a: int, b: int) -> int:
    """Header / results task."""
    return a + b


@app.task
def tsum(values: list[int]) -> int:
    """Chord body: the list of header results."""
    return sum(values)


def worker_argv(procs: int) -> list[str]:
    """The same prefork worker as bench/peers/celery_app.py, on this app."""
    return [
        cli("celery"), "-A", "bench.peers.celery_results_app", "worker", "-P", "prefork",
        "-c", str(procs), "--loglevel", "WARNING", "--without-mingle", "--without-gossip",
        "--without-heartbeat",
    ]  # fmt: skip


class CeleryResults(Results):
    """``add.delay(1, 2).get(timeout=...)`` (the Redis backend waits through pub/sub)."""

    name = "celery"
    packages = ("celery", "kombu", "redis")
    result_keys = "celery-task-meta-*"

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [worker_argv(procs)]

    def submit(self) -> AsyncResult:
        return add.delay(1, 2)

    def wait(self, handle: Any, timeout_s: float) -> Any:
        return handle.get(timeout=timeout_s)


class CeleryChords(Chords):
    """``chord(group(add.s(i, i) ...), tsum.s()).apply_async().get(timeout=..., ...)``."""

    name = "celery"
    packages = ("celery", "kombu", "redis")

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [worker_argv(procs)]

    def submit_chord(self, n: int) -> AsyncResult:
        return chord(group(add.s(i, i) for i in range(n)), tsum.s()).apply_async()

    def wait_chord(self, handle: Any, timeout_s: float) -> Any:
        # get() also checks every header's state each time it wakes up (follow_parents):
        # N GETs per wake-up, which slows the chord itself (2,000 headers: 13.4 s instead
        # of 5.2 s in a check). Waiting for the body alone measures the chord, not that.
        return handle.get(timeout=timeout_s, follow_parents=False)


RESULTS = CeleryResults()
CHORDS = CeleryChords()
