"""The dashboard's pages (GET): each reads its view in a thread pool, so a slow Redis never
blocks the event loop, and renders it with autoescaping Jinja2 templates.

A page asked for with ``?part=live`` renders only its live block: the page's script fetches
that every two seconds and swaps it in (no reload, no client-side templating).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from taskq.dashboard.charts import failure_chart, throughput_chart
from taskq.dashboard.format import FILTERS
from taskq.dashboard.queueview import PER_PRIORITY, STATES, Bulks, queue_page
from taskq.dashboard.security import SESSION_COOKIE, Access, csrf_token, session_of
from taskq.dashboard.views import Source, queue_rows, timeline
from taskq.errors import ConfigError
from taskq.keys import PRIORITIES, check_priority
from taskq.ops.inspect import to_json
from taskq.ops.jobrows import JobFilter, check_state
from taskq.ops.recordsearch import RECORD_STATES, SCAN_COUNT, Records, RecordsPage
from taskq.ops.taskstats import task_history, task_table

LIVE = frozenset({"overview", "workers", "job", "periodic", "bulk"})
"""The pages with a live block (``<name>_live.html``)."""


NOTICE, NOTICE_SIGNATURE = "notice", "sig"
"""The query parameters of an action's one-line answer and of its signature."""


@dataclass(frozen=True)
class Settings:
    source: Source
    templates: Jinja2Templates
    read_only: bool
    access: Access
    bulks: Bulks = field(default_factory=Bulks)


def base_path(request: Request) -> str:
    """Where the dashboard is mounted (its links start with this)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def notice_query(request: Request, notice: str) -> dict[str, str]:
    """The query parameters that make the next page show ``notice``: signed, so that only
    the dashboard's own redirects, not any link, can put text on its pages."""
    settings: Settings = request.app.state.dashboard
    return {NOTICE: notice, NOTICE_SIGNATURE: settings.access.sign(NOTICE, notice)}


def _notice(request: Request, access: Access) -> str | None:
    q = request.query_params
    notice, signature = q.get(NOTICE), q.get(NOTICE_SIGNATURE, "")
    return notice if notice is not None and access.signed(NOTICE, notice, signature) else None


