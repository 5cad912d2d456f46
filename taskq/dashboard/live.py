"""The job page's live view: a job's progress, output and logs as Server-Sent Events.

One long GET per open job page (``/live/<job id>``): the events of the job's
:class:`~taskq.telemetry.Follower`, read on the event loop with the app's asyncio link
(blocking reads in Redis, in slices of :data:`SLICE_S`), each event one JSON object that the
page's script puts in as text (never as markup). The stream ends after the job's ``end``
event; a browser that goes away cancels it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from taskq.broker.steps import arun
from taskq.config import check_queue_name
from taskq.dashboard.format import value as shown
from taskq.dashboard.pages import Settings
from taskq.keys import check_job_id
from taskq.telemetry import Follower

SLICE_S = 0.1
"""Longest blocking read between two looks at the progress and logs (updates within 250 ms)."""


async def job_events(request: Request) -> StreamingResponse:
    """``text/event-stream`` of the job's telemetry events until it ends."""
    job_id = request.path_params["job_id"]
    queue = request.query_params.get("queue") or None
    check_job_id(job_id)
    if queue is not None:
        check_queue_name(queue)
    settings: Settings = request.app.state.dashboard
    app = settings.source.app
    handle = await app.ajob(job_id, queue=queue)
    # A browser that reconnects sends the id of the last chunk it got: the rest follows.
    after = request.headers.get("last-event-id", "")
    follower = handle.follower(SLICE_S, after=after if ENTRY_ID.fullmatch(after) else None)
    headers = {"x-accel-buffering": "no"}  # (a proxy must pass each event on at once)
    events = _events(app, follower)
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


async def _events(app: Any, follower: Follower) -> AsyncIterator[str]:
    yield ": live\n\n"
    while not follower.done:
        for kind, value in await arun(app.alink, follower.next_steps()):
            data = json.dumps(_data(kind, value))
            chunk_id = f"id: {value.id}\n" if kind == "chunk" else ""
            yield f"event: {kind}\n{chunk_id}data: {data}\n\n"


def _data(kind: str, value: Any) -> dict[str, Any]:
    """An event's JSON: plain values and text, for ``textContent``."""
    if kind == "progress":
        return {"done": value.done, "total": value.total, "message": value.message}
    if kind == "chunk":
        text = value.value if isinstance(value.value, str) else shown(value.value)
        return {"id": value.id, "attempt": value.attempt, "text": text}
    if kind == "log":
        return {"level": value.level, "time_ms": value.time_ms, "message": value.message}
    return {"state": value}
