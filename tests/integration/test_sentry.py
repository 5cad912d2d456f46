"""taskq.contrib.sentry with the real sentry-sdk: events recorded by a transport of the test's
(tests/sentry_tasks.py) or by an HTTP server standing in for Sentry, from real worker
processes and from taskq.testing.drain."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sentry_sdk = pytest.importorskip("sentry_sdk")

from sentry_sdk.envelope import Envelope  # noqa: E402

from taskq import (  # noqa: E402
    App,
    ConfigError,
    JobCancelled,
    Retry,
    SoftTimeLimitExceeded,
    current_job,
)
from taskq.contrib.sentry import SentryMiddleware, instrument  # noqa: E402
from taskq.errors import TaskFailed  # noqa: E402
from taskq.message import Message  # noqa: E402
from taskq.middleware import Middleware  # noqa: E402
from taskq.testing import drain  # noqa: E402
from tests import sentry_tasks  # noqa: E402
from tests.conftest import WorkerProcess, wait_until  # noqa: E402
from tests.sentry_tasks import DSN, RecordingTransport, read_events  # noqa: E402

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]


def tags(event: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in event["tags"].items() if k.startswith("taskq.")}


def exception_of(event: dict[str, Any]) -> tuple[str, str]:
    [value] = event["exception"]["values"]
    return value["type"], value["value"]


@pytest.fixture
def sentry_app(redis_url: str) -> Iterator[App]:
    """``tests.sentry_tasks.app`` (the app the workers load) pointed at this test's Redis."""
    app = sentry_tasks.app
    app.settings = app.settings.replace(redis_url=redis_url)
    yield app
    app.close()


# -- across a real worker --------------------------------------------------------------------


