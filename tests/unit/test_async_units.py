"""Async tasks without Redis: interrupting one coroutine, scoreboard entries per coroutine,
eager mode, and the around_async_job hook."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from taskq import App, current_job
from taskq.context import JobContext
from taskq.middleware import Middleware, arun_around
from taskq.worker.interrupt import interrupt, interruptible, pending
from taskq.worker.outcome import OK, Outcome
from taskq.worker.scoreboard import Scoreboard, slot_size


class Stop(Exception):
    pass


def test_an_interruption_is_raised_at_the_await_and_can_be_caught() -> None:
    log: list[str] = []

    async def job() -> str:
        try:
            await asyncio.sleep(5)
        except Stop:
            log.append("caught")
            await asyncio.sleep(0.01)  # the task may still await while it cleans up
            return "cleaned up"
        return "slept"

    async def main() -> str:
        task = asyncio.ensure_future(interruptible(job()))
        await asyncio.sleep(0.01)
        assert interrupt(task, Stop())
        assert not interrupt(task, Stop())  # one at a time
        return await task

    assert asyncio.run(main()) == "cleaned up" and log == ["caught"]


def test_the_cancellation_is_taken_back_so_asyncio_timeout_still_works() -> None:
    async def job() -> None:
        try:
            await asyncio.sleep(5)
        except Stop:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(1)

    async def main() -> None:
        task = asyncio.ensure_future(interruptible(job()))
        await asyncio.sleep(0.01)
        interrupt(task, Stop())
        await task

    with pytest.raises(TimeoutError):
        asyncio.run(main())


def test_a_plain_cancel_stays_a_cancel_and_values_pass_through() -> None:
    async def main() -> None:
        assert await interruptible(asyncio.sleep(0, result=7)) == 7
        task = asyncio.ensure_future(interruptible(asyncio.sleep(5)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pending(task) is None

    asyncio.run(main())


def test_one_slot_holds_a_running_entry_per_coroutine() -> None:
    board = Scoreboard(2, jobs=50)
    assert board.slot_size == slot_size(50) and board.slot_size % 4096 == 0
    slot = board.slot(1)
    for at in range(3):
        hard_s = 5.0 if at == 1 else None
        slot.start(0, f"{at}-0", "t", f"job{at}", hard_s, at=at, recorded=at != 2)
    view = board.read(1)
    assert [j.job_id for j in view.running] == ["job0", "job1", "job2"]
    assert [j.recorded for j in view.running] == [True, True, False]
    assert view.busy and view.oldest == view.running[0]  # job0
    assert [j.hard_deadline > 0 for j in view.running] == [False, True, False]
    slot.finish("ok", at=0)
    view = board.read(1)
    assert [j.at for j in view.running] == [1, 2] and view.oldest == view.running[0]
    assert view.processed == 1 and not board.read(0).busy
    # The master flags one entry for cancellation; the child reads that entry only.
    second = view.running[0]
    assert board.request_cancel(1, second.at, second.seq)
    assert slot.cancel_requested(1) and not slot.cancel_requested(2)
    assert board.read(1).running[0].cancel and board.read(1).running[0].recorded
    assert not board.request_cancel(1, 0, second.seq)  # entry 0 is idle
    slot.finish("retry", at=1)
    slot.finish("ok", at=2)
    idle = board.read(1)
    assert not idle.busy and idle.running == () and slot.seq == 3


def test_eager_mode_runs_an_async_task_to_its_end() -> None:
    app = App(eager=True)

    @app.task(store_result=True)
    async def double(x: int) -> tuple[int, bool]:
        await asyncio.sleep(0)
        return 2 * x, current_job() is not None

    assert double.is_async
    assert double.delay(2).result() == (4, True)  # (a tuple stays a tuple)

    async def from_a_loop() -> object:
        return (await double.adelay(3)).result()

    assert asyncio.run(from_a_loop()) == (6, True)


def test_an_async_task_called_inline_sees_its_job_while_it_runs() -> None:
    app = App()

    @app.task
    async def who() -> str | None:
        await asyncio.sleep(0)
        job = current_job()
        return job.task if job else None

    assert asyncio.run(who()) == who.name
    assert current_job() is None


def test_around_async_job_hooks_wrap_the_run_in_order() -> None:
    calls: list[str] = []

    class Named(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        async def around_async_job(
            self, job: JobContext, run: Callable[[], Awaitable[Outcome]]
        ) -> Outcome:
            calls.append(f"{self.name} in")
            outcome = await run()
            calls.append(f"{self.name} out")
            return outcome

    class Broken(Middleware):
        async def around_async_job(
            self, job: JobContext, run: Callable[[], Awaitable[Outcome]]
        ) -> Outcome:
            raise RuntimeError("hook bug")

    async def run() -> Outcome:
        calls.append("run")
        return Outcome(OK, None)  # type: ignore[arg-type]

    job = JobContext("id", "t", 1, 1, "q", "normal", 0, None)
    outcome = asyncio.run(arun_around([Named("a"), Broken(), Named("b")], job, run))
    assert outcome.kind == OK
    assert calls == ["a in", "b in", "run", "b out", "a out"]


def test_an_eager_async_task_raises_its_own_error_unchained() -> None:
    app = App(eager=True)

    @app.task
    async def boom() -> None:
        raise KeyError("mine")

    with pytest.raises(KeyError) as caught:
        boom.delay()
    assert caught.value.__context__ is None  # no taskq internals chained to it
