"""taskq with results stored (results and chords families), written against the planned API.

Planned: ``App(redis_url=..., store_results=True)``; ``add.delay(1, 2).result(timeout=5)``;
results in keys under the queue's prefix (``tasks:``); ``from taskq import chord, group``;
``chord(group(add.s(i, i) ...), tsum.s()).apply_async().result(timeout=...)``. Until taskq
has them, :func:`problem` says which is missing and the bench reports "not available yet".
The module still imports (the tasks are registered on an app without stored results).
"""

from __future__ import annotations

from typing import Any

import taskq
from bench.peers.base import redis_url
from bench.peers.featurebase import Chords, Results, taskq_cli


def _make_app() -> tuple[taskq.App, str | None]:
    """The app with stored results, or a plain one and why ``store_results`` was refused."""
    planned: dict[str, Any] = {"store_results": True}  # not a known setting yet
    try:
        return taskq.App(redis_url=redis_url(), queue="tasks", **planned), None
    except Exception as exc:  # ConfigError (unknown setting) or TypeError, for now
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


def problem(family: str) -> str | None:
    """Why ``family`` cannot run on this taskq yet, or None."""
    if _STORE_PROBLEM:
        return _STORE_PROBLEM
    if family == "chords":
        missing = [n for n in ("chord", "group") if not hasattr(taskq, n)]
        if missing or not callable(getattr(add, "s", None)):
            return f"taskq has no {', '.join(missing) or 'Task.s'} (workflows)"
    return None


def worker_argv(procs: int) -> list[str]:
    """The taskq worker on this app."""
    return [
        *taskq_cli(), "worker", "-A", "bench.peers.taskq_results_app:app", "-c", str(procs),
        "--loglevel", "warning",
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


RESULTS = TaskqResults()
CHORDS = TaskqChords()
