"""Limits in a child: a job of a limited task starts only with a slot from Redis.

A job over its task's rate limit is deferred, not failed: ``limit.lua`` moves it to the
schedule until the first free start slot. A job of a task at its concurrency limit waits,
out of its stream, in the task's ``held`` set (``slot.lua``) until a running job's end
releases a slot (the ``release`` op, in the script that records that end). Either way the
jobs behind it run (no head-of-line blocking) and it keeps its attempt count. Jobs of tasks
without a limit never come here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from taskq.bodypatch import with_retries
from taskq.broker import Broker, Delivery
from taskq.broker.limits import ADMITTED, admit, take_slot
from taskq.config import Settings
from taskq.flow import Ops
from taskq.keys import QueueKeys, worker_of
from taskq.limits import Rate
from taskq.message import Message
from taskq.options import TaskOptions
from taskq.worker.executor import Prepared
from taskq.worker.outcome import Outcome

logger = logging.getLogger(__name__)


class Limiter:
    """Admits the jobs of rate-limited tasks for one consumer."""

    def __init__(self, broker: Broker, owner: str, settings: Settings) -> None:
        self.broker = broker
        self.owner = owner
        self.result_ttl_s = settings.result_ttl_s
        self.worker_ttl_ms = settings.worker_ttl_ms
        self.signer = settings.signer
        self._rates: dict[str, Rate] = {}

    def took_slot(self, p: Prepared, call: Callable[[Callable[[], int]], int]) -> bool:
        """Whether the job got a running slot (else it waits for one, out of its stream)."""
        o, d, msg = p.task.options, p.delivery, p.msg
        assert o.concurrency_limit is not None
        key = _limit_key(o.limit_key, msg.args, msg.kwargs, msg.task)
        k = QueueKeys(d.queue)
        verdict = call(
            lambda: take_slot(
                self.broker.link,
                d,
                owner=self.owner,
                running=k.running(msg.task, key),
                held=k.held(msg.task, key),
                limit=o.concurrency_limit or 1,
                member=f"{worker_of(self.owner)}|{msg.id}",
                task=msg.task,
                body=with_retries(d.body or b"", p.attempt - 1, self.signer),
                worker_ttl_ms=self.worker_ttl_ms,
            )
        )
        if verdict != ADMITTED:
            logger.debug("%s[%s] at its concurrency limit: waits for a slot", msg.task, msg.id)
        return verdict == ADMITTED

    def admitted(
        self,
        p: Prepared,
        call: Callable[[Callable[[], list[int]]], list[int]],
        following: Sequence[Prepared] = (),
    ) -> tuple[bool, list[Prepared]]:
        """Whether the job may start now (else it was deferred to its slot), and which of
        ``following`` (the jobs after it in the batch) were settled in the same call: deferred
        to their slots, or no longer this consumer's. Of ``following``, the run at its head
        that shares the job's task, limit and stream goes in that call; the jobs admitted
        among them are not settled, and take their slot again (held) when they start.
        ``call`` runs the Redis step through the consumer's outage handling."""
        o, d, msg = p.task.options, p.delivery, p.msg
        assert o.rate_limit is not None
        rate = self._rates.get(o.rate_limit)  # (by its text: a limit set at run time too)
        if rate is None:
            rate = self._rates[o.rate_limit] = Rate.parse(o.rate_limit)
        key = _limit_key(o.limit_key, msg.args, msg.kwargs, msg.task)
        run = [p]
        for q in following:
            same = q.msg.task == msg.task and q.delivery.stream == d.stream
            if not same or _limit_key(o.limit_key, q.msg.args, q.msg.kwargs, msg.task) != key:
                break
            run.append(q)
        ttl_s = msg.result_ttl_s or self.result_ttl_s
        jobs = [
            (
                q.delivery,
                f"{q.msg.id}:{q.attempt}",
                with_retries(q.delivery.body or b"", q.attempt - 1, self.signer),
            )
            for q in run
        ]
        verdicts = call(
            lambda: admit(
                self.broker.link,
                jobs,
                task=msg.task,
                owner=self.owner,
                limit_key=QueueKeys(d.queue).limit(msg.task, key),
                starts=rate.starts,
                window_ms=rate.window_ms,
                record_ttl_ms=ttl_s * 1000,
            )
        )
        if verdicts[0] != ADMITTED:
            logger.debug("%s[%s] over its rate limit: deferred", msg.task, msg.id)
        settled = [q for q, v in zip(run[1:], verdicts[1:], strict=True) if v != ADMITTED]
        return verdicts[0] == ADMITTED, settled


def same_task_next(
    p: Prepared,
    rest: Sequence[Delivery],
    prepare: Callable[[Delivery], Prepared | Outcome],
    ahead: dict[tuple[str, str], Prepared],
) -> list[Prepared]:
    """The jobs of ``p``'s task right behind it in its batch (``rest``), decoded, and kept in
    ``ahead`` (by stream and entry id) for their turn, so they are decoded once."""
    out = []
    for d in rest:
        q = ahead.get((d.stream, d.entry_id)) or prepare(d)
        if isinstance(q, Outcome) or q.msg.task != p.msg.task:
            break
        ahead[(d.stream, d.entry_id)] = q
        out.append(q)
    return out


def release_ops(msg: Message, options: TaskOptions, queue: str) -> Ops | None:
    """The write that frees a concurrency-limited job's slot when it leaves it (ends, or
    waits for a retry) and lets a waiting job in; None for a task without the limit."""
    if options.concurrency_limit is None:
        return None
    key = _limit_key(options.limit_key, msg.args, msg.kwargs, msg.task)
    k = QueueKeys(queue)
    running, held = k.running(msg.task, key), k.held(msg.task, key)
    out = Ops()
    out.add(["release", running, held, msg.id, options.concurrency_limit, queue], running, held)
    out.keys += [s for s in k.streams if s not in out.keys]
    return out


def _limit_key(
    fn: Callable[..., Any] | None, args: tuple[Any, ...], kwargs: dict[str, Any], task: str
) -> str | None:
    """The per-key limit a job falls under (None: the task's one limit). A ``limit_key``
    that fails puts the job under the task's shared limit, with a log line."""
    if fn is None:
        return None
    try:
        return str(fn(*args, **kwargs))
    except Exception:
        logger.exception("%s: limit_key failed; the job counts against the task's limit", task)
        return "(limit_key failed)"


limit_key_of = _limit_key
"""The limit key of a job (also what a pause by key matches: :mod:`taskq.worker.pausing`)."""
