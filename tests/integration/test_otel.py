"""OpenTelemetry (issue 20, point 2): the real SDK, the producer's spans in memory, the
worker's written by a real ``taskq worker`` process (tests/otel_tasks.py), and in-process
through ``taskq.testing.drain``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from taskq import App, Retry, chain, current_job
from taskq.context import JobContext
from taskq.contrib.otel import TaskqInstrumentation, instrument
from taskq.message import Message
from taskq.testing import drain
from taskq.worker.outcome import Outcome
from tests.conftest import ROOT, WorkerProcess, wait_until


class Tracing:
    """An SDK provider whose finished spans stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


@pytest.fixture
def tracing() -> Iterator[Tracing]:
    t = Tracing()
    yield t
    t.provider.shutdown()


@pytest.fixture
def producer(make_app: Callable[..., App], tracing: Tracing) -> App:
    app = make_app()
    instrument(app, tracer_provider=tracing.provider)
    return app


def _hex(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


class SpanFile:
    """The JSON lines the worker's children export (tests/otel_tasks.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def named(self, name: str, n: int = 1) -> list[dict[str, Any]]:
        """Wait for ``n`` spans called ``name``; them, in the order they ended."""
        wait_until(lambda: len(self._named(name)) >= n, message=f"{n} span(s) {name!r}")
        return self._named(name)

    def _named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.all() if s["name"] == name]


@pytest.fixture
def worker_spans(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> Callable[..., tuple[WorkerProcess, SpanFile]]:
    def start(**env: str) -> tuple[WorkerProcess, SpanFile]:
        path = tmp_path / "spans.jsonl"
        w = start_worker("-A", "tests.otel_tasks", "-c", "1", OTEL_TEST_SPANS=str(path), **env)
        return w, SpanFile(path)

    return start


def test_the_run_span_is_the_child_of_the_enqueue_span_across_a_worker(
    producer: App, tracing: Tracing, worker_spans: Callable[..., tuple[WorkerProcess, SpanFile]]
) -> None:
    _, spans = worker_spans()
    with tracing.tracer.start_as_current_span("request"):
        job = producer.enqueue(Message("otel.ok", (7,)))
    [request] = tracing.spans("request")
    [enqueue] = tracing.spans("taskq.enqueue otel.ok")
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None and request.context is not None
    assert enqueue.parent.span_id == request.context.span_id
    assert dict(enqueue.attributes or {}) == {
        "messaging.system": "taskq",
        "messaging.operation.type": "create",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "tasks",
        "messaging.message.id": job.id,
        "taskq.task.name": "otel.ok",
        "taskq.job.priority": "normal",
    }
    [run] = spans.named("taskq.run otel.ok")
    trace_id, span_id = _hex(enqueue)
    assert (run["trace_id"], run["parent_id"]) == (trace_id, span_id)
    assert run["kind"] == "CONSUMER" and run["status"] == "UNSET" and run["events"] == []
    assert run["attributes"] == {
        "messaging.system": "taskq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.destination.name": "tasks",
        "messaging.message.id": job.id,
        "taskq.task.name": "otel.ok",
        "taskq.job.priority": "normal",
        "taskq.job.attempt": 1,
        "taskq.job.max_attempts": 3,
        "taskq.job.outcome": "ok",
    }
    [inside] = spans.named("inside the task")
    assert (inside["trace_id"], inside["parent_id"]) == (trace_id, run["span_id"])


def test_a_retried_job_has_a_run_span_per_attempt(
    producer: App, tracing: Tracing, worker_spans: Callable[..., tuple[WorkerProcess, SpanFile]]
) -> None:
    _, spans = worker_spans()
    producer.enqueue(Message("otel.flaky"))
    first, second = spans.named("taskq.run otel.flaky", 2)
    [enqueue] = tracing.spans("taskq.enqueue otel.flaky")
    trace_id, span_id = _hex(enqueue)
    for run in (first, second):  # the retry keeps the job's headers: same parent
        assert (run["trace_id"], run["parent_id"]) == (trace_id, span_id)
    assert [r["attributes"]["taskq.job.attempt"] for r in (first, second)] == [1, 2]
    assert [r["attributes"]["taskq.job.outcome"] for r in (first, second)] == ["retry", "ok"]
    assert (first["status"], second["status"]) == ("ERROR", "UNSET")
    assert first["attributes"]["error.type"] == "ValueError"
    exception, retry = first["events"]
    assert exception["name"] == "exception"
    assert exception["attributes"]["exception.message"] == "first attempt fails"
    assert retry["name"] == "taskq.retry"
    assert retry["attributes"]["taskq.retry.next_attempt"] == 2
    assert retry["attributes"]["taskq.retry.delay_ms"] > 0
    assert second["events"] == []


def test_a_dead_lettered_job_has_status_error_and_a_dead_letter_event(
    producer: App, worker_spans: Callable[..., tuple[WorkerProcess, SpanFile]]
) -> None:
    _, spans = worker_spans()
    producer.enqueue(Message("otel.fails"))
    [run] = spans.named("taskq.run otel.fails")
    assert run["status"] == "ERROR"
    assert run["attributes"]["taskq.job.outcome"] == "dead"
    assert run["attributes"]["error.type"] == "ValueError"
    events = {e["name"]: e["attributes"] for e in run["events"]}
    assert events["exception"]["exception.type"] == "ValueError"
    assert events["taskq.dead_letter"] == {
        "taskq.dead_letter.reason": "ValueError: always",
        "error.type": "ValueError",
    }


def test_a_job_that_cannot_run_has_a_settle_span(
    producer: App, tracing: Tracing, worker_spans: Callable[..., tuple[WorkerProcess, SpanFile]]
) -> None:
    _, spans = worker_spans()
    producer.enqueue(Message("otel.no_such_task"))
    [settle] = spans.named("taskq.settle otel.no_such_task")
    [enqueue] = tracing.spans("taskq.enqueue otel.no_such_task")
    assert (settle["trace_id"], settle["parent_id"]) == _hex(enqueue)
    assert settle["status"] == "ERROR" and settle["attributes"]["taskq.job.outcome"] == "dead"
    assert settle["attributes"]["messaging.operation.type"] == "settle"
    [event] = settle["events"]
    assert event["name"] == "taskq.dead_letter"
    assert event["attributes"]["taskq.dead_letter.reason"].startswith("Rejected: ")


def test_buffered_spans_are_flushed_when_the_worker_stops(
    producer: App, worker_spans: Callable[..., tuple[WorkerProcess, SpanFile]]
) -> None:
    w, spans = worker_spans(OTEL_TEST_BATCH="1")  # exported only when flushed
    job = producer.enqueue(Message("otel.ok", (1,), result_ttl_s=60))
    assert job.result(timeout=10) == 1  # the run (and its span) ended
    assert spans.all() == []
    w.stop()
    assert [s["name"] for s in spans.all()] == ["inside the task", "taskq.run otel.ok"]


def test_spans_in_process_with_drain(make_app: Callable[..., App], tracing: Tracing) -> None:
    app = make_app()
    instrument(app, tracer_provider=tracing.provider)
    assert instrument(app) is instrument(app)  # added once
    assert sum(isinstance(m, TaskqInstrumentation) for m in app.middleware) == 1
    seen: list[tuple[str, object]] = []

    @app.task(name="otel.local", max_retries=1)
    def local() -> None:
        job = current_job()
        assert job is not None
        traceparent = (job.headers or {}).get("traceparent", "")
        seen.append((traceparent[3:35], baggage.get_baggage("tenant")))
        if job.attempt == 1:
            raise Retry(countdown=0.01)

    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        with tracing.tracer.start_as_current_span("request"):
            local.delay()
    finally:
        otel_context.detach(token)
    result = drain(app, wait_for_retries=True)
    assert (result.retried, result.ok) == (1, 1)
    [enqueue] = tracing.spans("taskq.enqueue otel.local")
    first, second = tracing.spans("taskq.run otel.local")
    trace_id, _ = _hex(enqueue)
    assert seen == [(trace_id, "acme"), (trace_id, "acme")]  # baggage travels too
    assert first.parent is not None and enqueue.context is not None
    assert first.parent.span_id == enqueue.context.span_id
    # Retry(...) asks for a retry: an event, not an error
    assert first.status.status_code is StatusCode.UNSET
    assert [e.name for e in first.events] == ["taskq.retry"]
    assert (first.events[0].attributes or {})["taskq.retry.delay_ms"] == 10
    attempts = [(s.attributes or {})["taskq.job.attempt"] for s in (first, second)]
    assert attempts == [1, 2] and (second.attributes or {})["taskq.job.outcome"] == "ok"
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached


def test_a_workflow_launched_in_a_span_is_one_trace(
    make_app: Callable[..., App], tracing: Tracing
) -> None:
    app = make_app(store_results=True)
    instrument(app, tracer_provider=tracing.provider)

    @app.task(name="otel.add")
    def add(a: int, b: int = 0) -> int:
        return a + b

    with tracing.tracer.start_as_current_span("request"):
        flow = chain(add.s(1, 2), add.s(3), add.s(4)).apply_async()
    assert drain(app).ok == 3 and flow.result(timeout=5) == 10
    [request] = tracing.spans("request")
    enqueues, runs = tracing.spans("taskq.enqueue otel.add"), tracing.spans("taskq.run otel.add")
    assert len(enqueues) == len(runs) == 3
    assert request.context is not None
    assert {s.context.trace_id for s in enqueues + runs if s.context} == {request.context.trace_id}
    assert all(
        s.parent is not None and s.parent.span_id == request.context.span_id for s in enqueues
    )
    ids = {s.context.span_id for s in enqueues if s.context}
    assert {s.parent.span_id for s in runs if s.parent} == ids  # each run under its own step


def test_a_run_cut_short_ends_its_span_with_an_error(tracing: Tracing) -> None:
    hook = TaskqInstrumentation(tracer_provider=tracing.provider)
    job = JobContext.of(hook.before_enqueue(Message("otel.cut")), 1, 3, "1-0")

    def run() -> Outcome:
        raise KeyboardInterrupt  # what a run that never returns an outcome looks like

    with pytest.raises(KeyboardInterrupt):
        hook.around_job(job, run)
    [span] = tracing.spans("taskq.run otel.cut")
    assert span.status.status_code is StatusCode.ERROR and span.end_time is not None
    assert [e.name for e in span.events] == ["exception"]
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_taskq_imports_no_opentelemetry_and_names_the_extra_without_it() -> None:
    """``import redis`` comes first: redis-py 8 itself loads the OpenTelemetry metrics SDK
    when it is installed (its observability module), so taskq's part is what comes after."""
    code = (
        "import sys, redis\n"
        "def otel(): return {m for m in sys.modules if m.split('.')[0] == 'opentelemetry'}\n"
        "before = otel()\n"
        "import taskq, taskq.cli, taskq.testing, taskq.contrib, taskq.worker.pool\n"
        "assert otel() == before, sorted(otel() - before)\n"
        "import taskq.contrib.otel\n"
        "assert 'opentelemetry.propagate' in otel() - before\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=30)
    blocked = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the extra were not installed\n"
        "import taskq, taskq.cli, taskq.testing, taskq.contrib\n"
        "try:\n"
        "    import taskq.contrib.otel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", blocked], cwd=ROOT, check=True, timeout=30, capture_output=True
    )
    assert "pip install 'taskq[otel]'" in out.stdout.decode()


def test_async_jobs_get_a_run_span_each_current_in_their_own_coroutine(
    make_app: Callable[..., App], tracing: Tracing
) -> None:
    app = make_app()
    instrument(app, tracer_provider=tracing.provider)
    seen: dict[str, str] = {}

    @app.task(name="otel.anap")
    async def anap(tag: str) -> None:
        await asyncio.sleep(0.05)  # the others run meanwhile, each with its own span current
        seen[tag] = f"{trace.get_current_span().get_span_context().span_id:016x}"

    for tag in "abc":
        anap.delay(tag)
    assert drain(app).ok == 3
    runs = tracing.spans("taskq.run otel.anap")
    assert len(runs) == 3 and sorted(seen.values()) == sorted(_hex(s)[1] for s in runs)
    assert all((s.attributes or {})["taskq.job.outcome"] == "ok" for s in runs)
