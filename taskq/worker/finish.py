"""What follows a run, in Redis: ack a success, park a retry, dead-letter a failure, hand a
job back, and settle the jobs of a child that exited. One log line per outcome.

A success's ack is not sent on its own: it rides on the consumer's next fetch (one round trip
per job at ``--prefetch 1``, one per batch above), so :class:`Finisher` keeps it until then.
A retry leaves the stream for its retry set with its body patched to say how many attempts
it used; the attempt count therefore lives in the body alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from taskq import resumable
from taskq.bodypatch import snoozes_of, with_retries
from taskq.broker import Broker, Delivery
from taskq.broker.checkpoints import Checkpoints
from taskq.broker.records import Records
from taskq.errors import BrokerError, TaskNotFound
from taskq.flow import Ops, ends_with_writes, on_failure, on_success
from taskq.message import Message
from taskq.middleware import emit
from taskq.options import TaskOptions
from taskq.signing import Signer
from taskq.storing import Completion, FailedRun
from taskq.worker.executor import Executor, Prepared
from taskq.worker.limiter import release_ops
from taskq.worker.outcome import (
    CANCELLED,
    DEAD,
    EXPIRED,
    OK,
    PAUSED,
    RETRY,
    SNOOZED,
    YIELDED,
    Outcome,
)

if TYPE_CHECKING:
    from taskq.deadletter import Deadletter

logger = logging.getLogger(__name__)

ARROWS = {
    OK: "←", RETRY: "↻", DEAD: "✗", EXPIRED: "⌛", CANCELLED: "⊘", SNOOZED: "z", PAUSED: "⏸",
    YIELDED: "⇥",
}  # fmt: skip


class Finisher:
    """Applies outcomes to Redis on behalf of one consumer, or of a master for its children.

    Every move is fenced by ``owner``: the consumer the entry must still be pending under.
    """

    def __init__(self, broker: Broker, executor: Executor) -> None:
        self.broker = broker
        self.executor = executor
        self.acks: list[Delivery] = []
        """Successes whose ack waits for the next fetch."""
        self.completions: dict[Delivery, Completion] = {}
        """What some of them write with their acks: results, next workflow steps."""
        self._options: dict[str, TaskOptions] = {}
        """The options of the tasks seen, by name (looked up once per task, not per job)."""
        self.limits: Callable[[str, Message, TaskOptions], TaskOptions] | None = None
        """The options a job runs under with the limits set at run time (its consumer's
        control view): a slot taken under such a limit is released under it."""

    @property
    def _signer(self) -> Signer | None:
        return self.executor.app.settings.signer

    def record(self, o: Outcome, *, owner: str) -> None:
        """Record a run's fate (a success's ack is queued), log it and tell middleware."""
        d = o.delivery
        release = self._release(o)
        if resumable.in_progress and o.msg is not None and resumable.finished(o.msg.id):
            self._end_checkpoints(o)
        if o.kind == OK:
            self._succeeded(o, release)
        elif o.kind == RETRY and o.msg is not None:
            self._retry(o, release, owner)
        elif o.kind == YIELDED and o.msg is not None:
            self._give_back(o, release, owner)
        elif o.kind == SNOOZED and o.msg is not None:
            self._snooze(o, release, owner=owner)
        elif o.kind == PAUSED and o.msg is not None:
            self._set_aside(o, owner=owner)
        elif o.kind in (EXPIRED, CANCELLED):
            ttl, writes = self._ttl_ms(o.msg), _failure_ops(o, release, self._signer)
            unrecorded = (o.msg.id, ttl) if o.msg is not None and not d.record_id else None
            self.broker.drop(
                d, owner=owner, state=o.kind, record_ttl_ms=ttl, ops=writes, unrecorded=unrecorded
            )
        else:
            entry = deadletter_entry(o, worker=owner)
            ttl, writes = self._ttl_ms(o.msg), _failure_ops(o, release, self._signer)
            self.broker.deadletter(d, owner=owner, entry=entry, record_ttl_ms=ttl, ops=writes)
        log_outcome(o)
        emit(self.executor.app.middleware, "after_job", o)

    def _succeeded(self, o: Outcome, release: Ops | None) -> None:
        """Queue a success's ack, with what it writes at its end (result, next steps, slot)."""
        d = o.delivery
        self.acks.append(d)
        msg = o.msg
        if msg is not None and (o.result is not None or ends_with_writes(msg) or release):
            ops = on_success(msg, o.result, self._signer) if ends_with_writes(msg) else None
            if release and ops:
                ops.extend(release)
            elif release:
                ops = release
            self.completions[d] = Completion(
                msg.id,
                msg.recorded,
                self._ttl_ms(msg),
                o.result,
                o.attempt,
                o.duration_s * 1000,
                time.monotonic(),
                (ops.ops or None) if ops else None,
                tuple(ops.keys) if ops else (),
            )

    def _retry(self, o: Outcome, release: Ops | None, owner: str) -> None:
        """Park a failed run's job in its retry set, its attempt spent."""
        assert o.msg is not None
        d = o.delivery
        body = with_retries(d.body or b"", o.attempt, self._signer)
        failed = None
        if d.record_id:
            ttl = self._ttl_ms(o.msg)
            failed = FailedRun(d.record_id, ttl, o.attempt, o.error_type, o.error, o.traceback)
        frees = (release.packed(), release.keys) if release else None
        self.broker.park(
            d,
            owner=owner,
            task=o.msg.task,
            body=body,
            delay_ms=o.delay_ms,
            failed=failed,
            ops=frees,
        )

    def _give_back(self, o: Outcome, release: Ops | None, owner: str) -> None:
        """A resumable job gave itself back: to the back of its stream, its attempt unspent
        (a job holding a concurrency slot goes through its retry set, which frees the slot)."""
        assert o.msg is not None
        d = o.delivery
        body = with_retries(d.body or b"", o.attempt - 1, self._signer)
        if release:
            frees = (release.packed(), release.keys)
            self.broker.park(d, owner=owner, task=o.msg.task, body=body, delay_ms=0, ops=frees)
        else:
            self.broker.requeue(d, task=o.msg.task, body=body, owner=owner)

    def _end_checkpoints(self, o: Outcome) -> None:
        """The steps hash of a job that ended lives as long as its record would. (Left at its
        longer TTL if the job runs again, or if Redis fails now: a job's end does not wait
        for this.)"""
        msg = o.msg
        if msg is None or o.kind in (RETRY, YIELDED):
            return
        try:
            Checkpoints(self.broker.link, "").expire(msg.queue, msg.id, self._ttl_ms(msg))
        except BrokerError as exc:
            logger.warning("job %s: the TTL of its steps was not set: %s", msg.id, exc)

    def _snooze(self, o: Outcome, release: Ops | None, *, owner: str) -> None:
        """Move a snoozed job to the schedule: its body keeps the attempts used before this
        run (the snooze spends none) and counts one more snooze."""
        d, msg = o.delivery, o.msg
        assert msg is not None
        raw = d.body or b""
        body = with_retries(raw, o.attempt - 1, self._signer, snoozes=snoozes_of(raw) + 1)
        ttl = self._ttl_ms(msg) if d.record_id else None
        frees = (release.packed(), release.keys) if release else None
        self.broker.snooze(
            d, owner=owner, task=msg.task, body=body, delay_ms=o.delay_ms, record_ttl_ms=ttl,
            ops=frees,
        )  # fmt: skip

    def _set_aside(self, o: Outcome, *, owner: str) -> None:
        """Move a paused job into its pause's set (it never started: no slot to release);
        if the pause was resumed meanwhile, hand it back to its stream instead."""
        assert o.msg is not None
        d, task = o.delivery, o.msg.task
        if self.broker.set_aside(d, owner=owner, task=task, pause_field=o.pause_field) == 0:
            self.hand_back(d, owner=owner)

    def _release(self, o: Outcome) -> Ops | None:
        """The write that frees the job's concurrency slot, for a task that has the limit."""
        if o.msg is None:
            return None
        options = self._options.get(o.msg.task)
        if options is None:
            try:
                options = self._options[o.msg.task] = self.executor.app.get_task(o.msg.task).options
            except TaskNotFound:
                return None
        if self.limits is not None:
            options = self.limits(o.delivery.queue, o.msg, options)
        return release_ops(o.msg, options, o.delivery.queue)

    def _ttl_ms(self, msg: Message | None) -> int:
        """How long the job's record lives after this change."""
        if msg is not None and msg.result_ttl_s is not None:
            return msg.result_ttl_s * 1000
        return self.executor.app.settings.result_ttl_s * 1000

    def take_acks(self) -> list[Delivery]:
        """The queued acks (and their results, dropped here), once a fetch has sent them."""
        acks, self.acks, self.completions = self.acks, [], {}
        return acks

    def hand_back(self, d: Delivery, *, owner: str) -> None:
        """Put a pending entry back in its own stream without using up an attempt.

        The body is patched, not rebuilt, so fields this version does not know survive. An
        entry that cannot run at all (bad input) goes to the dead-letter stream instead, and
        one cancelled with ``terminate=True`` meanwhile (its tombstone) ends cancelled.
        """
        prepared = self.executor.prepare(d)
        if isinstance(prepared, Outcome):
            self.record(prepared, owner=owner)
        elif self._cancel_requested(d, prepared.msg.id, running=False):
            self.record(cancelled_before_start(prepared), owner=owner)  # it never starts
        else:
            body = with_retries(d.body or b"", prepared.attempt - 1, self._signer)
            self.broker.requeue(d, task=prepared.msg.task, body=body, owner=owner)

    def recover_exited(
        self, consumer: str, running: Collection[tuple[str, str]], cause: str
    ) -> list[str]:
        """Deal with every entry pending under the consumer of a process that exited.

        The entries it was running (``running``: stream and entry id; several for a child of
        async jobs) failed with ``cause`` and count as an attempt; every other one
        (prefetched, not started, or running beside the job its child was killed for) goes
        back uncounted. The consumer is then deleted. Returns the kinds (retry or dead) of
        the failures.
        """
        failures = []
        for d in self.broker.pending_of(consumer):
            ran = (d.stream, d.entry_id) in running
            prepared = self.executor.prepare(d) if ran else None
            if isinstance(prepared, Prepared):
                outcome = self.lost(prepared, cause)
                self.record(outcome, owner=consumer)
                failures.append(outcome.kind)
            else:
                self.hand_back(d, owner=consumer)
        self.broker.forget_consumer(consumer)
        return failures

    def lost(self, p: Prepared, cause: str) -> Outcome:
        """A run whose process died under it: a failed attempt, unless the job was asked to
        stop (``cancel(terminate=True)``: its child may have been killed for it)."""
        outcome = self.executor.lost(p, cause)
        if self._cancel_requested(p.delivery, p.msg.id, running=True):
            return _cancelled(outcome)
        return outcome

    def _cancel_requested(self, d: Delivery, msg_id: str, *, running: bool) -> bool:
        """Whether the job has a tombstone: ``cancel(terminate=True)`` after its delivery, or
        for a job without a record any cancel (one that stops a ``running`` job only with
        ``terminate``)."""
        records = Records(self.broker.link)
        if d.record_id is None:
            return bool(records.cancel_marks([(d.queue, msg_id)], terminate_only=running))
        return bool(records.cancel_requested([(d.queue, d.record_id)]))

    def recover(self, d: Delivery, *, owner: str) -> str:
        """Settle a job the sweep recovered from a dead worker: its run was lost, a failed
        attempt (retried with backoff, or dead once out of attempts). Returns the kind."""
        prepared = self.executor.prepare(d)
        outcome = (
            prepared
            if isinstance(prepared, Outcome)
            else self.lost(prepared, "worker lost: its worker stopped renewing the lease")
        )
        self.record(outcome, owner=owner)
        return outcome.kind


