"""Stream a job's output to the browser as it is made (the LLM-token pattern): a Starlette
endpoint enqueues a job and relays each chunk the task emits as a Server-Sent Event.

    taskq worker -A examples.stream_to_browser -c 1 --async-concurrency 20
    PORT=8000 python -m examples.stream_to_browser

    curl -N -X POST 'localhost:8000/stories?topic=otters'
        # event: job        data: {"job_id": "..."}
        # event: token      data: {"text": "Once ", "attempt": 1}    (one per token, live)
        # ...
        # event: end        data: {"state": "succeeded", "words": 12}
    curl -N 'localhost:8000/stories/JOB_ID'     # the same stream again, from any process;
        # a client that reconnects with Last-Event-ID: <id> gets exactly the tokens after it

The task (``tell``) emits each token with ``current_job().emit(...)`` and reports progress;
the endpoint reads them with ``async for chunk in job.astream(...)``, which blocks in Redis,
not in the event loop, and ends when the job ends. Several readers may follow one job. The
worker and the web app find Redis like every taskq process (``TASKQ_REDIS_URL``); the app
listens on ``$HOST`` (default 0.0.0.0) and ``$PORT`` (default 8000). Needs
``pip install 'taskq[examples]'``. See docs/telemetry.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from taskq import App, ConfigError, Job, TaskFailed, current_job

app = App(queue="stories")
TOKEN_DELAY_S = float(os.environ.get("STORY_TOKEN_DELAY_S", "0.02"))
"""How long the stand-in "model" takes per token (a real task awaits its LLM client)."""
STREAM_TIMEOUT_S = 300.0


@app.task(name="examples.stream_to_browser.tell", store_result=True)  # (also run as __main__)
async def tell(topic: str) -> int:
    """Write a short story about ``topic`` token by token; returns its word count."""
    words = f"Once upon a time a {topic} found a queue that never lost a job .".split()
    job = current_job()
    assert job is not None
    for i, word in enumerate(words):
        await asyncio.sleep(TOKEN_DELAY_S)  # the model thinking
        job.emit(word + " ")
        job.progress(i + 1, len(words))
    return len(words)


def _event(kind: str, data: object, event_id: str | None = None) -> str:
    head = f"event: {kind}\n" + (f"id: {event_id}\n" if event_id else "")
    return head + f"data: {json.dumps(data)}\n\n"


async def _relay(job: Job, after: str | None) -> AsyncIterator[str]:
    """The job's tokens as they come, then how it ended."""
    yield _event("job", {"job_id": job.id})
    async for chunk in job.astream(after=after, timeout=STREAM_TIMEOUT_S):
        yield _event("token", {"text": chunk.value, "attempt": chunk.attempt}, chunk.id)
    try:
        words = await job.aresult(timeout=5)
    except TaskFailed as exc:
        yield _event("end", {"state": "failed", "error": str(exc)})
    else:
        yield _event("end", {"state": "succeeded", "words": words})


def _stream(job: Job, request: Request) -> StreamingResponse:
    last = request.headers.get("last-event-id", "")
    after = last if re.fullmatch(r"[0-9]+-[0-9]+", last) else None
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(_relay(job, after), media_type="text/event-stream", headers=headers)


async def index(request: Request) -> JSONResponse:
    return JSONResponse({"service": "taskq stream-to-browser example"})


async def new_story(request: Request) -> StreamingResponse | JSONResponse:
    topic = request.query_params.get("topic", "").strip()
    if not topic or len(topic) > 100:
        return JSONResponse({"error": "give ?topic= (up to 100 characters)"}, status_code=400)
    job = await tell.adelay(topic)
    return _stream(job, request)


async def story(request: Request) -> StreamingResponse | JSONResponse:
    try:
        job = await app.ajob(request.path_params["job_id"])
    except ConfigError:  # not a job id
        job = None
    if job is None or not job.stores_result:
        return JSONResponse({"error": "no such story"}, status_code=404)
    return _stream(job, request)


@contextlib.asynccontextmanager
async def lifespan(api: Starlette) -> AsyncIterator[None]:
    yield
    await app.aclose()


api = Starlette(
    routes=[
        Route("/", index),
        Route("/stories", new_story, methods=["POST"]),
        Route("/stories/{job_id}", story),
    ],
    lifespan=lifespan,
)


def main() -> None:
    import uvicorn

    host, port = os.environ.get("HOST", "0.0.0.0"), int(os.environ.get("PORT", "8000"))
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    uvicorn.run(api, host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
