"""The dashboard's control page (pauses and limits set at run time, with their forms) and
its audit page; the control actions (POST) are refused like every other action in read-only
mode, from another origin or without the session's CSRF token (:func:`actions._form`)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from taskq.app import App
from taskq.broker.control import read_audit, read_control
from taskq.dashboard.actions import _back, _form, _one
from taskq.dashboard.pages import Settings, render
from taskq.errors import ConfigError


def _app(request: Request) -> App:
    settings: Settings = request.app.state.dashboard
    return settings.source.app


def _view(app: App) -> dict[str, Any]:
    queues = list(app.queues())
    pauses, limits = read_control(app.link, queues)
    return {
        "queues": queues,
        "pauses": [(q, p, at) for q in queues for p, at in pauses[q].items()],
        "limits": [(q, w, x) for q in queues for w, x in limits[q].items()],
    }


async def control(request: Request) -> Response:
    view = await run_in_threadpool(_view, _app(request))
    return render(request, "control", view)


async def audit(request: Request) -> Response:
    app = _app(request)
    found = await run_in_threadpool(lambda: read_audit(app.link, list(app.queues())))
    return render(request, "audit", {"entries": list(reversed(found[-500:]))})


async def pause(request: Request) -> Response:
    fields, app = await _form(request), _app(request)
    queue, task, key = _one(fields, "queue"), _one(fields, "task"), _one(fields, "key")
    await run_in_threadpool(lambda: app.pause(queue or None, task=task or None, key=key or None))
    return _back(request, "/control", f"paused {queue} {task} {key}".strip())


async def resume(request: Request) -> Response:
    fields, app = await _form(request), _app(request)
    queue, task, key = _one(fields, "queue"), _one(fields, "task"), _one(fields, "key")
    moved = await run_in_threadpool(
        lambda: app.resume(queue or None, task=task or None, key=key or None)
    )
    return _back(request, "/control", f"resumed {queue}: {moved} job(s) went back")


async def set_limit(request: Request) -> Response:
    fields, app = await _form(request), _app(request)
    task, key, rate = _one(fields, "task"), _one(fields, "key"), _one(fields, "rate")
    concurrency = _one(fields, "concurrency")
    if concurrency and not concurrency.isdigit():
        raise ConfigError(f"concurrency must be a whole number >= 1, not {concurrency!r}")
    number = int(concurrency) if concurrency else None
    await run_in_threadpool(
        lambda: app.set_limit(task, rate=rate or None, concurrency=number, key=key or None)
    )
    return _back(request, "/control", f"limited {task}")


async def clear_limit(request: Request) -> Response:
    fields, app = await _form(request), _app(request)
    task, key, queue = _one(fields, "task"), _one(fields, "key"), _one(fields, "queue")
    await run_in_threadpool(lambda: app.clear_limit(task, key=key or None, queue=queue or None))
    return _back(request, "/control", f"cleared the run-time limit of {task}")
