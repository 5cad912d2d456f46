"""Reading job status records, waiting for a job to end, and forgetting it.

Waiting blocks in Redis, not in a poll loop and not on pub/sub: a waiter registers in the
job's record as it reads it, the script that ends a job someone waits for pushes one element
onto the job's done list, and a waiter blocks on that list with
``BLMOVE done done LEFT LEFT``, which hands the element back to the same list at once, so
every waiter on the job wakes and the element stays for late ones. A waiter blocks in slices
of :data:`WAIT_SLICE_S` and re-reads the record after each, and after a dropped connection
or a Redis restart it reconnects with backoff and reads again, so it neither hangs on a dead
connection nor misses an end that happened while it was away.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from taskq import record
from taskq.broker.link import Link, script_command
from taskq.broker.replies import as_int, flat_pairs, info_records, pending_rows, redis_ms, text
from taskq.broker.steps import Pause, Steps, run
from taskq.checkpoint import views_of
from taskq.errors import BrokerRefused, BrokerUnavailable, ConfigError
from taskq.keys import GROUP, PRIORITIES, QueueKeys, check_job_id
from taskq.storing import CANCELLED, EXPIRED, FINAL, RUNNING, SUCCEEDED, UNKNOWN, WAITING

if TYPE_CHECKING:
    # The public status types load with the first status read (each function that makes
    # one imports them): a worker writes records and reads none, and its start skips them.
    from taskq.broker.control import Auditor
    from taskq.results import FlowView, JobStatus

WAIT_SLICE_S = 5.0


def later_steps(packed: bytes | None) -> list[list[Any]]:
    """The records of the workflow steps after a job (its record's ``later`` field:
    ``[record key, done key, ttl ms]`` each), which end with it if it is cancelled before it
    runs; none unless every one is a well-formed reference (the field is untrusted)."""
    from taskq.flowcheck import Refusal, record_ref  # (a cancel's only)

    if not packed:
        return []
    try:
        refs = msgpack.unpackb(packed, raw=False)
        for ref in refs:
            record_ref(ref)
    except (Refusal, TypeError, ValueError, msgpack.UnpackException):
        return []
    return refs  # type: ignore[no-any-return]


"""Longest single block of a waiter; it then re-reads the record (and finds a dead link)."""
RECONNECT_BACKOFF_S = (0.05, 1.0)
"""First and longest pause between a waiter's attempts while Redis is unreachable."""


