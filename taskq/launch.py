"""Starting a workflow (one script for its first jobs, the records of its later steps and
its own record), and its handle from that record."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from taskq.broker.link import script_command
from taskq.broker.steps import Steps
from taskq.canvas import Chain, Chord, Group, Signature, Workflow
from taskq.flow import spawn
from taskq.job import Flow, Job
from taskq.keys import QueueKeys
from taskq.layout import Context, Layout, with_implicit_chords
from taskq.message import new_job_id

if TYPE_CHECKING:
    from taskq.job import HandleApp
    from taskq.protocols import Producer


def launch_steps(w: Workflow, app: Producer) -> Steps[Flow]:
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
    kind = kind_of(w)
    steps = [[f["id"], f["task"], f["queue"]] for f in laid.steps if f["ttl"] is not None]
    chords = [[f["key"], f["n"]] for f in _chords(laid.fragments)]
    terminal = [[j.id, j.task, j.queue, j.priority, j.stores_result] for j in laid.terminal]
    flow_key = QueueKeys(queue).flow(flow_id)
    ttl_ms = app.settings.result_ttl_s * 1000
    info = {"steps": steps, "chords": chords, "jobs": terminal, "single": single_result(w)}
    blob = bytes(msgpack.packb(info, use_bin_type=True))
    ops.add(["flow", flow_key, ttl_ms, kind, blob], flow_key)
    yield [script_command("launch", ops.keys, [ops.packed()])]
    jobs = tuple(dataclasses.replace(j, app=app) for j in laid.terminal)
    return Flow(flow_id, kind, queue, jobs, single=single_result(w), app=app)


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


def flow_handle(flow_id: str, queue: str, raw: dict[bytes, bytes], app: HandleApp) -> Flow:
    """The handle of a workflow from its record (``app.flow(id)``)."""
    info = msgpack.unpackb(raw.get(b"info", b"\x80"), raw=False)
    jobs = tuple(
        Job(i, task, q, priority, stores_result=bool(stores), app=app)
        for i, task, q, priority, stores in info.get("jobs", ())
    )
    kind = raw.get(b"kind", b"").decode()
    return Flow(flow_id, kind, queue, jobs, single=bool(info.get("single", True)), app=app)


def kind_of(w: Workflow) -> str:
    """``job``, ``chain``, ``group`` or ``chord``: the workflow's kind, kept in its record."""
    return {Signature: "job", Chain: "chain", Group: "group", Chord: "chord"}[type(w)]


def single_result(w: Workflow) -> bool:
    """Whether the workflow's result is one value (else the list of its last group's)."""
    if isinstance(w, Group):
        return False
    if isinstance(w, Chain):
        last = with_implicit_chords(list(w.steps))[-1]
        return single_result(last)
    return True
