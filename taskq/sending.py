"""Sending jobs to Redis: the producer's exchanges, written once as steps
(:mod:`taskq.broker.steps`) that ``delay()`` runs on the blocking link and ``await adelay()``
on the asyncio one."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING

from taskq.broker.enqueue import publish_command, schedule_command
from taskq.broker.replies import text
from taskq.broker.steps import Steps
from taskq.errors import BrokerUnavailable
from taskq.job import Job
from taskq.message import Message, now_ms

if TYPE_CHECKING:
    from taskq.app import App

BATCH_SIZE = 1_000
"""Jobs per pipelined round trip of a bulk enqueue."""


def send_steps(app: App, msg: Message, body: bytes, in_ms: int | None) -> Steps[Job]:
    """One job to its stream, or to the schedule if it has a countdown or a future eta."""
    delayed = in_ms is not None or _later(msg, now_ms())
    command = schedule_command(msg, body, in_ms) if delayed else publish_command(msg, body)
    try:
        [reply] = yield [command]
    except BrokerUnavailable as exc:
        raise enqueue_unavailable(exc) from exc
    return handle(app, msg, None if delayed else text(reply))


def send_many_steps(app: App, messages: Iterable[Message]) -> Steps[list[Job]]:
    """Many jobs, one round trip per batch of :data:`BATCH_SIZE`; every job of a batch is
    encoded and checked before any is sent, so a bad argument sends nothing of its batch."""
    jobs: list[Job] = []
    iterator = iter(messages)
    while batch := list(itertools.islice(iterator, BATCH_SIZE)):
        now = now_ms()
        commands = [
            schedule_command(m, body, None) if _later(m, now) else publish_command(m, body)
            for m, body in ((m, app.encode(m)) for m in batch)
        ]
        try:
            replies = yield commands
        except BrokerUnavailable as exc:
            raise enqueue_unavailable(exc) from exc
        jobs += [
            handle(app, m, text(r) if isinstance(r, bytes) else None)
            for m, r in zip(batch, replies, strict=True)
        ]
    return jobs


def handle(app: App, msg: Message, entry_id: str | None) -> Job:
    """The job's handle; ``eta_ms`` only for a job that waits in the schedule (no entry id)."""
    eta = None if entry_id else msg.eta_ms
    stores = msg.result_ttl_s is not None
    return Job(msg.id, msg.task, msg.queue, msg.priority, entry_id, eta, stores, app)


def enqueue_unavailable(exc: BrokerUnavailable) -> BrokerUnavailable:
    """A timed-out send says that the job may have gone in all the same."""
    if not exc.timed_out:
        return exc
    return BrokerUnavailable(f"{exc}; the job may or may not have been enqueued", timed_out=True)


def _later(msg: Message, now: int) -> bool:
    return msg.eta_ms is not None and msg.eta_ms > now
