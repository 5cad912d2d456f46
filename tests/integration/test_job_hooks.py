"""The producer and run hooks (``before_enqueue``, ``around_job``) that integrations build on,
through a real Redis and the worker loop (taskq.testing.drain)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import pytest

from taskq import App, Middleware, chain, chord, current_job
from taskq.cli.logs import JsonFormatter
from taskq.context import JobContext
from taskq.message import Message
from taskq.testing import drain
from taskq.worker.outcome import DEAD, OK, RETRY, Outcome

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_span: ContextVar[str | None] = ContextVar("span", default=None)


class Tracer(Middleware):
    """What a tracing integration does: a header at enqueue, a context around the run."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Any, str, BaseException | None]] = []

    def before_enqueue(self, msg: Message) -> Message:
        return msg._replace(headers={**(msg.headers or {}), "traceparent": TRACEPARENT})

    def around_job(self, job: JobContext, run: Callable[[], Outcome]) -> Outcome:
        token = _span.set(f"span of {job.task}")
        try:
            outcome = run()
        finally:
            _span.reset(token)
        self.runs.append((job.task, dict(job.headers or {}), outcome.kind, outcome.exception))
        return outcome


class Broken(Middleware):
    def __init__(self, before_run: bool) -> None:
        self.before_run = before_run

    def around_job(self, job: JobContext, run: Callable[[], Outcome]) -> Outcome:
        if self.before_run:
            raise RuntimeError("hook broke before the run")
        run()
        raise RuntimeError("hook broke after the run")


def _tasks(app: App, seen: list[Any]) -> dict[str, Any]:
    @app.task(name="hooks.ok")
    def ok(n: int) -> int:
        job = current_job()
        seen.append((_span.get(), dict(job.headers or {}) if job else None))
        return n

    @app.task(name="hooks.fails", max_retries=1)
    def fails() -> None:
        raise ValueError("no")

    return {"ok": ok, "fails": fails}


def test_headers_travel_and_the_run_happens_inside_the_hook(
    make_app: Callable[..., App],
) -> None:
    app, tracer, seen = make_app(), Tracer(), []
    app.add_middleware(tracer)
    t = _tasks(app, seen)
    t["ok"].delay(1)
    t["fails"].delay()
    result = drain(app, wait_for_retries=True)
    assert (result.ok, result.retried, result.dead) == (1, 1, 1)
    assert seen == [("span of hooks.ok", {"traceparent": TRACEPARENT})]
    kinds = [(task, kind) for task, _, kind, _ in tracer.runs]
    assert kinds == [("hooks.ok", OK), ("hooks.fails", RETRY), ("hooks.fails", DEAD)]
    assert all(headers == {"traceparent": TRACEPARENT} for _, headers, _, _ in tracer.runs)
    errors = [exc for *_, exc in tracer.runs]
    assert errors[0] is None and all(isinstance(e, ValueError) for e in errors[1:])


@pytest.mark.parametrize("before_run", [True, False])
def test_a_broken_hook_is_logged_and_the_job_runs_once(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture, before_run: bool
) -> None:
    app, seen = make_app(), []
    app.add_middleware(Broken(before_run))
    _tasks(app, seen)["ok"].delay(1)
    with caplog.at_level(logging.ERROR, logger="taskq.middleware"):
        result = drain(app)
    assert result.ok == 1 and len(seen) == 1
    assert any("Broken.around_job failed" in r.getMessage() for r in caplog.records)


def test_a_job_without_hooks_has_no_headers(make_app: Callable[..., App]) -> None:
    app, seen = make_app(), []
    app.add_middleware(Middleware())  # overrides nothing: never called per job
    _tasks(app, seen)["ok"].delay(1)
    drain(app)
    assert seen == [(None, {})]


def test_the_json_log_line_of_a_run_carries_its_trace_id(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app, seen = make_app(), []
    app.add_middleware(Tracer())
    _tasks(app, seen)["ok"].delay(1)
    with caplog.at_level(logging.INFO, logger="taskq.worker.finish"):
        drain(app)
    [record] = [r for r in caplog.records if r.name == "taskq.worker.finish"]
    line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == TRACEPARENT.split("-")[1]
    assert {k: line[k] for k in ("task", "queue", "outcome", "attempt")} == {
        "task": "hooks.ok",
        "queue": app.settings.queue,
        "outcome": "ok",
        "attempt": 1,
    }
    assert line["job_id"] and line["duration_ms"] >= 0


class StepHeaders(Middleware):
    """A header naming the job: which producer hook each step's headers came from."""

    def before_enqueue(self, msg: Message) -> Message:
        return msg._replace(headers={"made-for": msg.id})


def test_every_workflow_step_gets_its_headers_at_launch(make_app: Callable[..., App]) -> None:
    app, seen = make_app(store_results=True), []
    app.add_middleware(StepHeaders())

    @app.task(name="hooks.step")
    def step(*values: Any) -> int:  # the chord's body gets its header's results as a list
        job = current_job()
        assert job is not None
        seen.append((job.id, dict(job.headers or {})))
        return sum(sum(v) if isinstance(v, list) else v for v in values)

    flow = chain(step.s(1), chord([step.s(), step.s()], step.s())).apply_async()
    result = drain(app)
    assert result.ok == 4 and flow.result(timeout=5) == 2
    assert len(seen) == 4
    assert all(headers == {"made-for": job_id} for job_id, headers in seen)