class Records:
    """Job status records on one Redis server."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def status(self, queue: str, job_id: str) -> JobStatus:
        """The job's status from its record (``unknown`` when there is none)."""
        return run(self.link, status_steps(queue, job_id))

    def find(self, queues: Sequence[str], job_id: str, *, flow: bool = False) -> str | None:
        """The first of ``queues`` that holds a record of the job (or of the workflow)."""
        return run(self.link, find_steps(queues, job_id, flow=flow))

    def flow(self, queue: str, flow_id: str) -> dict[bytes, bytes]:
        """A workflow's record (HGETALL; empty if there is none)."""
        return flat_pairs(self.link.call("HGETALL", QueueKeys(queue).flow(flow_id)))

    def flow_steps(self, queue: str, flow_id: str) -> list[tuple[str, str]]:
        """(job id, queue) of each step of a workflow that keeps a record."""
        info = _flow_info(self.flow(queue, flow_id))
        return [(i, q) for i, _task, q in info.get("steps", [])]

    def flow_view(self, queue: str, flow_id: str) -> FlowView:
        """A workflow with the status of each of its steps and the progress of its chords."""
        from taskq.results import FlowView, JobStatus

        raw = self.flow(queue, flow_id)
        info = _flow_info(raw)
        steps, chords = info.get("steps", []), info.get("chords", [])
        commands: list[tuple[Any, ...]] = [("TIME",)]
        commands += [("HGETALL", QueueKeys(q).job(i)) for i, _task, q in steps]
        commands += [("HMGET", key, "done") for key, _n in chords]
        replies = self.link.pipeline(commands)
        now = redis_ms(replies[0])
        statuses = [
            JobStatus.from_record(i, flat_pairs(r), now)
            for (i, _t, _q), r in zip(steps, replies[1 : 1 + len(steps)], strict=True)
        ]
        progress = [
            (as_int(r[0]) if r[0] is not None else None, n)
            for (_key, n), r in zip(chords, replies[1 + len(steps) :], strict=True)
        ]
        kind = text(raw.get(b"kind", b""))
        return FlowView(flow_id, kind, tuple(statuses), tuple(progress), bool(raw))

    def wait(self, queue: str, job_id: str, timeout_s: float | None) -> JobStatus:
        """Block until the job ends, its record is gone, or ``timeout_s`` passes; return its
        status then (the caller tells the three apart by the state)."""
        return run(self.link, wait_steps(queue, job_id, timeout_s))

    def forget(self, queue: str, job_id: str) -> bool:
        """Delete the job's record and done list; True if there was a record."""
        k = QueueKeys(queue)
        return bool(self.link.call("DEL", k.job(job_id), k.done(job_id)))

    def cancel(
        self,
        queue: str,
        job_id: str,
        *,
        ttl_ms: int,
        terminate: bool,
        keep_ms: int | None = None,
        auditor: Auditor | None = None,
    ) -> str:
        """Cancel a job (``cancel.lua``): ``cancelled`` if it was removed before it ran,
        ``terminating`` if its worker will interrupt it, ``running`` if it runs and
        ``terminate`` is False, else ``unknown`` or the final state it had reached. A job
        without a record, with ``keep_ms``: ``cancelled`` if it was found waiting and
        removed, else ``requested`` (its tombstone stops it at its worker, for ``keep_ms``).
        With ``auditor``, the cancel's audit entry is written in the same step."""
        k = QueueKeys(queue)
        keys = [k.job(job_id), k.done(job_id), *k.streams, k.schedule]
        keys += [*(k.retry(p) for p in PRIORITIES), k.cancel(job_id), k.counts, k.audit]
        later = later_steps(self.link.call("HGET", k.job(job_id), record.LATER))
        keys += [key for ref in later for key in ref[:2]]
        args = [job_id, GROUP, ttl_ms, int(terminate), *(ref[2] for ref in later)]
        args.append(keep_ms or "")
        if auditor is not None:  # appended by the script, with the outcome in its detail
            args += auditor.args("cancel", {"job_id": job_id, "terminate": terminate})
        return text(self.link.script("cancel", keys, args))

    def cancel_marks(self, jobs: Sequence[tuple[str, str]], *, terminate_only: bool) -> set[str]:
        """Which of these jobs without a record (queue, job id) have a tombstone
        (``<queue>:cancelled``; with ``terminate_only``, one that asks to interrupt a run)."""
        if not jobs:
            return set()
        replies = self.link.pipeline([("HGET", QueueKeys(q).cancelled, j) for q, j in jobs])
        out = set()
        for (_, j), raw in zip(jobs, replies, strict=True):
            mark = text(raw) if isinstance(raw, bytes) else ""
            if mark and (not terminate_only or mark.endswith("|1")):
                out.add(j)
        return out

    def any_cancel_marks(self, queues: Sequence[str]) -> set[str]:
        """The queues with tombstones of jobs without a record: one EXISTS per queue."""
        replies = self.link.pipeline([("EXISTS", QueueKeys(q).cancelled) for q in queues])
        return {q for q, n in zip(queues, replies, strict=True) if as_int(n)}

    def cancel_requested(self, jobs: Sequence[tuple[str, str]]) -> set[str]:
        """Which of these running jobs (queue, job id) were asked to stop."""
        if not jobs:
            return set()
        replies = self.link.pipeline([("EXISTS", QueueKeys(q).cancel(j)) for q, j in jobs])
        return {j for (_, j), r in zip(jobs, replies, strict=True) if as_int(r)}

    def entry_status(self, queue: str, priority: str, job_id: str, entry_id: str) -> JobStatus:
        """What the queue's own keys tell of a job without a record (see
        :func:`entry_status_steps`)."""
        return run(self.link, entry_status_steps(queue, priority, job_id, entry_id))


# -- the exchanges, for the blocking and the asyncio link (taskq.broker.steps) -----------


def status_steps(queue: str, job_id: str) -> Steps[JobStatus]:
    """The job's status from its record (``unknown`` when there is none), with its steps."""
    from taskq.results import JobStatus

    k = QueueKeys(queue)
    raw, now, steps = yield [("HGETALL", k.job(job_id)), ("TIME",), ("HGETALL", k.steps(job_id))]
    status = JobStatus.from_record(job_id, flat_pairs(raw), redis_ms(now))
    if steps:
        status = with_steps(status, flat_pairs(steps))
    return (yield from _taken_steps(status, redis_ms(now)))


def with_steps(status: JobStatus, raw: dict[bytes, bytes]) -> JobStatus:
    """The status with the steps and cursors of its steps hash (HGETALL)."""
    steps, cursors = views_of(raw)
    return dataclasses.replace(status, steps=steps, cursors=cursors)


def _taken_steps(status: JobStatus, now_ms: int) -> Steps[JobStatus]:
    """A ``waiting`` record whose entry is pending under a consumer: the job was taken, and
    its worker's master has not marked it running yet (``start.lua``, within a quarter
    second); running then, with the consumer and the delivery time from the pending list."""
    if status.state != WAITING or not status.entry_id or not status.queue:
        return status
    stream = QueueKeys(status.queue).stream(status.priority or "normal")
    try:
        [pending] = yield [("XPENDING", stream, GROUP, status.entry_id, status.entry_id, 1)]
    except BrokerRefused:  # no stream or no group (yet)
        return status
    held = pending_rows(pending)
    if not held:
        return status
    _, worker, idle_ms, _ = held[0]
    return dataclasses.replace(
        status,
        state=RUNNING,
        worker=worker,
        attempts=status.attempts + 1,
        started_ms=now_ms - idle_ms,
    )


