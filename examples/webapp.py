"""A tiny web app whose endpoints enqueue jobs, on the standard library's ``wsgiref``.

    PORT=8000 python -m examples.webapp

    curl -X POST 'localhost:8000/reports?seconds=2'    # 202 {"job_id": "...", "status_url": ...}
    curl localhost:8000/jobs/JOB_ID                     # {"status": "pending" | "done" | "dead"}

It listens on ``$HOST`` (default 0.0.0.0, as Procfile platforms need) and ``$PORT`` (default
8000), and finds Redis like the worker does (``TASKQ_REDIS_URL``, else ``REDIS_URL``). Any WSGI
server can serve :func:`application` instead: ``gunicorn examples.webapp:application``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import make_server

from examples.tasks import RESULTS_KEY, app, build_report, send_welcome_email, store
from taskq import Deadletters, EnqueueError, Job

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
STATUS_TEXT = {200: "200 OK", 202: "202 Accepted", 400: "400 Bad Request", 404: "404 Not Found"}


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI entry point."""
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/")
    query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    try:
        status, body = route(method, path, query)
    except KeyError as exc:
        status, body = 400, {"error": f"missing query parameter {exc}"}
    except (ValueError, EnqueueError) as exc:
        status, body = 400, {"error": str(exc)}
    payload = json.dumps(body).encode()
    start_response(
        STATUS_TEXT[status],
        [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
    )
    return [payload]


def route(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
    if method == "GET" and path == "/":
        return 200, {"service": "taskq example", "queue": app.settings.queue}
    if method == "POST" and path == "/reports":
        report_id = query.get("id") or uuid.uuid4().hex[:8]
        seconds = float(query.get("seconds", "1"))
        return 202, accepted(build_report.delay(report_id, seconds=seconds))
    if method == "POST" and path == "/emails":
        return 202, accepted(send_welcome_email.delay(int(query["user_id"])))
    if method == "GET" and path.startswith("/jobs/"):
        return 200, job_status(path.removeprefix("/jobs/"))
    return 404, {"error": f"no route for {method} {path}"}


def accepted(job: Job) -> dict[str, Any]:
    return {"job_id": job.id, "task": job.task, "status_url": f"/jobs/{job.id}"}


def job_status(job_id: str) -> dict[str, Any]:
    """``done`` with the result, ``dead`` with the error, else ``pending`` (queued or running)."""
    raw = store().hget(RESULTS_KEY, job_id)
    if raw is not None:
        return {"job_id": job_id, "status": "done", **json.loads(raw)}
    for dead in Deadletters.for_app(app).newest(limit=1000):
        if dead.job_id == job_id:
            return {"job_id": job_id, "status": "dead", "error": f"{dead.error_type}: {dead.error}"}
    return {"job_id": job_id, "status": "pending"}


def main() -> None:
    host = os.environ.get("HOST", "0.0.0.0")
    port = int(os.environ.get("PORT", "8000"))
    with make_server(host, port, application) as server:

        def stop(signum: int, frame: FrameType | None) -> None:
            # Platforms stop processes with SIGTERM. shutdown() waits for serve_forever() to
            # return, so it runs in a thread; the request being served is finished first.
            threading.Thread(target=server.shutdown).start()

        signal.signal(signal.SIGTERM, stop)
        print(f"listening on http://{host}:{port}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
