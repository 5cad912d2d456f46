"""The dashboard's actions (POST): retry and purge dead letters, cancel a job, act on a
queue's jobs (a selection, or all that match, with a progress page).

Each is refused with 403 in read-only mode, from another origin, or without a CSRF token
made for the request's session (:mod:`taskq.dashboard.security`), then runs the same operator
move as the CLI (:mod:`taskq.ops.deadletters`, ``Job.cancel``) in a thread pool, and
redirects back with a signed one-line notice.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from taskq.audit import DASHBOARD_ACTIONS
from taskq.broker.control import append_audit
from taskq.dashboard.pages import (
    Settings,
    base_path,
    job_filter,
    notice_query,
    queue_place,
    segment,
)
from taskq.dashboard.security import CSRF_FIELD, csrf_ok, same_origin, user_of
from taskq.ops.browse import Audit, Jobs
from taskq.ops.jobrows import JobFilter

MAX_FORM_BYTES = 1_000_000


async def _form(request: Request) -> dict[str, list[str]]:
    """The POST's fields, after the read-only, origin and CSRF checks (urlencoded forms only)."""
    settings: Settings = request.app.state.dashboard
    if settings.read_only:
        raise HTTPException(403, "the dashboard is read-only: actions are turned off")
    if not same_origin(request):
        raise HTTPException(403, "cross-origin request refused: use the dashboard's own pages")
    body = await _body(request)
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    if not csrf_ok(settings.access, request, (fields.get(CSRF_FIELD) or [""])[0]):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    return fields


async def _body(request: Request) -> bytes:
    """The body, refused (413) by its ``Content-Length`` before reading, or once more than
    :data:`MAX_FORM_BYTES` have come, so an endless body costs at most that much memory."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
        raise HTTPException(413, "form too large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
        chunks.append(chunk)
    return b"".join(chunks)


def _audit(request: Request, **detail: Any) -> Audit:
    """Records an action of this request in the queue's audit stream: who (the dashboard's
    authenticated user, or ``dashboard``), from where (the remote address), what, on which
    state and how many jobs (``detail`` adds the selection or filter)."""
    settings: Settings = request.app.state.dashboard
    app = settings.source.app
    user = user_of(settings.access, request)
    host = request.client.host if request.client else "?"

    def audit(action: str, queue: str, state: str, count: int) -> None:
        about = {**detail, "state": state, "jobs": count}
        entry = (action if action in DASHBOARD_ACTIONS else f"jobs_{action}", user, host, about)
        append_audit(app.link, queue, app.settings.audit_max_entries, entry)

    return audit


def _filter_detail(where: JobFilter) -> dict[str, str]:
    return {k: v for k, v in where.__dict__.items() if v}


def _one(fields: dict[str, list[str]], name: str) -> str:
    return (fields.get(name) or [""])[0].strip()


def _back(request: Request, path: str, notice: str, **params: str) -> Response:
    query = urlencode({**{k: v for k, v in params.items() if v}, **notice_query(request, notice)})
    return RedirectResponse(f"{base_path(request)}{path}?{query}", status_code=303)


async def retry_deadletters(request: Request) -> Response:
    """``ids`` given: retry those; ``all`` given: every dead letter matching the filters."""
    fields = await _form(request)
    queue = request.path_params["queue"]
    source = request.app.state.dashboard.source
    task, error = _one(fields, "task"), _one(fields, "error")
    ids = None if _one(fields, "all") else [i for i in fields.get("ids", []) if i]
    if ids is not None and not ids:
        raise HTTPException(400, "no dead letter chosen")
    moved, skipped = await run_in_threadpool(
        lambda: source.retry(queue, ids, task=task, error=error)
    )
    audit = _audit(request, ids=(ids or [])[:20], task=task, error=error, all=ids is None)
    await run_in_threadpool(audit, "deadletter_retry", queue, "deadletter", moved)
    notice = f"re-enqueued {moved} job(s)"
    if skipped:
        notice += "; not re-enqueued: " + "; ".join(f"{i}: {why}" for i, why in skipped[:5])
    return _back(request, "/deadletters", notice, queue=queue, task=task, error=error)


async def purge_deadletters(request: Request) -> Response:
    await _form(request)
    queue = request.path_params["queue"]
    source = request.app.state.dashboard.source
    deleted = await run_in_threadpool(source.purge, queue)
    await run_in_threadpool(_audit(request), "deadletter_purge", queue, "deadletter", deleted)
    return _back(request, "/deadletters", f"deleted {deleted} dead-lettered job(s)", queue=queue)


async def cancel_job(request: Request) -> Response:
    fields = await _form(request)
    job_id = request.path_params["job_id"]
    queue = _one(fields, "queue") or None
    terminate = bool(_one(fields, "terminate"))
    source = request.app.state.dashboard.source
    outcomes = await run_in_threadpool(lambda: source.cancel(job_id, queue, terminate=terminate))
    audit = _audit(request, job=job_id, terminate=terminate, outcomes=outcomes)
    where = queue or source.app.settings.queue
    await run_in_threadpool(audit, "job_cancel", where, "", len(outcomes))
    notice = "; ".join(f"{step}: {outcome}" for step, outcome in outcomes.items())
    return _back(request, f"/jobs/{segment(job_id)}", notice, queue=queue or "")


MAX_SELECTED = 1_000
"""Jobs one selection may name (more: use "all that match")."""


async def act_on_jobs(request: Request) -> Response:
    """``action`` on the selected ``refs``, or ``bulk`` on every job of the queue, state and
    priority that matches the form's filter (in a thread: the answer is its progress page)."""
    fields = await _form(request)
    queue, state, priority = queue_place(request, _one(fields, "priority"))
    settings: Settings = request.app.state.dashboard
    app = settings.source.app
    where = job_filter({k: _one(fields, k) for k in ("task", "args", "error", "since", "until")})
    to = _one(fields, "to")
    back = {"priority": priority, "of": _one(fields, "of")}
    back.update({k: v for k, v in where.__dict__.items() if v})
    path = f"/queues/{segment(queue)}/{segment(state)}"
    held_task = _one(fields, "of")
    if _one(fields, "bulk"):
        spec = dict(queue=queue, state=state, priority=priority, where=where, to=to)
        spec["held_task"] = held_task
        spec["audit"] = _audit(request, filter=_filter_detail(where), bulk=True)
        started = settings.bulks.start(app, action=_one(fields, "bulk"), **spec)
        return _back(request, f"/bulk/{started.id}", f"{started.action} started", queue=queue)
    action = _one(fields, "action")
    refs = [r for r in fields.get("refs", []) if r][:MAX_SELECTED]
    if not refs:
        raise HTTPException(400, "no job chosen")
    jobs = Jobs(app, queue, held_task=held_task, audit=_audit(request, refs=refs[:20]))

    def run() -> tuple[int, int]:
        rows = jobs.find(state, refs, priority=priority)
        return jobs.act(action, state, rows, to=to), len(refs)

    done, chosen = await run_in_threadpool(run)
    return _back(request, path, f"{action}: {done} of {chosen} job(s)", **back)
