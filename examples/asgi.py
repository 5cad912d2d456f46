"""An asyncio web app (Starlette) that enqueues from async endpoints and awaits a result.

    PORT=8000 python -m examples.asgi      # or: uvicorn examples.asgi:api --port 8000

    curl -X POST 'localhost:8000/quotes?currency=EUR&amount=20'
        # 200 {"currency": "EUR", "amount": 20.0, "usd": 21.6, "job": "..."}
    curl -X POST 'localhost:8000/visits/home'         # 202 {"job_id": "...", "status": ...}
    curl localhost:8000/jobs/JOB_ID                     # {"job_id": "...", "state": "..."}

Nothing in it blocks the event loop: ``await quote.adelay(...)`` sends the job on
``redis.asyncio`` and ``await job.aresult(timeout=...)`` waits for it in Redis (see
docs/asyncio.md). A worker must serve ``examples.async_tasks``. It listens on ``$HOST``
(default 0.0.0.0) and ``$PORT`` (default 8000), and finds Redis like the worker
(``TASKQ_REDIS_URL``, else ``REDIS_URL``). Needs ``pip install 'taskq[examples]'``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from examples.async_tasks import app, count_visit, quote
from taskq import ResultTimeout, TaskFailed

RESULT_TIMEOUT_S = float(os.environ.get("QUOTE_TIMEOUT_S", "10"))


async def index(request: Request) -> JSONResponse:
    return JSONResponse({"service": "taskq asyncio example", "queue": app.settings.queue})


async def create_quote(request: Request) -> JSONResponse:
    """Enqueue a quote and wait for its result, up to RESULT_TIMEOUT_S."""
    try:
        currency = request.query_params["currency"]
        amount = float(request.query_params.get("amount", "1"))
    except (KeyError, ValueError) as exc:
        return JSONResponse({"error": f"bad query: {exc}"}, status_code=400)
    job = await quote.adelay(currency, amount)
    try:
        return JSONResponse(await job.aresult(timeout=RESULT_TIMEOUT_S))
    except ResultTimeout:
        return JSONResponse({"job_id": job.id, "status": "still running"}, status_code=202)
    except TaskFailed as exc:
        return JSONResponse({"job_id": job.id, "error": str(exc)}, status_code=422)


async def visit(request: Request) -> JSONResponse:
    """Fire and forget."""
    job = await count_visit.adelay(request.path_params["page"])
    return JSONResponse({"job_id": job.id}, status_code=202)


async def job_status(request: Request) -> JSONResponse:
    job = await app.ajob(request.path_params["job_id"])
    status = await job.astatus()
    return JSONResponse({"job_id": job.id, "state": status.state})


@contextlib.asynccontextmanager
async def lifespan(api: Starlette) -> AsyncIterator[None]:
    yield
    await app.aclose()  # the loop's connection pool


api = Starlette(
    routes=[
        Route("/", index),
        Route("/quotes", create_quote, methods=["POST"]),
        Route("/visits/{page}", visit, methods=["POST"]),
        Route("/jobs/{job_id}", job_status),
    ],
    lifespan=lifespan,
)


def main() -> None:
    import uvicorn

    host, port = os.environ.get("HOST", "0.0.0.0"), int(os.environ.get("PORT", "8000"))
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the handler
    # it found: make that a clean exit (status 0), as a platform stopping the process expects.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    uvicorn.run(api, host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
