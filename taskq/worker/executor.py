"""Run one delivery and classify the outcome: ok, retry or dead. No Redis of its own (a run that
reported telemetry has it ended by :mod:`taskq.worker.telemetry`, the one writer)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from taskq.bodypatch import snoozes_of
from taskq.broker import Delivery
from taskq.context import JobContext, reset_current, set_current
from taskq.errors import DecodeError, JobCancelled, ResultError, Retry, Snooze, TaskNotFound
from taskq.flow import needs_result
from taskq.message import Message, now_ms
from taskq.middleware import Hooks, arun_around, run_around
from taskq.resumable import HandBack
from taskq.retry import RetryPolicy, policy_for
from taskq.signing import SignatureError
from taskq.storing import encode_result
from taskq.task import Task
from taskq.worker.interrupt import interruptible
from taskq.worker.outcome import (
    CANCELLED,
    DEAD,
    EXPIRED,
    OK,
    RETRY,
    SNOOZED,
    YIELDED,
    Outcome,
    rejected,
)
from taskq.worker.telemetry import Telemetry

if TYPE_CHECKING:
    from taskq.app import App

logger = logging.getLogger(__name__)

DECODE_AHEAD_BYTES = 1 << 20
"""Bodies of a batch decoded ahead of their turn, at most (see Executor.prepare_ahead)."""


class Prepared(NamedTuple):
    """A delivery that decoded and names a known task: ready to run."""

    delivery: Delivery
    msg: Message
    task: Task[..., Any]
    policy: RetryPolicy
    attempt: int
    soft_limit_s: float | None
    hard_limit_s: float | None


class _Plan(NamedTuple):
    """What the jobs of one task run under: looked up once per task name, not per job."""

    task: Task[..., Any]
    policy: RetryPolicy
    max_attempts: int
    soft_limit_s: float | None
    hard_limit_s: float | None


class Executor:
    """Turns deliveries into outcomes for one app.

    Args:
        time_limit_s / soft_time_limit_s: worker-wide limits for tasks that set none.
    """

    def __init__(
        self, app: App, *, time_limit_s: float | None = None, soft_time_limit_s: float | None = None
    ) -> None:
        self.app = app
        self.time_limit_s = time_limit_s
        self.soft_time_limit_s = soft_time_limit_s
        self._plans: dict[str, _Plan] = {}
        self._around = Hooks(app.middleware, "around_job")
        self._around_async = Hooks(app.middleware, "around_async_job")
        self.telemetry = Telemetry(lambda: app.link, app.settings)
        """The jobs' progress, output and logs (nothing is sent for a job that has none)."""

    @property
    def has_async_tasks(self) -> bool:
        """Whether the app (or the shared registry) has ``async def`` tasks."""
        return any(self.app.get_task(name).is_async for name in self.app.registered())

    def prepare(self, d: Delivery) -> Prepared | Outcome:
        """Decode and look up; bad input becomes a DEAD outcome with the reason."""
        msg = self._decode(d)
        if isinstance(msg, Outcome):
            return msg
        if msg.expires_ms is not None and now_ms() >= msg.expires_ms:
            return _expired(d, msg)
        plan = self._plans.get(msg.task)
        if plan is None:
            try:
                plan = self._plans[msg.task] = self._plan(msg.task)
            except TaskNotFound as exc:
                return rejected(d, str(exc), msg)
        task, policy, max_attempts, soft, hard = plan
        attempt = msg.retries + d.deliveries
        if attempt > max_attempts:
            return _attempts_used_up(d, msg, policy, attempt)
        return Prepared(d, msg, task, policy, attempt, soft, hard)

    def _plan(self, name: str) -> _Plan:
        """The task registered as ``name``, its retry policy and its time limits (its own,
        else the worker's). Raises TaskNotFound."""
        task = self.app.get_task(name)
        policy = policy_for(task.options, self.app.settings)
        hard = task.options.time_limit_s or self.time_limit_s
        soft = task.options.soft_time_limit_s or self.soft_time_limit_s
        return _Plan(task, policy, policy.max_attempts, soft, hard)

    def _decode(self, d: Delivery) -> Message | Outcome:
        """The delivery's job, or its rejection: a bad entry or body is the job's failure,
        never the child's, whatever the decoder raises."""
        if d.malformed is not None or d.body is None:
            return rejected(d, f"malformed entry: {d.malformed or 'no body'}")
        try:
            msg = Message.decode(d.body, self.app.settings.signer)
        except SignatureError as exc:
            return rejected(d, f"refused: {exc.reason}")
        except DecodeError as exc:
            return rejected(d, f"malformed job: {exc.reason}")
        except Exception as exc:  # a decoder bug: this job is dead-lettered, the child lives on
            logger.error("entry %s of %s: decoding failed", d.entry_id, d.stream, exc_info=True)
            return rejected(d, f"malformed job: {type(exc).__name__}: {_text_of(exc)}")
        if d.record_id is not None and d.record_id != msg.id:
            # Another job's record: its dead letter must not end that one (record_id dropped).
            reason = "malformed entry: its 'job' field names another job than its body"
            return rejected(d._replace(record_id=None), reason, msg)
        return msg

    def prepare_ahead(self, batch: Sequence[Delivery]) -> list[Prepared | Outcome | None]:
        """The batch decoded before its first job runs (one tight loop costs less than
        decoding between jobs, after whose I/O the caches are cold), up to
        ``DECODE_AHEAD_BYTES`` of bodies: the jobs after that are None, decoded at their
        turn, so a batch of large payloads is not held decoded all at once."""
        out: list[Prepared | Outcome | None] = []
        budget = DECODE_AHEAD_BYTES
        for d in batch:
            budget -= len(d.body or b"")
            if budget < 0:
                return out + [None] * (len(batch) - len(out))
            out.append(self.prepare(d))
        return out

    @staticmethod
    def still_current(p: Prepared) -> Prepared | Outcome:
        """A job decoded ahead of its turn, or its EXPIRED outcome if it expired since."""
        expires_ms = p.msg.expires_ms
        if expires_ms is not None and now_ms() >= expires_ms:
            return _expired(p.delivery, p.msg)
        return p

    def execute(self, p: Prepared) -> Outcome:
        """Run the task with its job context set; never raises for a task's exception."""
        job = self._context(p)
        hooks = self._around()
        outcome = run_around(hooks, job, lambda: self._run(p, job)) if hooks else self._run(p, job)
        if self.telemetry.used_by(job):
            self.telemetry.end(job, outcome.kind)
        return outcome

    def _context(self, p: Prepared) -> JobContext:
        d = p.delivery
        return JobContext.of(p.msg, p.attempt, p.policy.max_attempts, d.entry_id, self.telemetry)

    def _run(self, p: Prepared, job: JobContext) -> Outcome:
        msg = p.msg
        token = set_current(job)
        started = time.perf_counter()
        try:
            value = p.task.run(msg.args, msg.kwargs)
        except Exception as exc:  # the task's failure, classified below
            return self._failure(p, exc, time.perf_counter() - started)
        except HandBack as back:  # an iteration saved its cursor and gives the job back
            return _yielded(p, back, time.perf_counter() - started)
        finally:
            reset_current(token)
        return self._success(p, value, time.perf_counter() - started)

    def _success(self, p: Prepared, value: object, duration_s: float) -> Outcome:
        msg = p.msg
        if isinstance(value, Snooze):  # a snooze returned rather than raised
            return self._failure(p, value, duration_s)
        if not needs_result(msg):
            return Outcome(OK, p.delivery, msg, p.attempt, duration_s=duration_s)
        try:
            stored = encode_result(value, max_bytes=self.app.settings.max_result_bytes)
        except ResultError as exc:  # the same value would fail again: no retry
            error = f"{msg.task}: {exc}"
            kind = type(exc).__name__
            return Outcome(DEAD, p.delivery, msg, p.attempt, 0, kind, error, exception=exc)
        return Outcome(OK, p.delivery, msg, p.attempt, duration_s=duration_s, result=stored)

    async def aexecute(self, p: Prepared) -> Outcome:
        """:meth:`execute` for an ``async def`` task, in the asyncio task that runs the job
        (its context holds the job's ``current_job()``)."""
        job = self._context(p)
        hooks = self._around_async()
        run = (
            self._arun(p, job) if not hooks else arun_around(hooks, job, lambda: self._arun(p, job))
        )
        outcome = await run
        if self.telemetry.used_by(job):  # (its final flush waits in a thread, not the loop)
            await asyncio.to_thread(self.telemetry.end, job, outcome.kind)
        return outcome

    async def _arun(self, p: Prepared, job: JobContext) -> Outcome:
        msg = p.msg
        token = set_current(job)
        started = time.perf_counter()
        try:
            value = await interruptible(p.task.run(msg.args, msg.kwargs))
        except Exception as exc:  # the task's failure, classified below
            return self._failure(p, exc, time.perf_counter() - started)
        except HandBack as back:
            return _yielded(p, back, time.perf_counter() - started)
        finally:
            reset_current(token)
        return self._success(p, value, time.perf_counter() - started)

    def interrupted(self, p: Prepared, exc: Exception, duration_s: float) -> Outcome:
        """The outcome of an async run interrupted (soft limit, cancel) outside the task's
        own code (in a middleware hook, or before it started)."""
        outcome = self._failure(p, exc, duration_s)
        job = self._context(p)
        if self.telemetry.used_by(job):  # (rare: its final flush is sent from the loop)
            self.telemetry.end(job, outcome.kind)
        return outcome

    def _failure(self, p: Prepared, exc: Exception, duration_s: float) -> Outcome:
        if isinstance(exc, Snooze):
            return self._snooze(p, exc, duration_s)
        kind, delay_ms = self._decide(p, exc)
        return Outcome(
            kind,
            p.delivery,
            p.msg,
            p.attempt,
            delay_ms,
            error_type=type(exc).__name__,
            error=_text_of(exc),
            traceback=_traceback_of(exc),
            duration_s=duration_s,
            exception=exc,
        )

    def _snooze(self, p: Prepared, snooze: Snooze, duration_s: float) -> Outcome:
        """A snooze: the job runs again in ``snooze.seconds`` on the same attempt, unless it
        has snoozed ``max_snoozes`` times already (then it is dead, and says why)."""
        cap = p.task.options.max_snoozes
        if cap is not None and snoozes_of(p.delivery.body or b"") >= cap:
            error = f"{p.msg.task}: snoozed more than max_snoozes ({cap}) times"
            return Outcome(DEAD, p.delivery, p.msg, p.attempt, 0, "Snooze", error,
                           duration_s=duration_s, exception=snooze)  # fmt: skip
        delay_ms = int(snooze.seconds * 1000)
        return Outcome(SNOOZED, p.delivery, p.msg, p.attempt, delay_ms, duration_s=duration_s)

    def lost(self, p: Prepared, cause: str) -> Outcome:
        """The outcome of a run whose process died under it: a failed attempt."""
        retry = p.policy.should_retry(p.attempt)
        delay_ms = p.policy.delay_ms(p.attempt) if retry else 0
        kind = RETRY if retry else DEAD
        return Outcome(kind, p.delivery, p.msg, p.attempt, delay_ms, "WorkerLost", cause)

    def _decide(self, p: Prepared, exc: Exception) -> tuple[str, int]:
        if isinstance(exc, JobCancelled) and exc.job_id == p.msg.id:
            # This job's cancel (the cancel signal raises it with the job's id); another
            # job's (its result() in this task's code) is an ordinary failure.
            return CANCELLED, 0
        if isinstance(exc, TypeError) and not _fits(p.task, p.msg):
            return DEAD, 0
        if isinstance(exc, p.task.options.dont_autoretry_for):
            return DEAD, 0
        if not p.policy.should_retry(p.attempt):
            return DEAD, 0
        if isinstance(exc, Retry) and exc.countdown is not None:
            return RETRY, int(exc.countdown * 1000)
        return RETRY, p.policy.delay_ms(p.attempt)