def test_each_failed_attempt_is_one_event_with_the_job_as_tags(
    sentry_app: App, start_worker: StartWorker, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    failing = sentry_tasks.fails.delay(7)
    retried, ok = sentry_tasks.retries_once.delay(), sentry_tasks.ok.delay(1)
    start_worker("-A", "tests.sentry_tasks", "-c", "1", SENTRY_EVENTS_FILE=str(events))
    assert retried.result(timeout=10) == "done" and ok.result(timeout=10) == 1
    with pytest.raises(TaskFailed):
        failing.result(timeout=10)
    # Captured inside the run, before its outcome reaches Redis: all written by now.
    first, second = read_events(events)
    assert exception_of(first) == exception_of(second) == ("ValueError", "boom 7")
    common = {
        "taskq.task": "sentry.fails",
        "taskq.job_id": failing.id,
        "taskq.queue": "tasks",
        "taskq.priority": "normal",
    }
    assert tags(first) == {**common, "taskq.attempt": "1", "taskq.outcome": "retry"}
    assert tags(second) == {**common, "taskq.attempt": "2", "taskq.outcome": "dead"}
    assert first["transaction"] == "taskq.run sentry.fails"
    assert first["exception"]["values"][0]["mechanism"] == {"type": "taskq", "handled": False}
    assert first["contexts"]["taskq.run"]["retry_in_s"] >= 0
    assert "args" not in first["contexts"]["taskq.run"]  # arguments only when opted in
    assert first["level"] == "error"


def test_report_dead_reports_only_the_last_attempt(
    sentry_app: App, start_worker: StartWorker, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    failing = sentry_tasks.fails.delay(1)
    env = {"SENTRY_EVENTS_FILE": str(events), "SENTRY_REPORT": "dead"}
    start_worker("-A", "tests.sentry_tasks", "-c", "1", **env)
    with pytest.raises(TaskFailed):
        failing.result(timeout=10)
    [event] = read_events(events)
    assert tags(event)["taskq.attempt"] == "2" and tags(event)["taskq.outcome"] == "dead"


def test_tags_and_breadcrumbs_of_a_job_stay_with_it(
    sentry_app: App, start_worker: StartWorker, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    jobs = [sentry_tasks.leaky.delay(), sentry_tasks.clean.delay(), sentry_tasks.clean.delay()]
    start_worker("-A", "tests.sentry_tasks", "-c", "1", SENTRY_EVENTS_FILE=str(events))
    for job in jobs:
        with pytest.raises(TaskFailed):
            job.result(timeout=10)
    by_job = {e["tags"]["taskq.job_id"]: e for e in read_events(events)}
    assert list(by_job) == [job.id for job in jobs]  # -c 1: in the order they were sent
    leaky, *cleans = by_job.values()
    assert leaky["tags"]["leaked"] == "yes"
    assert "from the leaky job" in [b.get("message") for b in leaky["breadcrumbs"]["values"]]
    for event in cleans:
        assert "leaked" not in event["tags"]
        crumbs = [b.get("message") for b in event.get("breadcrumbs", {}).get("values", [])]
        assert "from the leaky job" not in crumbs and tags(event)["taskq.task"] == "sentry.clean"


class _Sentry(BaseHTTPRequestHandler):
    """Sentry's envelope endpoint, slow to answer: records every envelope the SDK posts."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.envelopes.append(Envelope.deserialize(body))  # type: ignore[attr-defined]
        time.sleep(0.3)  # a remote Sentry's round trip: the SDK's next event waits its turn
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def sentry_server() -> Iterator[tuple[str, list[Envelope]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sentry)
    server.envelopes = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    yield f"http://public@127.0.0.1:{port}/1", server.envelopes  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()
    thread.join()


def test_the_sdk_transport_sends_its_queue_before_a_child_exits(
    sentry_app: App, start_worker: StartWorker, sentry_server: tuple[str, list[Envelope]]
) -> None:
    """The SDK sends from a background thread, one event at a time. The child leaves by
    os._exit right after its second job, while the second event still waits behind the
    first: only the flush in child_stop gets it out."""
    dsn, envelopes = sentry_server
    jobs = [sentry_tasks.clean.delay() for _ in range(2)]
    args = ("-A", "tests.sentry_tasks", "-c", "1", "--max-tasks-per-child", "2")
    start_worker(*args, TEST_SENTRY_DSN=dsn)
    for job in jobs:
        with pytest.raises(TaskFailed):
            job.result(timeout=10)

    def sent() -> list[str]:
        events = [item.get_event() for e in list(envelopes) for item in e.items]
        return [e["tags"]["taskq.job_id"] for e in events if e is not None]

    wait_until(lambda: sent() == [job.id for job in jobs], message="an event for each job")


# -- in this process, with taskq.testing.drain --------------------------------------------


@pytest.fixture
def sentry_init(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``init(**options)``: the SDK in this process, recording to the file it returns."""
    path = tmp_path / "events.jsonl"

    def init(**options: Any) -> Path:
        sentry_sdk.init(
            dsn=DSN,
            transport=RecordingTransport(str(path)),
            default_integrations=False,
            auto_enabling_integrations=False,
            **options,
        )
        return path

    yield init
    sentry_sdk.get_client().close()
    sentry_sdk.Scope.get_global_scope().set_client(None)


def _tasks(app: App) -> dict[str, Any]:
    @app.task(name="s.fails", max_retries=0)
    def fails(secret: str, *, who: str = "") -> None:
        raise ValueError("no")

    @app.task(name="s.retry", max_retries=1)
    def always_retry() -> None:
        raise Retry(countdown=0, reason="upstream busy")

    @app.task(name="s.cancelled")
    def cancelled() -> None:
        job = current_job()
        raise JobCancelled(job.id if job else "")

    @app.task(name="s.slow", max_retries=0)
    def slow() -> None:
        raise SoftTimeLimitExceeded()

    return {"fails": fails, "retry": always_retry, "cancelled": cancelled, "slow": slow}


PII_OLD_STYLE = pytest.mark.filterwarnings("ignore:The send_default_pii option is deprecated")
NEWER_SDK = pytest.mark.skipif(
    "data_collection" not in sentry_sdk.consts.DEFAULT_OPTIONS,
    reason="data_collection is an option of later sentry-sdk releases",
)


@pytest.mark.parametrize(
    ("include_args", "options", "included"),
    [
        (None, {}, False),
        pytest.param(None, {"data_collection": {"queues": True}}, True, marks=NEWER_SDK),
        # data_collection given without "queues": the SDK's default for it, collect
        pytest.param(None, {"data_collection": {"user_info": False}}, True, marks=NEWER_SDK),
        pytest.param(None, {"send_default_pii": True}, True, marks=PII_OLD_STYLE),
        pytest.param(False, {"data_collection": {"queues": True}}, False, marks=NEWER_SDK),
        (True, {}, True),
        (None, {"include_local_variables": False}, False),
    ],
)
def test_arguments_reach_the_event_only_when_asked_for(
    make_app: Callable[..., App],
    sentry_init: Callable[..., Path],
    include_args: bool | None,
    options: dict[str, Any],
    included: bool,
) -> None:
    path = sentry_init(**options)
    app = make_app()
    instrument(app, include_args=include_args)
    _tasks(app)["fails"].delay("s3cret", who="ann@example.com")
    assert drain(app).dead == 1
    [event] = read_events(path)
    run = event["contexts"]["taskq.run"]
    assert run["outcome"] == "dead" and run["attempt"] == run["max_attempts"] == 1
    if included:
        assert (run["args"], run["kwargs"]) == (["s3cret"], {"who": "ann@example.com"})
    else:
        assert "args" not in run
    if options.get("include_local_variables") is False:  # nor in the frames' variables
        assert "s3cret" not in path.read_text()


def test_retry_cancel_and_soft_time_limits(
    make_app: Callable[..., App], sentry_init: Callable[..., Path]
) -> None:
    path = sentry_init()
    app = make_app()
    app.add_middleware(SentryMiddleware())
    t = _tasks(app)
    for name in ("retry", "cancelled", "slow"):
        t[name].delay()
    result = drain(app, wait_for_retries=True)
    assert (result.retried, result.dead) == (1, 2)
    by_task = {e["tags"]["taskq.task"]: e for e in read_events(path)}
    assert set(by_task) == {"s.retry", "s.slow"}  # a cancelled job is not an error
    # A Retry is no error, but the job it dead-letters is a warning (once, at the end).
    used_up = by_task["s.retry"]
    assert "exception" not in used_up and used_up["level"] == "warning"
    assert used_up["message"] == "s.retry: dead-lettered after 2 attempts: Retry(upstream busy)"
    assert tags(used_up)["taskq.attempt"] == "2" and tags(used_up)["taskq.outcome"] == "dead"
    slow = by_task["s.slow"]
    assert slow["fingerprint"] == ["taskq", "SoftTimeLimitExceeded", "s.slow"]


class Declined(Exception):
    pass


def test_the_tasks_own_events_carry_the_job_and_the_sdk_filters_apply(
    make_app: Callable[..., App], sentry_init: Callable[..., Path]
) -> None:
    path = sentry_init(ignore_errors=[Declined])
    app = make_app()
    instrument(app)

    @app.task(name="s.notes", max_retries=0)
    def notes() -> None:
        sentry_sdk.capture_message("a note from the task")
        raise Declined()

    job = notes.delay()
    assert drain(app).dead == 1
    [note] = read_events(path)  # the Declined error was filtered out by the SDK
    assert note["message"] == "a note from the task"
    assert tags(note) == {
        "taskq.task": "s.notes",
        "taskq.job_id": job.id,
        "taskq.attempt": "1",
        "taskq.queue": app.settings.queue,
        "taskq.priority": "normal",
    }


def test_a_run_continues_the_producers_trace(
    make_app: Callable[..., App], sentry_init: Callable[..., Path]
) -> None:
    path = sentry_init(traces_sample_rate=1.0)
    app = make_app()
    instrument(app)
    with sentry_sdk.start_transaction(name="request", op="http.server") as producer:
        _tasks(app)["fails"].delay("x")
    assert drain(app).dead == 1
    [run] = [t for t in read_events(path, "transaction") if t["transaction"] != "request"]
    assert run["transaction"] == "taskq.run s.fails"
    trace = run["contexts"]["trace"]
    assert trace["trace_id"] == producer.trace_id and trace["parent_span_id"] == producer.span_id
    assert trace["op"] == "queue.process" and trace["status"] == "internal_error"
    assert tags(run)["taskq.task"] == "s.fails"
    [event] = read_events(path)
    assert event["contexts"]["trace"]["trace_id"] == producer.trace_id


class OtherBaggage(Middleware):
    def before_enqueue(self, msg: Message) -> Message:
        return msg._replace(headers={"baggage": "team=billing"})


def test_the_trace_travels_in_the_headers_next_to_other_baggage(
    make_app: Callable[..., App], sentry_init: Callable[..., Path]
) -> None:
    sentry_init(traces_sample_rate=1.0)
    app, seen = make_app(), list[dict[str, str]]()
    app.add_middleware(OtherBaggage())
    instrument(app)

    @app.task(name="s.headers")
    def headers() -> None:
        job = current_job()
        seen.append(dict(job.headers or {}) if job else {})

    with sentry_sdk.start_transaction(name="request") as producer:
        headers.delay()
    assert drain(app).ok == 1
    [sent] = seen
    assert sent["sentry-trace"].startswith(f"{producer.trace_id}-{producer.span_id}")
    assert sent["baggage"].startswith("team=billing,sentry-")
    assert f"sentry-trace_id={producer.trace_id}" in sent["baggage"]


def test_without_an_active_client_nothing_is_added_or_sent(make_app: Callable[..., App]) -> None:
    app, seen = make_app(), []
    instrument(app)

    @app.task(name="s.headers", max_retries=0)
    def headers() -> None:
        job = current_job()
        seen.append(dict(job.headers or {}) if job else None)
        raise ValueError("no")

    headers.delay()
    assert drain(app).dead == 1 and seen == [{}]


def test_report_names_only_failures() -> None:
    with pytest.raises(ConfigError, match="cancelled"):
        SentryMiddleware(report=("retry", "cancelled"))


def test_async_jobs_are_reported_each_with_its_own_scope(
    make_app: Callable[..., App], sentry_init: Callable[..., Path]
) -> None:
    path = sentry_init(traces_sample_rate=1.0)
    app = make_app()
    app.add_middleware(SentryMiddleware())

    @app.task(name="s.afails", max_retries=0)
    async def afails(tag: str, seconds: float) -> None:
        sentry_sdk.set_tag("mine", tag)  # in this coroutine's scope only
        sentry_sdk.add_breadcrumb(message=f"crumb {tag}")
        await asyncio.sleep(seconds)  # the other job runs meanwhile, in its own scope
        raise ValueError(f"failed {tag}")

    jobs = {tag: afails.delay(tag, seconds) for tag, seconds in (("a", 0.2), ("b", 0.1))}
    assert drain(app).dead == 2
    by_job = {e["tags"]["taskq.job_id"]: e for e in read_events(path) if "exception" in e}
    assert set(by_job) == {job.id for job in jobs.values()}
    for tag, job in jobs.items():
        event = by_job[job.id]
        assert event["tags"]["mine"] == tag and exception_of(event) == (
            "ValueError",
            f"failed {tag}",
        )
        crumbs = [b.get("message") for b in event["breadcrumbs"]["values"]]
        assert crumbs == [f"crumb {tag}"]
