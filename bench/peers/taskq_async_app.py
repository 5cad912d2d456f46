"""taskq with async tasks (async family).

``@app.task async def nap(): await asyncio.sleep(0.05)``; the worker
``taskq worker -A ... -c 2 --async-concurrency 500``; the producer ``await nap.adelay()``.
:func:`problem` says what is missing on a taskq without them ("not available yet").
Also the no-op drain: ``anoop`` (async) here against ``snoop`` (sync) in
bench/peers/taskq_sync_noop_app.py, an app without async tasks.
"""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

from bench.common.record import record
from bench.peers.base import redis_url
from bench.peers.featurebase import NAP_S, Async, taskq_cli
from taskq import App

app = App(redis_url=redis_url(), queue="tasks")


@app.task
async def nap(i: int) -> None:
    """Async task: sleep, then record completion (no Redis round trip)."""
    await asyncio.sleep(NAP_S)
    record(i)


@app.task
async def anoop(i: int) -> None:
    """Async no-op: record completion."""
    record(i)


def problem(family: str) -> str | None:
    """Why the async family cannot run on this taskq yet, or None."""
    if not callable(getattr(nap, "adelay", None)):
        return "Task has no adelay() (async enqueue)"
    help_text = subprocess.run(
        [*taskq_cli(), "worker", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    if "--async-concurrency" not in help_text:
        return "taskq worker has no --async-concurrency option"
    return None


class TaskqAsync(Async):
    """``await nap.adelay(i)``; ``taskq worker -c N --async-concurrency C``."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [[
            *taskq_cli(), "worker", "-A", "bench.peers.taskq_async_app:app", "-c", str(procs),
            "--async-concurrency", str(concurrency), "--loglevel", "warning",
        ]]  # fmt: skip

    async def enqueue(self, i: int) -> None:
        adelay: Any = nap.adelay
        await adelay(i)

    def noop_enqueue(self, kind: str, n: int) -> None:
        """``n`` no-op jobs of ``kind`` (async or sync), pipelined."""
        from bench.peers.taskq_sync_noop_app import snoop

        (anoop if kind == "async" else snoop).map(range(n))

    def noop_argvs(self, kind: str, procs: int, concurrency: int) -> list[list[str]]:
        if kind == "async":
            return self.worker_argvs(procs, concurrency)
        return [[
            *taskq_cli(), "worker", "-A", "bench.peers.taskq_sync_noop_app:app", "-c", str(procs),
            "--loglevel", "warning",
        ]]  # fmt: skip


ASYNC = TaskqAsync()