def _attempts_used_up(d: Delivery, msg: Message, policy: RetryPolicy, attempt: int) -> Outcome:
    """The DEAD outcome of a delivery past its task's attempts, with the reason."""
    if d.deliveries == 1:
        # Never delivered before: its body alone claims the attempts (a foreign producer, or
        # max_retries lowered since it was handed back).
        reason = f"the body's retries ({msg.retries}) use up max_retries ({policy.max_retries})"
        return rejected(d, reason, msg, msg.retries)
    reason = f"worker lost: the job's runs ended without a result {attempt - 1} times"
    return Outcome(DEAD, d, msg, attempt - 1, error_type="WorkerLost", error=reason)


def _yielded(p: Prepared, back: HandBack, duration_s: float) -> Outcome:
    error = f"given back: {back.reason}"
    return Outcome(YIELDED, p.delivery, p.msg, p.attempt, 0, "HandBack", error, "", duration_s)


def _expired(d: Delivery, msg: Message) -> Outcome:
    error = f"not started before it expired (expires_ms {msg.expires_ms})"
    return Outcome(EXPIRED, d, msg, msg.retries, error_type="JobExpired", error=error)


MAX_ERROR_CHARS = 4_096
MAX_TRACEBACK_CHARS = 65_536
"""Longer error texts are cut (keeping the end of a traceback, where the error is): they
are stored with every dead letter and failure record."""


def _text_of(exc: BaseException) -> str:
    """``str(exc)``, even for an exception whose ``__str__`` itself fails."""
    try:
        text = str(exc)
    except Exception as inner:
        return f"<str() of the exception failed: {type(inner).__name__}>"
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[:MAX_ERROR_CHARS] + f"... ({len(text) - MAX_ERROR_CHARS} more characters)"


def _traceback_of(exc: BaseException) -> str:
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception as inner:
        return f"<the traceback could not be formatted: {type(inner).__name__}>"
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    cut = len(text) - MAX_TRACEBACK_CHARS
    return f"({cut} characters cut)...\n" + text[cut:]


def _fits(task: Task[..., Any], msg: Message) -> bool:
    """Whether the job's arguments bind to the task's signature (checked only after a TypeError)."""
    args = (task, *msg.args) if task.options.bind else msg.args
    try:
        inspect.signature(task.fn).bind(*args, **msg.kwargs)
    except TypeError:
        return False
    return True
