"""Interrupting one coroutine with a taskq exception (soft time limit, cancellation).

(A sync task is interrupted by a signal handler instead, which raises only while the task's
own code runs: :func:`runs_in`.)

``asyncio.Task.cancel()`` can only raise ``CancelledError``. A task's code should see the
exception a sync task sees instead (:class:`~taskq.errors.SoftTimeLimitExceeded`,
:class:`~taskq.errors.JobCancelled`), and be able to catch it. So the worker awaits the
task's coroutine through :func:`interruptible`, which steps it the way ``await`` does and,
when the asyncio task is cancelled by :func:`interrupt`, throws the chosen exception into the
coroutine at the ``await`` where it waits (and takes the cancellation back with
``Task.uncancel()``, so ``asyncio.timeout()`` blocks in the task keep working).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from types import CodeType, FrameType
from typing import Any, Generic, TypeVar

from taskq.task import Task

T = TypeVar("T")

_pending: dict[asyncio.Task[Any], BaseException] = {}
"""The exception each interrupted asyncio task is to receive."""


def interrupt(task: asyncio.Task[Any], exc: BaseException) -> bool:
    """Raise ``exc`` in ``task``'s coroutine at its current ``await`` (if it runs through
    :func:`interruptible`); returns False if the task is done or already interrupted."""
    if task.done() or task in _pending:
        return False
    _pending[task] = exc
    task.cancel()
    return True


def pending(task: asyncio.Task[Any]) -> BaseException | None:
    """Take the interruption meant for ``task`` that it has not received (it was cancelled
    outside :func:`interruptible`, or before it started)."""
    return _pending.pop(task, None)


class interruptible(Generic[T]):  # lower case: used like a function
    """Await ``coro`` so that :func:`interrupt` can raise its exception inside it."""

    __slots__ = ("_coro",)

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = coro.send(send) if error is None else coro.throw(error)
            except StopIteration as done:
                value: T = done.value
                return value
            try:
                send, error = (yield step), None
            except asyncio.CancelledError as exc:
                send, error = None, _instead_of(exc)
            except GeneratorExit:
                coro.close()
                raise


def _instead_of(cancelled: asyncio.CancelledError) -> BaseException:
    """The exception to throw in place of a cancellation: the interruption, if one is meant
    for this task (the cancellation is then taken back), else the cancellation itself."""
    task = asyncio.current_task()
    exc = _pending.pop(task, None) if task is not None else None
    if exc is None or task is None:
        return cancelled
    task.uncancel()
    return exc


def code_of(task: Task[..., Any]) -> CodeType:
    """The code object whose frame marks "inside the task" (the function's, else Task.run's)."""
    code = getattr(task.fn, "__code__", None)
    return code if isinstance(code, CodeType) else Task.run.__code__


def runs_in(frame: FrameType | None, code: CodeType) -> bool:
    """Whether ``code`` is running in ``frame`` or one of its callers."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
