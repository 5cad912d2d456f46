"""Sentry error reporting for taskq workers (the ``taskq[sentry]`` extra): docs/sentry.md.

``instrument(app)`` (or ``app.add_middleware(SentryMiddleware())``) reports the exception
that ends a run, once per attempt, with the job as tags; each run gets its own isolation
scope. You call ``sentry_sdk.init`` yourself, in each worker child (``init=``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

try:
    import sentry_sdk
except ImportError as exc:  # the extra is not installed
    raise ImportError("taskq.contrib.sentry needs sentry-sdk: pip install 'taskq[sentry]'") from exc
from sentry_sdk.scope import should_send_default_pii
from sentry_sdk.tracing_utils import has_tracing_enabled
from sentry_sdk.utils import capture_internal_exceptions, event_from_exception

from taskq.errors import ConfigError, Retry, SoftTimeLimitExceeded
from taskq.middleware import Middleware
from taskq.worker.outcome import CANCELLED, DEAD, OK, RETRY, Outcome

if TYPE_CHECKING:
    from sentry_sdk._types import Event

    from taskq.app import App
    from taskq.context import JobContext
    from taskq.message import Message

__all__ = ["REPORTABLE", "SentryMiddleware", "instrument"]

REPORTABLE = (RETRY, DEAD)
"""The outcomes whose exception can be reported: a run that will be retried, a dead letter."""
MECHANISM = {"type": "taskq", "handled": False}
# Sentry's names, spelled out: sentry_sdk.consts has them only in later 2.x releases.
_STATUS = {OK: "ok", RETRY: "internal_error", DEAD: "internal_error", CANCELLED: "cancelled"}
_SOURCE, _OP = "task", "queue.process"


class SentryMiddleware(Middleware):
    """Report the exception that ends a job's run to Sentry.

    Args:
        report: the outcomes to report: ``"retry"`` (a failed attempt that runs again) and
            ``"dead"`` (the job's last failure). Both by default, one event per attempt, as
            Sentry's Celery integration does; ``("dead",)`` reports only final failures.
        include_args: add the job's args and kwargs to the event (they may hold personal
            data). ``None`` follows the SDK's setting for queue payloads (``data_collection``
            ``"queues"``, or ``send_default_pii``), off unless configured.
        propagate_traces: when tracing is on in the SDK, send the producer's trace along in
            the job's headers so that the run's transaction continues it.
        init: called in each worker child as it starts: the place for ``sentry_sdk.init``.
    """

    def __init__(
        self,
        *,
        report: Iterable[str] = REPORTABLE,
        include_args: bool | None = None,
        propagate_traces: bool = True,
        init: Callable[[], object] | None = None,
    ) -> None:
        self.report = frozenset(report)
        unknown = self.report - set(REPORTABLE)
        if unknown:
            raise ConfigError(
                f"SentryMiddleware(report=...): {sorted(unknown)} not among {list(REPORTABLE)}"
            )
        self.include_args = include_args
        self.propagate_traces = propagate_traces
        self.init = init

    def child_start(self) -> None:
        if self.init is not None:
            self.init()

    def child_stop(self) -> None:
        # A child leaves by os._exit: the SDK's atexit flush would never run.
        sentry_sdk.flush()

    def before_enqueue(self, msg: Message) -> Message:
        client = sentry_sdk.get_client()
        if not (self.propagate_traces and client.is_active()):
            return msg
        if not has_tracing_enabled(client.options):
            return msg
        headers = dict(msg.headers or {})
        traceparent, baggage = sentry_sdk.get_traceparent(), sentry_sdk.get_baggage()
        if traceparent:  # the current span's, else the scope's trace
            headers["sentry-trace"] = traceparent
        if baggage:  # added to someone else's baggage, if there is some
            headers["baggage"] = (
                f"{headers['baggage']},{baggage}" if "baggage" in headers else baggage
            )
        return msg._replace(headers=headers)

    def around_job(self, job: JobContext, run: Callable[[], Outcome]) -> Outcome:
        client = sentry_sdk.get_client()
        if not client.is_active():
            return run()
        with sentry_sdk.isolation_scope() as scope:
            name = self._enter(scope, job)
            if not has_tracing_enabled(client.options):
                outcome = run()
                self._capture(job, outcome)
                return outcome
            with sentry_sdk.start_transaction(self._transaction(job, name)) as span:
                outcome = run()
                self._settle(span, job, outcome)
            return outcome

    async def around_async_job(
        self, job: JobContext, run: Callable[[], Awaitable[Outcome]]
    ) -> Outcome:
        """:meth:`around_job` for ``async def`` tasks: the scope (a context variable) is the
        job's own, in its asyncio task."""
        client = sentry_sdk.get_client()
        if not client.is_active():
            return await run()
        with sentry_sdk.isolation_scope() as scope:
            name = self._enter(scope, job)
            if not has_tracing_enabled(client.options):
                outcome = await run()
                self._capture(job, outcome)
                return outcome
            with sentry_sdk.start_transaction(self._transaction(job, name)) as span:
                outcome = await run()
                self._settle(span, job, outcome)
            return outcome

    def _enter(self, scope: Any, job: JobContext) -> str:
        """Set up a run's isolation scope; returns the transaction name."""
        scope.clear_breadcrumbs()  # forked from the process's: none from before the job
        for key, value in _tags(job).items():
            scope.set_tag(key, value)
        name = f"taskq.run {job.task}"
        scope.set_transaction_name(name, source=_SOURCE)
        return name

    def _transaction(self, job: JobContext, name: str) -> Any:
        headers = dict(job.headers or {})
        return sentry_sdk.continue_trace(headers, op=_OP, name=name, source=_SOURCE)

    def _settle(self, span: Any, job: JobContext, outcome: Outcome) -> None:
        span.set_data("messaging.system", "taskq")
        span.set_data("messaging.message.id", job.id)
        span.set_data("messaging.destination.name", job.queue)
        span.set_data("messaging.message.retry.count", job.attempt - 1)
        retried = isinstance(outcome.exception, Retry)
        span.set_status("aborted" if retried else _STATUS.get(outcome.kind, "unknown"))
        self._capture(job, outcome)

    def _capture(self, job: JobContext, outcome: Outcome) -> None:
        """One event for a reported outcome (``cancelled`` never is)."""
        exc = outcome.exception
        if exc is None or outcome.kind not in self.report:
            return
        with capture_internal_exceptions():
            if isinstance(exc, Retry):  # asked for, not an error; a dead letter all the same
                if outcome.kind == DEAD:
                    sentry_sdk.capture_event(self._retries_used_up(job, outcome))
                return
            event, hint = event_from_exception(
                exc, client_options=sentry_sdk.get_client().options, mechanism=MECHANISM
            )
            if isinstance(exc, SoftTimeLimitExceeded):  # where it hit says nothing: per task
                event["fingerprint"] = ["taskq", "SoftTimeLimitExceeded", job.task]
            self._describe(event, job, outcome)
            sentry_sdk.capture_event(event, hint=hint)

    def _retries_used_up(self, job: JobContext, outcome: Outcome) -> Event:
        text = f"{job.task}: dead-lettered after {job.attempt} attempts: Retry({outcome.error})"
        event: Event = {
            "message": text,
            "level": "warning",
            "fingerprint": ["taskq", "retries used up", job.task],
        }
        self._describe(event, job, outcome)
        return event

    def _describe(self, event: Event, job: JobContext, outcome: Outcome) -> None:
        event.setdefault("tags", {})["taskq.outcome"] = outcome.kind
        run: dict[str, object] = {
            "outcome": outcome.kind,
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "duration_s": outcome.duration_s,
        }
        if outcome.kind == RETRY:
            run["retry_in_s"] = outcome.delay_ms / 1000
        include = _collects_queue_data() if self.include_args is None else self.include_args
        if include and outcome.msg is not None:
            run["args"], run["kwargs"] = list(outcome.msg.args), dict(outcome.msg.kwargs)
        event.setdefault("contexts", {})["taskq.run"] = run


def _collects_queue_data() -> bool:
    """The SDK's own switch for queue payloads: ``data_collection["queues"]`` (resolved from
    ``send_default_pii`` when not given), or ``send_default_pii`` in SDKs before it."""
    collection = sentry_sdk.get_client().options.get("data_collection")
    if isinstance(collection, Mapping) and "queues" in collection:
        return bool(collection["queues"])
    return should_send_default_pii()


def _tags(job: JobContext) -> dict[str, str]:
    return {
        "taskq.task": job.task,
        "taskq.job_id": job.id,
        "taskq.attempt": str(job.attempt),
        "taskq.queue": job.queue,
        "taskq.priority": job.priority,
    }


def instrument(
    app: App,
    *,
    report: Iterable[str] = REPORTABLE,
    include_args: bool | None = None,
    propagate_traces: bool = True,
    init: Callable[[], object] | None = None,
) -> SentryMiddleware:
    """Add a :class:`SentryMiddleware` with these options to ``app``, and return it."""
    middleware = SentryMiddleware(
        report=report, include_args=include_args, propagate_traces=propagate_traces, init=init
    )
    app.add_middleware(middleware)
    return middleware
