"""Resumable tasks (taskq.step, taskq.iterate) the resumable tests run in worker subprocesses
or in drain(). Each leaves what its functions did in Redis lists the tests read."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

import taskq
from taskq import App, current_job

app = App()  # configured by TASKQ_* variables set by the test fixtures
_clients: dict[str, redis.Redis] = {}


def client() -> redis.Redis:
    """A client of the app's Redis (one per URL: tests point the app at their own server)."""
    url = app.settings.redis_url
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


def _attempt() -> int:
    job = current_job()
    return job.attempt if job else 0


def _logged(tag: str, name: str, value: Any = None) -> Any:
    client().rpush(f"steps:{tag}", name)
    return value


def _s2_fails_once(tag: str) -> str:
    _logged(tag, "s2")
    if _attempt() == 1:
        raise RuntimeError("s2 fails on attempt 1")
    return "two"


@app.task
def three_steps(tag: str) -> list[Any]:
    """s1, s2 (raises on attempt 1), s3."""
    a = taskq.step("s1", _logged, tag, "s1", {"n": 1})
    b = taskq.step("s2", _s2_fails_once, tag)
    c = taskq.step("s3", _logged, tag, "s3", 3)
    return [a, b, c]


def _s3_hangs_once(tag: str) -> int:
    _logged(tag, "s3")
    if _attempt() == 1:
        client().rpush(f"pid:{tag}", os.getpid())
        time.sleep(60)  # the test SIGKILLs this child here
    return 3


@app.task
def killed_in_s3(tag: str) -> int:
    taskq.step("s1", _logged, tag, "s1")
    taskq.step("s2", _logged, tag, "s2")
    return int(taskq.step("s3", _s3_hangs_once, tag))


def _pages(n: int, size: int) -> Any:
    def fetch(cursor: int | None) -> tuple[list[int], int | None]:
        start = cursor or 0
        end = min(n, start + size)
        return list(range(start, end)), (end if end < n else None)

    return fetch


@app.task
def backfill(n: int, tag: str, pause_s: float = 0.0) -> int:
    """Walks 0..n-1 in pages of 250; records each item and the attempt of each run."""
    c = client()
    c.sadd(f"attempts:{tag}", _attempt())
    c.rpush(f"pid:{tag}", os.getpid())
    count = 0
    for item in taskq.iterate("rows", _pages(n, 250)):
        c.rpush(f"items:{tag}", item)
        count += 1
        if pause_s:
            time.sleep(pause_s)
    return count


@app.task(max_run_s=1.0)
def long_walk(n: int, tag: str, pause_s: float) -> None:
    c = client()
    for item in taskq.iterate("rows", _pages(n, 100)):
        if item == 0:
            c.rpush(f"started:{tag}", "long")
        time.sleep(pause_s)
    c.rpush(f"done:{tag}", "long")


@app.task
def short(enqueued_s: float, tag: str) -> None:
    client().rpush(f"delays:{tag}", time.time() - enqueued_s)


def _member_s2(i: int, tag: str) -> int:
    _logged(tag, f"{i}:s2")
    if i == 0 and _attempt() == 1:
        client().rpush(f"pid:{tag}", os.getpid())
        time.sleep(60)  # the test SIGKILLs this child here
    return i * 10


@app.task
def member(i: int, tag: str) -> int:
    taskq.step("s1", _logged, tag, f"{i}:s1")
    return int(taskq.step("s2", _member_s2, i, tag))


@app.task
def collect(results: list[int], tag: str) -> None:
    client().rpush(f"bodies:{tag}", ",".join(str(x) for x in results))


@app.task(max_retries=0)
def bad_value(kind: str) -> None:
    """A step whose value cannot be stored: ``object`` (not msgpack), or too large."""
    value: Any = object() if kind == "type" else "x" * (app.settings.max_result_bytes + 1)
    taskq.step("bad", lambda: value)


@app.task(max_retries=0)
def reads_s1() -> Any:
    return taskq.step("s1", lambda: "fresh")


@app.task(max_retries=0)
def walks_stored(tag: str) -> list[int]:
    return list(taskq.iterate("rows", _pages(10, 5)))
