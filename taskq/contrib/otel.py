"""OpenTelemetry tracing of taskq jobs (``pip install 'taskq[otel]'``; docs/opentelemetry.md).

``instrument(app)`` (or ``app.add_middleware(TaskqInstrumentation())``) adds a middleware that

- at enqueue, starts and ends a PRODUCER span ``taskq.enqueue <task>`` (a child of the
  caller's current span) and injects its context into the job's ``headers`` with the
  OpenTelemetry propagator (W3C ``traceparent``/``tracestate``, and ``baggage``, by default);
- in the worker, runs each job inside a CONSUMER span ``taskq.run <task>``, the child of the
  context extracted from those headers and current while the task runs, with the job's id,
  queue, priority, attempt and outcome; a failed run has status ERROR and the task's
  exception recorded, a retry is a ``taskq.retry`` event, a dead letter a
  ``taskq.dead_letter`` event;
- for a job the worker settles without running it (expired, refused, lost with a worker
  that died under it), records a zero-length CONSUMER span ``taskq.settle <task>``.

Spans go to ``tracer_provider``, or to the global one (``trace.set_tracer_provider``) as it
is when a span starts. Buffered spans are flushed when a worker child exits and when the
worker stops. Only this module imports ``opentelemetry``: ``import taskq`` does not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        "taskq.contrib.otel needs the OpenTelemetry API: pip install 'taskq[otel]' "
        f"(importing it failed: {exc})"
    ) from exc

from taskq import __version__
from taskq.errors import Retry
from taskq.middleware import Middleware
from taskq.worker.outcome import DEAD, EXPIRED, RETRY, Outcome

if TYPE_CHECKING:
    from taskq.app import App
    from taskq.context import JobContext
    from taskq.message import Message

__all__ = ["ATTRIBUTES", "TaskqInstrumentation", "instrument"]

SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
QUEUE = "messaging.destination.name"
JOB_ID = "messaging.message.id"
TASK = "taskq.task.name"
PRIORITY = "taskq.job.priority"
ATTEMPT = "taskq.job.attempt"
MAX_ATTEMPTS = "taskq.job.max_attempts"
OUTCOME = "taskq.job.outcome"
ERROR_TYPE = "error.type"
RETRY_DELAY = "taskq.retry.delay_ms"
NEXT_ATTEMPT = "taskq.retry.next_attempt"
DEAD_REASON = "taskq.dead_letter.reason"
ATTRIBUTES = (
    SYSTEM, OPERATION_TYPE, OPERATION_NAME, QUEUE, JOB_ID, TASK, PRIORITY, ATTEMPT,
    MAX_ATTEMPTS, OUTCOME, ERROR_TYPE, RETRY_DELAY, NEXT_ATTEMPT, DEAD_REASON,
)  # fmt: skip
"""Every attribute name this module sets (OpenTelemetry messaging conventions, then taskq's)."""

FLUSH_TIMEOUT_MS = 5_000
"""How long a child that exits (or the stopping worker) waits for its spans to be exported."""


class TaskqInstrumentation(Middleware):
    """The tracing middleware.

    Args:
        tracer_provider: where spans go; default: the global provider.
        propagator: how the context travels in ``headers``; default: the global one
            (``propagate.set_global_textmap``), W3C trace context and baggage.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.propagator = propagator
        self.tracer = trace.get_tracer("taskq", __version__, tracer_provider)

    def before_enqueue(self, msg: Message) -> Message:
        """The enqueue span (ended at once: it marks the moment, before the job is encoded
        and sent) and its context in the job's headers."""
        attributes = _job_attributes("create", "enqueue", msg.queue, msg.id, msg.task)
        attributes[PRIORITY] = msg.priority
        span = self.tracer.start_span(
            f"taskq.enqueue {msg.task}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        headers = dict(msg.headers or {})
        try:
            self._textmap().inject(headers, context=trace.set_span_in_context(span))
        finally:
            span.end()
        return msg._replace(headers=headers) if headers else msg

    def around_job(self, job: JobContext, run: Callable[[], Outcome]) -> Outcome:
        """The run span, current (with the producer's baggage) while the task runs."""
        span, token = self._start_run(job)
        try:
            outcome = run()
            _settle(span, outcome)
        except BaseException as exc:  # not the task's failure (an Outcome): the run was cut
            _cut(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()
        return outcome

    async def around_async_job(
        self, job: JobContext, run: Callable[[], Awaitable[Outcome]]
    ) -> Outcome:
        """:meth:`around_job` for ``async def`` tasks (the span is current in the job's own
        asyncio task only)."""
        span, token = self._start_run(job)
        try:
            outcome = await run()
            _settle(span, outcome)
        except BaseException as exc:
            _cut(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()
        return outcome

    def _start_run(self, job: JobContext) -> tuple[Span, Any]:
        attributes = _job_attributes("process", "run", job.queue, job.id, job.task)
        attributes |= {PRIORITY: job.priority, ATTEMPT: job.attempt}
        attributes[MAX_ATTEMPTS] = job.max_attempts
        parent = self._extract(job.headers)
        span = self.tracer.start_span(
            f"taskq.run {job.task}", parent, kind=SpanKind.CONSUMER, attributes=attributes
        )
        return span, otel_context.attach(trace.set_span_in_context(span, parent))

    def after_job(self, outcome: Outcome) -> None:
        """The settle span of a job that did not run here (a run has its run span)."""
        msg = outcome.msg
        if msg is None or outcome.exception is not None:
            return
        if outcome.kind not in (RETRY, DEAD, EXPIRED):  # ok and cancelled come from runs
            return
        attributes = _job_attributes("settle", "settle", outcome.delivery.queue, msg.id, msg.task)
        attributes |= {PRIORITY: msg.priority, ATTEMPT: outcome.attempt}
        span = self.tracer.start_span(
            f"taskq.settle {msg.task}",
            context=self._extract(msg.headers),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        )
        try:
            _settle(span, outcome)
        finally:
            span.end()

    def child_stop(self) -> None:
        self.flush()

    def worker_stop(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Export the spans the provider buffers (an SDK provider; others have nothing)."""
        provider = self.tracer_provider or trace.get_tracer_provider()
        force_flush: Callable[[int], object] | None = getattr(provider, "force_flush", None)
        if force_flush is not None:
            force_flush(FLUSH_TIMEOUT_MS)

    def _textmap(self) -> TextMapPropagator:
        return self.propagator or propagate.get_global_textmap()

    def _extract(self, headers: Mapping[str, str] | None) -> otel_context.Context:
        return self._textmap().extract(dict(headers or {}))


def instrument(
    app: App,
    tracer_provider: trace.TracerProvider | None = None,
    propagator: TextMapPropagator | None = None,
) -> TaskqInstrumentation:
    """Trace ``app``'s jobs; returns the middleware (the one already added, if any)."""
    for m in app.middleware:
        if isinstance(m, TaskqInstrumentation):
            return m
    m = TaskqInstrumentation(tracer_provider, propagator)
    app.add_middleware(m)
    return m


def _job_attributes(
    operation_type: str, operation: str, queue: str, job_id: str, task: str
) -> dict[str, Any]:
    return {
        SYSTEM: "taskq",
        OPERATION_TYPE: operation_type,
        OPERATION_NAME: operation,
        QUEUE: queue,
        JOB_ID: job_id,
        TASK: task,
    }


def _settle(span: Span, outcome: Outcome) -> None:
    """What became of the job, on its span: outcome, events, error status."""
    span.set_attribute(OUTCOME, outcome.kind)
    exc = outcome.exception
    if outcome.kind == DEAD or (outcome.kind == RETRY and not isinstance(exc, Retry)):
        span.set_attribute(ERROR_TYPE, outcome.error_type or "_OTHER")
        if exc is not None:
            span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{outcome.error_type}: {outcome.error}"))
    if outcome.kind == RETRY:
        delay = {RETRY_DELAY: outcome.delay_ms, NEXT_ATTEMPT: outcome.attempt + 1}
        span.add_event("taskq.retry", delay)
    elif outcome.kind == DEAD:
        reason = f"{outcome.error_type}: {outcome.error}" if outcome.error_type else outcome.error
        span.add_event("taskq.dead_letter", {DEAD_REASON: reason, ERROR_TYPE: outcome.error_type})


def _cut(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
