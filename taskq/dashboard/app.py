"""The dashboard's ASGI app: routes, the access guard, security headers and error pages."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskq.app import App
from taskq.dashboard import actions, control, live, pages
from taskq.dashboard.pages import Settings, render
from taskq.dashboard.security import LOGIN_COOKIE, Access
from taskq.dashboard.views import NotFound, Source
from taskq.errors import BrokerError, BrokerUnavailable, ConfigError

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"

SECURITY_HEADERS = {
    # No inline script or style runs, whatever a job's arguments contain.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class Guard:
    """Lets in only the requests :class:`Access` allows; turns a ``?token=`` login into a
    cookie; adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        request = Request(scope)
        login = request.query_params.get("token")
        if login is not None and self.access.token_matches(login):
            await self._login(request)(scope, receive, send_headers)
        elif await self.access.allows(request):
            await self.app(scope, receive, send_headers)
        else:
            await self._refuse()(scope, receive, send_headers)

    def _login(self, request: Request) -> Response:
        """Back to the same page without the token in its address, logged in by cookie. The
        path is re-quoted with one leading slash: ``//host/`` or ``/\\host/`` would send the
        browser to another site."""
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        url = "/" + quote(request.url.path.lstrip("/"), safe="/")
        url += ("?" + urlencode(rest)) if rest else ""
        response = RedirectResponse(url, status_code=303)
        response.set_cookie(
            LOGIN_COOKIE,
            self.access.login_value,
            path=pages.base_path(request) or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    def _refuse(self) -> Response:
        headers = {"www-authenticate": 'Basic realm="taskq"'} if self.access.basic else {}
        text = "taskq dashboard: log in with ?token=<TASKQ_DASHBOARD_TOKEN>"
        if self.access.basic:
            text = "taskq dashboard: log in with the dashboard's user and password"
        return Response(text + "\n", 401, headers, media_type="text/plain")


def _error_page(request: Request, status: int, title: str, detail: str) -> Response:
    if "/api/" in request.url.path:
        return JSONResponse({"error": title, "detail": detail}, status_code=status)
    context = {"status": status, "title": title, "detail": detail}
    return render(request, "error", context, status_code=status)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {400: "Bad request", 403: "Forbidden", 404: "Not found", 405: "Method not allowed"}
    return _error_page(request, exc.status_code, titles.get(exc.status_code, "Error"), exc.detail)


async def _on_not_found(request: Request, exc: Exception) -> Response:
    return _error_page(request, 404, "Not found", str(exc))


async def _on_bad_input(request: Request, exc: Exception) -> Response:
    return _error_page(request, 400, "Bad request", str(exc))


async def _on_broker(request: Request, exc: Exception) -> Response:
    title = "Redis unavailable" if isinstance(exc, BrokerUnavailable) else "Redis refused"
    return _error_page(request, 503, title, str(exc))


async def _on_bug(request: Request, exc: Exception) -> Response:
    logger.exception("dashboard: %s %s failed", request.method, request.url.path, exc_info=exc)
    return _error_page(request, 500, "Internal error", "see the dashboard's log")


def routes() -> list[BaseRoute]:
    return [
        Route("/", pages.overview, name="overview"),
        Route("/workers", pages.workers),
        Route("/jobs", pages.find_job),
        Route("/jobs/{job_id:path}", pages.job),
        Route("/live/{job_id:path}", live.job_events),
        Route("/deadletters", pages.deadletters),
        Route("/deadletters/{queue}/retry", actions.retry_deadletters, methods=["POST"]),
        Route("/deadletters/{queue}/purge", actions.purge_deadletters, methods=["POST"]),
        Route("/deadletters/{queue}/{dead_id}", pages.deadletter),
        Route("/periodic", pages.periodic),
        Route("/control", control.control),
        Route("/control/pause", control.pause, methods=["POST"]),
        Route("/control/resume", control.resume, methods=["POST"]),
        Route("/control/limit", control.set_limit, methods=["POST"]),
        Route("/control/limit/clear", control.clear_limit, methods=["POST"]),
        Route("/audit", control.audit),
        Route("/queues/{queue}/search", pages.search_records),
        Route("/queues/{queue}/{state}", pages.queue_jobs),
        Route("/queues/{queue}/{state}/act", actions.act_on_jobs, methods=["POST"]),
        Route("/bulk/{bulk_id}", pages.bulk),
        Route("/tasks", pages.tasks),
        Route("/tasks/{task}", pages.task_chart),
        Route("/api/tasks", pages.tasks_json),
        Route("/api/queues/{queue}/search", pages.search_records_json),
        Route("/api/queues/{queue}/{state}", pages.queue_jobs_json),
        Route("/cancel/{job_id:path}", actions.cancel_job, methods=["POST"]),
        Route("/api/overview", pages.overview_json),
        Route("/api/workers", pages.workers_json),
        Route("/api/jobs/{job_id:path}", pages.job_json),
        Route("/api/deadletters", pages.deadletters_json),
        Route("/api/scale", pages.scale_json),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def build(app: App, *, prefix: str = "", read_only: bool = False, access: Access) -> Starlette:
    """The dashboard of ``app`` as an ASGI app, its pages under ``prefix`` (e.g. ``/taskq``;
    "" for the root). Mounted with Starlette's ``Mount``, it also follows the mount's path."""
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    inner: list[BaseRoute] = [Mount(prefix, routes=routes())] if prefix else routes()
    handlers = {
        HTTPException: _on_http,
        NotFound: _on_not_found,
        ConfigError: _on_bad_input,
        BrokerError: _on_broker,
        Exception: _on_bug,
    }
    web = Starlette(
        routes=inner,
        middleware=[Middleware(Guard, access=access)],
        exception_handlers=handlers,
    )
    templates = Jinja2Templates(env=pages.environment())
    web.state.dashboard = Settings(Source(app), templates, read_only, access)
    return web
