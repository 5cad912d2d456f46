"""Sending jobs to Redis: the producer's exchanges, written once as steps
(:mod:`taskq.broker.steps`) that ``delay()`` runs on the blocking link and ``await adelay()``
on the asyncio one."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING

from taskq.broker.enqueue import publish_command, schedule_command
from taskq.broker.replies import text
from taskq.broker.resp import Command
from taskq.broker.steps import Steps
from taskq.errors import BrokerUnavailable
from taskq.job import Job
from taskq.message import Message, now_ms

if TYPE_CHECKING:
    from taskq.protocols import Producer

BATCH_SIZE = 1_000
"""Jobs per pipelined round trip of a bulk enqueue."""


def send_steps(app: Producer, msg: Message, body: bytes, in_ms: int | None) -> Steps[Job]:
    """One job to its stream, or to the schedule if it has a countdown or a future eta."""
    delayed = in_ms is not None or _later(msg, now_ms())
    command = schedule_command(msg, body, in_ms) if delayed else publish_command(msg, body)
    wait = durable(app) if app.settings.durable_enqueue else ()
    try:
        reply, *confirmed = yield (command, *wait) if wait else (command,)
    except BrokerUnavailable as exc:
        raise enqueue_unavailable(exc) from exc
    if confirmed:
        check_durable(app, confirmed)
    return handle(app, msg, None if delayed else text(reply))


def send_many_steps(app: Producer, messages: Iterable[Message]) -> Steps[list[Job]]:
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
        wait = durable(app)
        try:
            replies = yield [*commands, *wait]
        except BrokerUnavailable as exc:
            raise enqueue_unavailable(exc) from exc
        if wait:
            check_durable(app, replies[-1:])
            replies = replies[:-1]
        jobs += [
            handle(app, m, text(r) if isinstance(r, bytes) else None)
            for m, r in zip(batch, replies, strict=True)
        ]
    return jobs


def handle(app: Producer, msg: Message, entry_id: str | None) -> Job:
    """The job's handle; ``eta_ms`` only for a job that waits in the schedule (no entry id;
    '' for a job staged on a fair queue, which has none yet either)."""
    entry_id = entry_id or None
    eta = None if entry_id else msg.eta_ms
    stores = msg.recorded
    return Job(msg.id, msg.task, msg.queue, msg.priority, entry_id, eta, stores, app)


def durable(app: Producer) -> list[Command]:
    """``WAIT 1 <timeout>`` after the writes, with ``durable_enqueue`` (else nothing)."""
    s = app.settings
    return [("WAIT", 1, s.durable_enqueue_timeout_ms)] if s.durable_enqueue else []


def check_durable(app: Producer, confirmed: list[object]) -> None:
    """Raises BrokerUnavailable if ``durable_enqueue`` is on and no replica confirmed."""
    if confirmed and not (isinstance(confirmed[0], int) and confirmed[0] >= 1):
        # (0 replicas, or an error: WAIT on a replica, or a server without replication)
        raise BrokerUnavailable(
            "the job is on the master, but no replica confirmed it within "
            f"{app.settings.durable_enqueue_timeout_ms} ms (durable_enqueue): a failover "
            "now could lose it",
            timed_out=True,
        )


def enqueue_unavailable(exc: BrokerUnavailable) -> BrokerUnavailable:
    """A timed-out send says that the job may have gone in all the same."""
    if not exc.timed_out:
        return exc
    return BrokerUnavailable(f"{exc}; the job may or may not have been enqueued", timed_out=True)


def _later(msg: Message, now: int) -> bool:
    return msg.eta_ms is not None and msg.eta_ms > now