def cancelled_before_start(p: Prepared) -> Outcome:
    """The end of a job cancelled (``terminate=True``) while it waited in a child's batch,
    or on its way back from there: it never started, and used no attempt."""
    error = "cancelled before it started"
    return Outcome(CANCELLED, p.delivery, p.msg, p.msg.retries, 0, "JobCancelled", error)


def _cancelled(o: Outcome) -> Outcome:
    return o._replace(kind=CANCELLED, error_type="JobCancelled", error="cancelled while running")


def _failure_ops(
    o: Outcome, release: Ops | None, signer: Signer | None
) -> tuple[bytes, list[str]] | None:
    """What a job's end without success writes besides its move: later workflow steps fail,
    its lock and its concurrency slot go."""
    writes = Ops()
    if o.msg is not None and ends_with_writes(o.msg):
        writes = on_failure(o.msg, o.error_type, o.error, signer, errbacks=o.kind != CANCELLED)
    writes.extend(release or Ops())
    return (writes.packed(), writes.keys) if writes.ops else None


def deadletter_entry(o: Outcome, *, worker: str) -> Deadletter:
    """The dead-letter entry of a failed outcome (the failure times are Redis's)."""
    from taskq.deadletter import Deadletter  # loaded with the first job that dies

    d = o.delivery
    return Deadletter(
        dead_id="",
        task=o.msg.task if o.msg else "",
        job_id=o.msg.id if o.msg else "",
        body=d.body or b"",
        error_type=o.error_type,
        error=o.error,
        traceback=o.traceback,
        attempts=o.attempt,
        first_failure_ms=0,
        last_failure_ms=0,
        worker=worker,
        stream=d.stream,
        entry_id=d.entry_id,
    )


def trace_id_of(headers: Mapping[str, str] | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header (``00-<trace id>-<span id>-<flags>``),
    so that a job's log lines join its spans in a log shipper."""
    parts = (headers or {}).get("traceparent", "").split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
        return parts[1]
    return None


def log_outcome(o: Outcome) -> None:
    """One INFO line per finished job (WARNING when it is dead-lettered)."""
    level = logging.WARNING if o.kind in (DEAD, EXPIRED) else logging.INFO
    if not logger.isEnabledFor(level):
        return
    task = o.msg.task if o.msg else "?"
    job = o.msg.id if o.msg else o.delivery.entry_id
    detail = f" {o.error_type}: {o.error}" if o.error_type else ""
    extra = {
        "job_id": job,
        "task": task,
        "queue": o.delivery.queue,
        "priority": o.delivery.priority,
        "outcome": o.kind,
        "attempt": o.attempt,
        "duration_ms": round(o.duration_s * 1000, 3),
    }
    if o.error_type:
        extra["error_type"] = o.error_type
    trace_id = trace_id_of(o.msg.headers if o.msg else None)
    if trace_id:
        extra["trace_id"] = trace_id
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
