"""The app of the Sentry tests' workers (tests/integration/test_sentry.py), apart from
tests/tasks.py. Each child calls ``sentry_sdk.init`` as it starts; events go to the file
named by ``SENTRY_EVENTS_FILE`` (or, with ``TEST_SENTRY_DSN``, over HTTP to that DSN).
``SENTRY_REPORT`` (comma-separated) is the middleware's ``report``."""

from __future__ import annotations

import json
import os
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from taskq import App, Retry, current_job
from taskq.contrib.sentry import REPORTABLE, instrument

DSN = "http://public@example.invalid/1"


class RecordingTransport(Transport):
    """Appends each event and transaction the SDK sends to ``path``, one JSON line each:
    ``{"item": "event" | "transaction", "event": {...}}``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def capture_envelope(self, envelope: Envelope) -> None:
        lines = [
            json.dumps({"item": item.type, "event": json.loads(item.payload.get_bytes())}) + "\n"
            for item in envelope.items
            if item.type in ("event", "transaction")
        ]
        if lines:  # one write to a file opened for appending: lines of processes don't mix
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, "".join(lines).encode())
            finally:
                os.close(fd)


def read_events(path: str | os.PathLike[str], item: str = "event") -> list[dict[str, Any]]:
    """The events (or transactions) ``RecordingTransport`` wrote to ``path``, oldest first."""
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f]
    except FileNotFoundError:
        return []
    return [r["event"] for r in records if r["item"] == item]


def init_sentry() -> None:
    dsn = os.environ.get("TEST_SENTRY_DSN")
    if dsn:  # the SDK's own HTTP transport (its background thread, its queue)
        sentry_sdk.init(dsn=dsn, http_proxy="", https_proxy="")
    else:
        sentry_sdk.init(dsn=DSN, transport=RecordingTransport(os.environ["SENTRY_EVENTS_FILE"]))


app = App(store_results=True)  # the rest from the TASKQ_* variables the fixtures set
report = os.environ.get("SENTRY_REPORT")
instrument(app, report=report.split(",") if report else REPORTABLE, init=init_sentry)


@app.task(name="sentry.fails", max_retries=1)
def fails(n: int) -> None:
    raise ValueError(f"boom {n}")


@app.task(name="sentry.ok")
def ok(n: int) -> int:
    return n


@app.task(name="sentry.retries_once", max_retries=1)
def retries_once() -> str:
    job = current_job()
    if job is not None and job.attempt == 1:
        raise Retry(countdown=0, reason="not yet")
    return "done"


@app.task(name="sentry.leaky", max_retries=0)
def leaky() -> None:
    """Adds a tag and a breadcrumb of its own, then fails: the next job must see neither."""
    sentry_sdk.set_tag("leaked", "yes")
    sentry_sdk.add_breadcrumb(message="from the leaky job")
    raise RuntimeError("leaky")


@app.task(name="sentry.clean", max_retries=0)
def clean() -> None:
    raise RuntimeError("clean")
