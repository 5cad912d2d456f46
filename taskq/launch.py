"""Starting a workflow (one script for its first jobs, the records of its later steps and
its own record), its handle from that record, and running one inline in eager mode."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from taskq.broker.link import script_command
from taskq.broker.steps import Steps
from taskq.canvas import Chain, Chord, Group, Signature, Workflow
from taskq.flow import Context, Layout, spawn, with_implicit_chords
from taskq.job import Flow, Job
from taskq.keys import QueueKeys
from taskq.message import new_job_id

if TYPE_CHECKING:
    from taskq.app import App


def launch_steps(w: Workflow, app: App) -> Steps[Flow]:
    """Start a workflow: its first jobs, the status records of all its steps (``pending``
    until their turn), and its own record, in one script. Returns its handle."""
    laid = Layout(app).lay(w, Context())
    first_ids = _started_ids(laid.fragments)
    ops = spawn(laid.fragments, None, app.settings.signer)
    for frag in laid.steps:
        if frag["ttl"] is not None and frag["id"] not in first_ids:
            k = QueueKeys(frag["queue"])
            about = [frag["task"], frag["queue"], frag["priority"]]
            ops.add(["record", k.job(frag["id"]), frag["ttl"] * 1000, *about], k.job(frag["id"]))
    flow_id = new_job_id()
    queue = laid.terminal[0].queue
    kind = _kind(w)
    steps = [[f["id"], f["task"], f["queue"]] for f in laid.steps if f["ttl"] is not None]
    chords = [[f["key"], f["n"]] for f in _chords(laid.fragments)]
    terminal = [[j.id, j.task, j.queue, j.priority, j.stores_result] for j in laid.terminal]
    flow_key = QueueKeys(queue).flow(flow_id)
    ttl_ms = app.settings.result_ttl_s * 1000
    info = {"steps": steps, "chords": chords, "jobs": terminal, "single": _single(w)}
    blob = bytes(msgpack.packb(info, use_bin_type=True))
    ops.add(["flow", flow_key, ttl_ms, kind, blob], flow_key)
    yield [script_command("launch", ops.keys, [ops.packed()])]
    jobs = tuple(dataclasses.replace(j, app=app) for j in laid.terminal)
    return Flow(flow_id, kind, queue, jobs, single=_single(w), app=app)


def _started_ids(fragments: Sequence[dict[str, Any]]) -> set[str]:
    """The ids of the jobs that ``fragments`` start at once (a chord's header members, not
    its body): their ops write their records, which must not be written again as pending."""
    out: set[str] = set()
    for f in fragments:
        out |= _started_ids(f["members"]) if f["t"] == "chord" else {f["id"]}
    return out


def _chords(fragments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chord fragments among ``fragments`` and everything they start."""
    out = []
    for f in fragments:
        if f["t"] == "chord":
            out.append(f)
            out += _chords([f["body"], *f["members"]])
        out += _chords((f.get("wf") or {}).get("next", ()))
    return out


def flow_handle(flow_id: str, queue: str, raw: dict[bytes, bytes], app: App) -> Flow:
    """The handle of a workflow from its record (``app.flow(id)``)."""
    info = msgpack.unpackb(raw.get(b"info", b"\x80"), raw=False)
    jobs = tuple(
        Job(i, task, q, priority, stores_result=bool(stores), app=app)
        for i, task, q, priority, stores in info.get("jobs", ())
    )
    kind = raw.get(b"kind", b"").decode()
    return Flow(flow_id, kind, queue, jobs, single=bool(info.get("single", True)), app=app)


def _kind(w: Workflow) -> str:
    return {Signature: "job", Chain: "chain", Group: "group", Chord: "chord"}[type(w)]


def _single(w: Workflow) -> bool:
    """Whether the workflow's result is one value (else the list of its last group's)."""
    if isinstance(w, Group):
        return False
    if isinstance(w, Chain):
        last = with_implicit_chords(list(w.steps))[-1]
        return _single(last)
    return True


# -- eager mode -----------------------------------------------------------------------------


def run_eagerly(w: Workflow, app: App) -> Flow:
    """Run the workflow inline (eager mode), as a worker would: results pass through msgpack
    from step to step, and a failure raises at once."""
    value = _eager(w, app, None)
    queue = app.settings.queue
    return Flow(new_job_id(), _kind(w), queue, (), _single(w), app, eager_value=(value,))


def _eager(w: Workflow, app: App, parent: tuple[Any] | None) -> Any:
    if isinstance(w, Signature):
        args = tuple(w.args) if w.immutable or parent is None else (parent[0], *w.args)
        task = w.task_obj if w.task_obj is not None else app.get_task(w.task)
        value = app.enqueue(task.message(args, dict(w.kwargs))).result()
        value = msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)
        for linked in w.link:
            _eager(linked, app, (value,))
        return value
    if isinstance(w, Chain):
        for step in with_implicit_chords(list(w.steps)):
            parent = (_eager(step, app, parent),)
        return parent[0] if parent is not None else None
    if isinstance(w, Group):
        return [_eager(m, app, parent) for m in w.members]
    return _eager(w.body, app, (_eager(w.header, app, parent),))