def unrecorded_end_steps(queue: str, job_id: str) -> Steps[str | None]:
    """``cancelled`` or ``expired`` if a job without a record ended so lately (its queue's
    ``ended`` set); None otherwise."""
    key, states = QueueKeys(queue).ended, (CANCELLED, EXPIRED)
    replies = yield [("ZSCORE", key, f"{state}:{job_id}") for state in states]
    return next((s for s, r in zip(states, replies, strict=True) if r is not None), None)


def find_steps(queues: Sequence[str], job_id: str, *, flow: bool = False) -> Steps[str | None]:
    """The first of ``queues`` that holds a record of the job (or of the workflow)."""
    keys = [QueueKeys(q).flow(job_id) if flow else QueueKeys(q).job(job_id) for q in queues]
    replies = yield [("EXISTS", k) for k in keys]
    return next((q for q, r in zip(queues, replies, strict=True) if r), None)


def find_call_steps(queues: Sequence[str], call_id: str) -> Steps[tuple[str, str] | None]:
    """The first of ``queues`` with a batched call of that id, and the id of its batch job
    (``batch.lua``'s pointer; None: no such call, or its task keeps no record)."""
    replies = yield [("GET", QueueKeys(q).batch_call(call_id)) for q in queues]
    for queue, reply in zip(queues, replies, strict=True):
        batch_id = text(reply) if isinstance(reply, bytes) else ""
        try:
            check_job_id(batch_id)  # (read from Redis: untrusted)
        except ConfigError:
            continue
        return queue, batch_id
    return None


def wait_steps(queue: str, job_id: str, timeout_s: float | None) -> Steps[JobStatus]:
    """Until the job ends, its record is gone, or ``timeout_s`` passes: its status then."""
    from taskq.results import JobStatus

    done = QueueKeys(queue).done(job_id)
    deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
    pause_s = RECONNECT_BACKOFF_S[0]
    while True:
        try:
            status = yield from _watch_steps(queue, job_id)
            left_s = deadline - time.monotonic()
            if status.state in FINAL or status.state == UNKNOWN:
                return status
            if left_s <= 0:  # (read again: a job taken shows as running)
                return (yield from status_steps(queue, job_id))
            block_s = max(0.001, min(left_s, WAIT_SLICE_S))
            yield [("BLMOVE", done, done, "LEFT", "LEFT", f"{block_s:.3f}")]
            pause_s = RECONNECT_BACKOFF_S[0]
        except BrokerUnavailable:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return JobStatus(job_id, WAITING, tracked=True)
            yield Pause(min(pause_s, left_s))
            pause_s = min(pause_s * 2, RECONNECT_BACKOFF_S[1])


def _watch_steps(queue: str, job_id: str) -> Steps[JobStatus]:
    """The job's status, with this waiter registered in its record (``watch.lua``): the
    script that ends the job pushes onto its done list only for a job someone waits for."""
    from taskq.results import JobStatus

    watch = script_command("watch", [QueueKeys(queue).job(job_id)], [])
    raw, now = yield [watch, ("TIME",)]
    return JobStatus.from_record(job_id, flat_pairs(raw), redis_ms(now))


def entry_status_steps(queue: str, priority: str, job_id: str, entry_id: str) -> Steps[JobStatus]:
    """What the queue's own keys tell of a job without a record, from its stream entry:
    ``waiting`` (not delivered yet), ``running`` (pending under a consumer),
    ``succeeded`` (acked; finished entries linger until the next trim; a failure removes
    its entry) or ``unknown`` (the entry is gone)."""
    from taskq.results import JobStatus

    k = QueueKeys(queue)
    stream = k.stream(priority)
    try:
        rows, pending, groups, steps = yield [
            ("XRANGE", stream, entry_id, entry_id),
            ("XPENDING", stream, GROUP, entry_id, entry_id, 1),
            ("XINFO", "GROUPS", stream),
            ("HGETALL", k.steps(job_id)),
        ]
    except BrokerRefused:  # no stream or no group
        return JobStatus(job_id, UNKNOWN)
    if not rows:
        return JobStatus(job_id, UNKNOWN)
    status = _entry_state(job_id, queue, priority, entry_id, pending, groups)
    return with_steps(status, flat_pairs(steps)) if steps else status


def _entry_state(
    job_id: str, queue: str, priority: str, entry_id: str, pending: Any, groups: Any
) -> JobStatus:
    from taskq.results import JobStatus

    held = pending_rows(pending)
    if held:
        return JobStatus(
            job_id,
            RUNNING,
            queue=queue,
            priority=priority,
            entry_id=entry_id,
            worker=held[0][1],
            attempts=held[0][3],
        )
    last = next(
        (
            text(g.get("last-delivered-id", "0-0"))
            for g in info_records(groups)
            if text(g.get("name", "")) == GROUP
        ),
        "0-0",
    )
    delivered = _id_key(entry_id) <= _id_key(last)
    state = SUCCEEDED if delivered else WAITING
    return JobStatus(job_id, state, queue=queue, priority=priority, entry_id=entry_id)


def _flow_info(raw: dict[bytes, bytes]) -> dict[str, Any]:
    info: dict[str, Any] = msgpack.unpackb(raw.get(b"info", b"\x80"), raw=False)
    return info


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
