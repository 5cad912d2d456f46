"""The asyncio producer (issue 16, point 3): enqueue, results and status from an event loop,
against a real Redis and a real worker. Under asyncio debug mode, any callback that holds the
loop longer than SLOW_S fails the test; and the blocking link is out of reach meanwhile, so a
single blocking round trip (far shorter than SLOW_S) fails it too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from taskq import App, ResultTimeout
from taskq.message import Message
from tests import tasks
from tests.conftest import WorkerProcess, runs

T = TypeVar("T")
SLOW_S = 0.2
"""Generous for a loaded 2-core machine; a blocking wait for a result takes seconds."""


@pytest.fixture
def in_loop(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Coroutine[Any, Any, T]], T]]:
    """Run a coroutine in a debug-mode loop, without the blocking link; fail on any
    slow-callback warning."""

    def blocking_link(app: App) -> None:
        raise AssertionError("the blocking Redis link was used inside the event loop")

    def run(coro: Coroutine[Any, Any, T]) -> T:
        async def main() -> T:
            asyncio.get_running_loop().slow_callback_duration = SLOW_S
            try:
                with monkeypatch.context() as patch:
                    patch.setattr(App, "link", property(blocking_link))
                    return await coro
            finally:
                await tasks.app.aclose()

        return asyncio.run(main(), debug=True)

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        yield run
    slow = [r.getMessage() for r in caplog.get_records("call") if r.name == "asyncio"]
    assert slow == []


@pytest.fixture
def worker(task_app: App, start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    return start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning")


def test_enqueue_and_await_results(
    task_app: App, worker: WorkerProcess, in_loop: Callable[..., Any]
) -> None:
    async def main() -> list[Any]:
        job = await tasks.add.adelay(2, 3)
        later = await tasks.add.aapply_async((4, 5), countdown=0.2, priority="high")
        many = await task_app.aenqueue_many(
            Message(tasks.add.name, (i, i), result_ttl_s=60) for i in range(20)
        )
        chained = await tasks.add.aapply_async((1, 1), link=tasks.add.s(10))
        values = [await job.aresult(timeout=20), await later.aresult(timeout=20)]
        values.append([await m.aresult(timeout=20) for m in many])
        values.append((await job.astatus()).state)
        values.append(await chained.aresult(timeout=20))
        found = await task_app.ajob(job.id)  # a handle from the record alone
        values.append((found.task, await found.aresult(timeout=5)))
        return values

    done, later, many, state, first, found = in_loop(main())
    assert (done, later, many, state, first) == (5, 9, [2 * i for i in range(20)], "succeeded", 2)
    assert found == (tasks.add.name, 5)


def test_a_unique_enqueue_from_async_code_returns_the_holder(
    task_app: App, worker: WorkerProcess, in_loop: Callable[..., Any]
) -> None:
    async def main() -> tuple[str, str, int]:
        first = await tasks.unique_report.adelay(7, 0.5)
        second = await tasks.unique_report.adelay(7, 0.5)
        return first.id, second.id, await second.aresult(timeout=20)

    first, second, value = in_loop(main())
    assert first == second and value == 7
    assert len([x for x in runs_of(task_app) if x.get("tag") == "unique_report"]) == 1


def test_waiting_for_a_result_leaves_the_loop_free(
    task_app: App, in_loop: Callable[..., Any]
) -> None:
    """No worker runs: the wait times out, and a ticker shares the loop all along."""

    async def main() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        job = await tasks.add.adelay(1, 2)
        with pytest.raises(ResultTimeout):
            await job.aresult(timeout=1.0)
        ticker.cancel()
        return ticks

    assert in_loop(main()) >= 50  # a blocked loop would tick about once


def test_each_event_loop_has_its_own_pool(task_app: App, in_loop: Callable[..., Any]) -> None:
    async def link_of() -> object:
        await tasks.echo.adelay("x")
        return task_app.alink

    # Held, not compared by id(): a freed first link's address can be the second's.
    first, second = in_loop(link_of()), in_loop(link_of())
    assert first is not second  # the first loop's pool was closed with it (aclose)
    assert not task_app._alinks


def runs_of(app: App) -> list[dict[str, Any]]:
    import redis

    return runs(redis.Redis.from_url(app.settings.redis_url))
