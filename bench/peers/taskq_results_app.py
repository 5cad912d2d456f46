"""taskq with stored results (results and chords families; the results family's drain).

Stored results: ``App(redis_url=..., store_results=True)``, so every job keeps
its status record ``tasks:job:<id>`` and, once it ends, if a waiter registered, the
one-element done list ``tasks:done:<id>`` that ``add.delay(1, 2).result(timeout=5)`` blocks
on (``BLMOVE``); both are the new keys under the queue's prefix (``tasks:``) that the memory
phase sizes.

:data:`SYSTEM` is the results-on half of the results family's "drain with results on vs
off": the main bench's ``noop`` task (:func:`bench.common.job.job`) on this app, drained by
``bench.compare.agent`` exactly as ``bench/peers/taskq_app.py``'s plain app is (the results-off
half).

The chords family runs ``chord(group(add.s(i, i) ...), tsum.s()).apply_async().result(...)``.
The module also imports on an older taskq checkout (for comparing versions): without stored
results the tasks are registered on a plain app, and :func:`problem` names what is missing
(the setting, or the workflow API) for every family that needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import taskq
from bench.common.job import job
from bench.peers.base import Item, System, redis_url
from bench.peers.featurebase import Chords, Results, taskq_cli


def _make_app() -> tuple[taskq.App, str | None]:
    """The app with stored results, or a plain one and why ``store_results`` was refused."""
    try:
        return taskq.App(redis_url=redis_url(), queue="tasks", store_results=True), None
    except Exception as exc:  # ConfigError (unknown setting) on a taskq without results
        plain = taskq.App(redis_url=redis_url(), queue="tasks")
        why = str(exc).split(";")[0]  # ConfigError lists every known setting after the ";"
        return plain, f"App does not accept store_results ({type(exc).__name__}: {why})"


app, _STORE_PROBLEM = _make_app()


@app.task
def add(a: int, b: int) -> int:
    """Header / results task."""
    return a + b


@app.task
def tsum(values: list[int]) -> int:
    """Chord body: the list of header results."""
    return sum(values)


@app.task
def noop(i: int, t_ns: int) -> None:
    """The drain's task, as in bench/peers/taskq_app.py: one record and one INCR; its
    result (None) is stored."""
    job(i)


def problem(family: str) -> str | None:
    """Why ``family`` cannot run on this taskq yet, or None."""
    if _STORE_PROBLEM:
        return _STORE_PROBLEM
    if family == "chords":
        missing = [n for n in ("chord", "group") if not hasattr(taskq, n)]
        if missing or not callable(getattr(add, "s", None)):
            return f"taskq has no {', '.join(missing) or 'Task.s'} (workflows)"
    return None


def worker_argv(procs: int, extra: Sequence[str] = ()) -> list[str]:
    """The taskq worker on this app (the same command line as the main bench's)."""
    return [
        *taskq_cli(), "worker", "-A", "bench.peers.taskq_results_app:app", "-c", str(procs),
        "--loglevel", "warning", *extra,
    ]  # fmt: skip


class TaskqResults(Results):
    """``add.delay(1, 2).result(timeout=...)``."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")
    result_keys = "tasks:*"  # new keys under the queue's prefix: the results

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [worker_argv(procs)]

    def submit(self) -> Any:
        return add.delay(1, 2)

    def wait(self, handle: Any, timeout_s: float) -> Any:
        return handle.result(timeout=timeout_s)


class TaskqChords(Chords):
    """``chord(group(add.s(i, i) ...), tsum.s()).apply_async()``; plain ``add.starmap``."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [worker_argv(procs)]

    def submit_chord(self, n: int) -> Any:
        header = taskq.group(add.s(i, i) for i in range(n))  # type: ignore[attr-defined]
        return taskq.chord(header, tsum.s()).apply_async()  # type: ignore[attr-defined]

    def wait_chord(self, handle: Any, timeout_s: float) -> Any:
        return handle.result(timeout=timeout_s)

    def submit_plain(self, n: int) -> Any:
        return add.starmap((i, i) for i in range(n))

    def wait_plain(self, handles: Any, timeout_s: float) -> None:
        handles[-1].result(timeout=timeout_s)  # jobs run in order: the last one ends last

    def plain_results(self, handles: Any, timeout_s: float) -> list[Any]:
        return [h.result(timeout=timeout_s) for h in handles]


class TaskqResultsDrain(System):
    """``bench.compare.agent``'s view of this app (the drain with results on): ``noop.delay``
    for one job, ``noop.starmap`` for a batch, as bench/peers/taskq_app.py does on the plain
    app."""

    name = "taskq-results-on"
    packages = ("taskq", "redis", "hiredis", "msgpack")

    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        return worker_argv(procs, extra)

    def enqueue_one(self, i: int, t_ns: int) -> None:
        noop.delay(i, t_ns)

    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        noop.starmap(items)


RESULTS = TaskqResults()
CHORDS = TaskqChords()
SYSTEM = TaskqResultsDrain()
