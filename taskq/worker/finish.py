"""What follows a run: park a retry, dead-letter a failure, or hand a job back.

(A success needs nothing here: the worker's next fetch acks and deletes it.)
"""

from __future__ import annotations

import logging

from taskq.broker import Broker, Delivery
from taskq.executor import DEAD, OK, RETRY, Executor, Outcome, Prepared
from taskq.message import with_retries
from taskq.middleware import emit

logger = logging.getLogger(__name__)

ARROWS = {OK: "←", RETRY: "↻", DEAD: "✗"}


def settle(broker: Broker, executor: Executor, o: Outcome, *, owner: str) -> None:
    """Record a failure's fate in Redis (fenced by ``owner``), then log it and tell middleware."""
    d = o.delivery
    if o.kind == RETRY:
        broker.park(d, owner=owner, delay_ms=o.delay_ms)
    elif o.kind == DEAD:
        broker.dead_letter(d, owner=owner, fields=dead_letter_fields(o, worker=owner))
    log_outcome(o)
    emit(executor.app.middleware, "after_job", o)


def hand_back(broker: Broker, executor: Executor, d: Delivery, *, owner: str) -> None:
    """Put a pending entry back in its own stream without using up an attempt.

    The body is patched, not rebuilt, so fields this version does not know survive. An entry
    that cannot run at all (bad input) goes to the dead-letter stream instead.
    """
    prepared = executor.prepare(d)
    if isinstance(prepared, Outcome):
        settle(broker, executor, prepared, owner=owner)
    else:
        body = with_retries(d.body or b"", prepared.attempt - 1)
        broker.requeue(d, task=prepared.msg.task, body=body, owner=owner)


def settle_exited(
    broker: Broker,
    executor: Executor,
    consumer: str,
    running: tuple[str, str] | None,
    cause: str,
) -> list[str]:
    """Deal with every entry pending under the consumer of a process that exited.

    The entry it was running (``running``: stream and entry id) failed with ``cause`` and
    counts as an attempt; every other one (prefetched, not started) goes back uncounted. The
    consumer is then deleted. Returns the kinds (retry or dead) of the failures recorded.
    """
    failures = []
    for d in broker.pending_of(consumer):
        prepared = executor.prepare(d) if (d.stream, d.entry_id) == running else None
        if isinstance(prepared, Prepared):
            outcome = lost(prepared, cause)
            settle(broker, executor, outcome, owner=consumer)
            failures.append(outcome.kind)
        else:
            hand_back(broker, executor, d, owner=consumer)
    broker.forget_consumer(consumer)
    return failures


def lost(p: Prepared, cause: str) -> Outcome:
    """The outcome of a run whose process died under it: a failed attempt."""
    retry = p.policy.should_retry(p.attempt)
    delay_ms = p.policy.delay_ms(p.attempt) if retry else 0
    return Outcome(
        RETRY if retry else DEAD,
        p.delivery,
        p.msg,
        p.attempt,
        delay_ms,
        error_type="WorkerLost",
        error=cause,
    )


def dead_letter_fields(o: Outcome, *, worker: str) -> dict[str, object]:
    """The fields a dead-letter entry adds to the original job."""
    d = o.delivery
    return {
        "task": o.msg.task if o.msg else "",
        "job_id": o.msg.id if o.msg else "",
        "body": d.body or b"",
        "error_type": o.error_type,
        "error": o.error,
        "traceback": o.traceback,
        "attempts": o.attempt,
        "worker": worker,
        "stream": d.stream,
        "entry_id": d.entry_id,
    }


def log_outcome(o: Outcome) -> None:
    """One INFO line per finished job (WARNING when it is dead-lettered)."""
    level = logging.WARNING if o.kind == DEAD else logging.INFO
    if not logger.isEnabledFor(level):
        return
    task = o.msg.task if o.msg else "?"
    job = o.msg.id if o.msg else o.delivery.entry_id
    detail = f" {o.error_type}: {o.error}" if o.error_type else ""
    extra = {
        "job_id": job,
        "task": task,
        "priority": o.delivery.priority,
        "outcome": o.kind,
        "attempt": o.attempt,
        "duration_ms": round(o.duration_s * 1000, 3),
    }
    logger.log(
        level,
        "%s %s[%s] %s attempt %d %.1fms %s%s",
        ARROWS[o.kind],
        task,
        job,
        o.delivery.priority,
        o.attempt,
        o.duration_s * 1000,
        o.kind,
        detail,
        extra=extra,
    )
