"""The app that tests/integration/test_otel.py runs in a worker subprocess: traced with
taskq.contrib.otel, each child exporting its finished spans as JSON lines to the file named
by ``OTEL_TEST_SPANS`` (appended, one write per span, so both children can share it).

``OTEL_TEST_BATCH=1`` buffers spans in a BatchSpanProcessor that exports only when flushed
(the middleware's ``child_stop``), instead of a SimpleSpanProcessor's export at each end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from taskq import App, Middleware, current_job
from taskq.contrib.otel import instrument

app = App()  # configured by TASKQ_* variables set by the test fixtures
instrument(app)  # the global provider: set in each child by WorkerTracing


def span_record(span: ReadableSpan) -> dict[str, object]:
    """A finished span as JSON: ids in hex, kind, status, attributes, events."""
    ctx, parent = span.context, span.parent
    assert ctx is not None
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "pid": os.getpid(),
    }


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s)) + "\n" for s in spans)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS


class WorkerTracing(Middleware):
    """What an application does in its workers: a tracer provider per child."""

    def child_start(self) -> None:
        exporter = JsonLinesExporter(os.environ["OTEL_TEST_SPANS"])
        if os.environ.get("OTEL_TEST_BATCH") == "1":
            processor: SimpleSpanProcessor | BatchSpanProcessor = BatchSpanProcessor(
                exporter, schedule_delay_millis=600_000
            )
        else:
            processor = SimpleSpanProcessor(exporter)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)


app.add_middleware(WorkerTracing())
inner = trace.get_tracer("tests.otel_tasks")


@app.task(name="otel.ok")
def ok(n: int) -> int:
    with inner.start_as_current_span("inside the task"):
        return n


@app.task(name="otel.flaky", max_retries=1)
def flaky() -> str:
    job = current_job()
    if job is not None and job.attempt == 1:
        raise ValueError("first attempt fails")
    return "second attempt"


@app.task(name="otel.fails", max_retries=0)
def fails() -> None:
    raise ValueError("always")
