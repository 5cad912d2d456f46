"""Exchanges with Redis written once, run on the blocking link or on the asyncio one.

A *steps* generator yields the commands of each round trip (or a :class:`Pause`), receives
their replies, and returns its result; a :class:`~taskq.errors.BrokerError` raised by a
round trip is thrown into it at that ``yield``, so it can wait and try again. :func:`run`
drives it on a :class:`~taskq.broker.link.Link`, :func:`arun` on an
:class:`~taskq.broker.alink.AsyncLink`: ``job.result()`` and ``await job.aresult()`` are the
same code, and neither blocks the other's way of waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from taskq.broker.link import Link
from taskq.broker.resp import Command
from taskq.errors import BrokerError

if TYPE_CHECKING:
    from taskq.broker.alink import AsyncLink

T = TypeVar("T")


class Pause:
    """Wait this long before the next step (a reconnect backoff)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


Steps = Generator["Sequence[Command] | Pause", Any, T]
"""Yields round trips or pauses, receives replies (None after a pause), returns a ``T``."""


def one(command: Command) -> Steps[Any]:
    """The reply of one command."""
    [reply] = yield [command]
    return reply


def run(link: Link, steps: Steps[T], *, errors: bool = True) -> T:
    """Drive ``steps`` on the blocking link (``errors``: see ``Link.pipeline``)."""
    try:
        step = next(steps)
        while True:
            if isinstance(step, Pause):
                time.sleep(step.seconds)
                step = steps.send(None)
                continue
            try:
                replies = link.pipeline(step, errors=errors)
            except BrokerError as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(link: AsyncLink, steps: Steps[T], *, errors: bool = True) -> T:
    """Drive ``steps`` on the asyncio link, never blocking the event loop."""
    try:
        step = next(steps)
        while True:
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
                step = steps.send(None)
                continue
            try:
                replies = await link.pipeline(step, errors=errors)
            except BrokerError as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