def render(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> Response:
    """A page (or its live block, marked by the ``x-taskq-live`` header the page's script
    checks), with the session cookie its forms' CSRF token is bound to."""
    settings: Settings = request.app.state.dashboard
    session = session_of(request)
    base = base_path(request)
    live = request.query_params.get("part") == "live" and name in LIVE
    context = {
        **context,
        "base": base,
        "read_only": settings.read_only,
        "csrf": csrf_token(settings.access, request, session),
        "notice": _notice(request, settings.access),
        "nav": name,
    }
    template = f"{name}_live.html" if live else f"{name}.html"
    response = settings.templates.TemplateResponse(
        request, template, context, status_code=status_code
    )
    if live:
        response.headers["x-taskq-live"] = name
    if request.cookies.get(SESSION_COOKIE) != session:
        response.set_cookie(
            SESSION_COOKIE,
            session,
            path=base or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def _source(request: Request) -> Source:
    settings: Settings = request.app.state.dashboard
    return settings.source


async def overview(request: Request) -> Response:
    page = await run_in_threadpool(_source(request).overview)
    rows = {q.queue: queue_rows(q, page.running) for q in page.overview.queues}
    context = {
        "page": page,
        "rows": rows,
        "throughput": throughput_chart(page.throughput),
        "failures": failure_chart(page.throughput),
    }
    return render(request, "overview", context)


async def overview_json(request: Request) -> Response:
    page = await run_in_threadpool(_source(request).overview)
    return JSONResponse(page.to_json())


async def scale_json(request: Request) -> Response:
    """The autoscaling signal (``?queue=a&queue=b``; default: the app's queues)."""
    queues = request.query_params.getlist("queue")
    return JSONResponse(await run_in_threadpool(lambda: _source(request).scale(queues)))


async def workers(request: Request) -> Response:
    view = await run_in_threadpool(_source(request).workers)
    return render(request, "workers", {"view": view})


async def workers_json(request: Request) -> Response:
    view = await run_in_threadpool(_source(request).workers)
    return JSONResponse(to_json(list(view.workers)))


async def find_job(request: Request) -> Response:
    """The header's job box: straight to the job's page."""
    job_id = request.query_params.get("id", "").strip()
    base = base_path(request)
    target = f"{base}/jobs/{quote(job_id, safe='')}" if job_id else f"{base}/"
    return RedirectResponse(target, status_code=303)


async def job(request: Request) -> Response:
    job_id = request.path_params["job_id"]
    queue = request.query_params.get("queue")
    at = request.query_params.get("at")
    page = await run_in_threadpool(lambda: _source(request).job(job_id, queue, at=at))
    events = timeline(page.status) if page.status is not None else []
    context = {"job_id": job_id, "queue": queue, "at": at, "view": page, "timeline": events}
    return render(request, "job", context)


async def job_json(request: Request) -> Response:
    q = request.query_params
    job_id = request.path_params["job_id"]
    page = await run_in_threadpool(
        lambda: _source(request).job(job_id, q.get("queue"), at=q.get("at"))
    )
    if page.flow is not None:
        return JSONResponse(page.flow.to_json())
    assert page.status is not None
    return JSONResponse(page.status.to_json())


def _filters(request: Request) -> dict[str, str]:
    q = request.query_params
    return {"task": q.get("task", "").strip(), "error": q.get("error", "").strip()}


async def deadletters(request: Request) -> Response:
    q = request.query_params
    filters = _filters(request)
    view = await run_in_threadpool(
        lambda: _source(request).deadletters(
            q.get("queue") or None, before=q.get("before") or None, **filters
        )
    )
    return render(request, "deadletters", {"view": view, "filters": filters})


async def deadletters_json(request: Request) -> Response:
    q = request.query_params
    view = await run_in_threadpool(
        lambda: _source(request).deadletters(
            q.get("queue") or None, before=q.get("before") or None, **_filters(request)
        )
    )
    rows = [j.summary() for j in view.page.rows]
    return JSONResponse({"queue": view.queue, "rows": rows, "next_before": view.page.next_before})


async def deadletter(request: Request) -> Response:
    queue, dead_id = request.path_params["queue"], request.path_params["dead_id"]
    job, now = await run_in_threadpool(_source(request).deadletter, queue, dead_id)
    context = {"queue": queue, "job": job, "msg": job.message(), "now_ms": now}
    return render(request, "deadletter", context)


async def periodic(request: Request) -> Response:
    rows, now = await run_in_threadpool(_source(request).schedules)
    return render(request, "periodic", {"rows": rows, "now_ms": now})


def job_filter(fields: dict[str, str]) -> JobFilter:
    """The filter of a queue page (its query, or an action's form)."""
    names = ("task", "args", "error", "since", "until")
    return JobFilter(*(fields.get(k, "").strip()[:200] for k in names))


def queue_place(request: Request, priority: str) -> tuple[str, str, str]:
    """The queue, state and priority a queue page or action names, checked.

    Raises:
        ConfigError: an unknown state or priority; NotFound: a queue not of this app.
    """
    source = _source(request)
    queue = source.queue(request.path_params["queue"])
    state = request.path_params["state"]
    check_state(state)
    check_priority(priority or "normal")
    return queue, state, priority or "normal"


async def queue_jobs(request: Request) -> Response:
    q = request.query_params
    queue, state, priority = queue_place(request, q.get("priority", ""))
    where = job_filter(dict(q))
    app = _source(request).app
    view = await run_in_threadpool(
        lambda: queue_page(
            app, queue, state, priority=priority, after=q.get("after") or None, where=where,
            held_task=q.get("of", "")[:300],
        )
    )  # fmt: skip
    context = {
        "view": view,
        "states": STATES,
        "priorities": PRIORITIES,
        "per_priority": state in PER_PRIORITY,
    }
    return render(request, "jobs", context)


async def queue_jobs_json(request: Request) -> Response:
    q = request.query_params
    queue, state, priority = queue_place(request, q.get("priority", ""))
    app = _source(request).app
    view = await run_in_threadpool(
        lambda: queue_page(
            app, queue, state, priority=priority, after=q.get("after") or None,
            where=job_filter(dict(q)), held_task=q.get("of", "")[:300],
        )
    )  # fmt: skip
    doc = {
        "queue": queue,
        "state": state,
        "priority": priority,
        "figures": view.figures,
        "rows": [r.to_json() for r in view.page.rows],
        "after": view.page.after,
        "scanned": view.page.scanned,
        "fair": None if view.fair is None else asdict(view.fair),
    }
    return JSONResponse(doc)


def _records_page(request: Request) -> tuple[str, str, JobFilter, RecordsPage]:
    """The queue, state, filter and page a search (``/queues/<queue>/search``) asks for."""
    q = request.query_params
    source = _source(request)
    queue = source.queue(request.path_params["queue"])
    state, where = q.get("state", "").strip(), job_filter(dict(q))
    records = Records(source.app.link, queue)
    return queue, state, where, records.page(where, state=state, cursor=q.get("cursor") or None)


async def search_records(request: Request) -> Response:
    queue, state, where, page = await run_in_threadpool(_records_page, request)
    context = {
        "queue": queue, "state": state, "where": where, "page": page,
        "cursor": request.query_params.get("cursor", ""), "record_states": RECORD_STATES,
        "scan_count": SCAN_COUNT,
    }  # fmt: skip
    return render(request, "search", context)


async def search_records_json(request: Request) -> Response:
    queue, state, _, page = await run_in_threadpool(_records_page, request)
    rows = [r.to_json() for r in page.rows]
    doc = {"queue": queue, "state": state, "rows": rows, "cursor": page.cursor}
    return JSONResponse({**doc, "scanned": page.scanned})


async def bulk(request: Request) -> Response:
    settings: Settings = request.app.state.dashboard
    source = _source(request)
    queue = await run_in_threadpool(source.queue, request.query_params.get("queue", ""))
    bulk_id, app = request.path_params["bulk_id"], source.app
    found = await run_in_threadpool(lambda: settings.bulks.get(bulk_id, app, queue))
    if found is None:
        raise ConfigError("no such bulk action (on this queue, in the last day)")
    return render(request, "bulk", {"bulk": found})


async def tasks(request: Request) -> Response:
    source = _source(request)
    now, rows = await run_in_threadpool(lambda: task_table(source.app.link, source.queues()))
    return render(request, "tasks", {"rows": rows, "now_ms": now})


async def tasks_json(request: Request) -> Response:
    source = _source(request)
    _, rows = await run_in_threadpool(lambda: task_table(source.app.link, source.queues()))
    return JSONResponse([r.to_json() for r in rows])


async def task_chart(request: Request) -> Response:
    source = _source(request)
    name = request.path_params["task"][:300]
    minutes, hours = await run_in_threadpool(
        lambda: task_history(source.app.link, source.queues(), name)
    )
    context = {
        "task": name,
        "minutes": throughput_chart(minutes),
        "hours": throughput_chart(hours),
        "last_hour": minutes,
        "last_72h": hours,
    }
    return render(request, "task", context)


def environment() -> Environment:
    """Templates from the package, every value escaped unless a template says otherwise."""
    env = Environment(loader=PackageLoader("taskq.dashboard", "templates"), autoescape=True)
    env.filters.update(FILTERS)
    env.filters["segment"] = segment
    return env


def segment(value: object) -> str:
    """A value quoted as one path segment: its ``/``, ``?`` and ``#`` cannot leave it. (A
    whole segment ``..`` still climbs, whatever its spelling: the page's script therefore
    takes only the live block it asked for.)"""
    return quote(str(value), safe="")
