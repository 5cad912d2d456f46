"""How a workflow runs: laid out as fragments that travel in its jobs' bodies (``wf``; the
layout is :mod:`taskq.layout`'s, the producer's), and turned into Redis writes ("ops") when a
job succeeds or fails for good (here: what the worker needs, without the workflow types).

A job's ``wf`` map (docs/protocol.md, "Workflows") says what follows it:

- ``next``: fragments to start with its result when it succeeds (the next chain step, a
  chord, ``link`` callbacks);
- ``chord``: ``[chord key, index]``: its result is header result ``index`` of that chord;
- ``fail``: status records of later steps to end as failed if it fails for good;
- ``abort``: chords that fail with it (each with the records and callbacks that go with it);
- ``errback``: ``link_error`` fragments to start, with its id, if it fails for good.

A fragment is a job (``{"t": "job", ...}``: a resolved signature with a pre-assigned id) or a
chord (``{"t": "chord", ...}``: its header members and its body). The ops that start them run
in the same script as the parent's ack or its move to the dead letters (``_flow.lua``), so a
crash between the two can neither lose nor duplicate a step, and a chord's state counts each
header index once, so its body is enqueued exactly once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import msgpack

from taskq import codec
from taskq.broker.enqueue import schedule_member
from taskq.keys import QueueKeys
from taskq.message import Message, as_extended, lua_pack
from taskq.signing import Signer
from taskq.storing import encode_args

Op = list[Any]
"""One write ``_flow.lua`` knows: ``["job", ...]``, ``["chord_add", ...]``, ... (see there)."""

_MARK_VALUE = msgpack.ExtType(71, os.urandom(16))
"""Stands for the parent's result as a step's first argument while its body is encoded."""
_MARK = bytes(msgpack.packb(_MARK_VALUE))
"""Its encoding, which is then replaced by the result's own bytes: the result is spliced in
as msgpack, never decoded and encoded again, so no type changes on the way."""
NIL = b"\xc0"


class Ops:
    """Writes to make in one script, and every key they touch (declared to Redis)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.keys: list[str] = []

    def add(self, op: Op, *keys: str) -> None:
        self.ops.append(op)
        self.keys += [k for k in keys if k and k not in self.keys]

    def extend(self, other: Ops) -> None:
        self.ops += other.ops
        self.keys += [k for k in other.keys if k not in self.keys]

    def packed(self) -> bytes:
        return lua_pack(self.ops)


# -- ops: fragments as writes -----------------------------------------------------------


def spawn(fragments: Sequence[dict[str, Any]], parent: bytes | None, signer: Signer | None) -> Ops:
    """The writes that start ``fragments``; ``parent`` is the encoded result (or the failed
    job's id, for error callbacks) that mutable steps get as their first argument. Each
    step's body is signed by ``signer`` once it is complete."""
    out = Ops()
    for frag in fragments:
        if frag["t"] == "chord":
            out.extend(_chord_ops(frag, parent, signer))
        else:
            out.extend(_job_ops(frag, parent, signer))
    return out


def _job_ops(frag: dict[str, Any], parent: bytes | None, signer: Signer | None) -> Ops:
    """``["job", stream, task, body, id, record, ttl ms, queue, priority, args, later, done]``,
    or for a step with a countdown ``["schedule", schedule, due, delay ms, member, record, ttl
    ms, task, queue, priority, args, later, done]`` (record and done '' when the step keeps
    none; ``later``: the records of the steps after it)."""
    spliced = parent is not None and not frag["imm"]
    first = (_MARK_VALUE,) if spliced else ()
    msg = Message(
        frag["task"],
        (*first, *frag["args"]),
        frag["kwargs"],
        frag["id"],
        frag["queue"],
        frag["priority"],
        result_ttl_s=frag["ttl"],
        wf=frag["wf"],
        headers=frag.get("headers"),
    )
    body, args = msg.encode(), encode_args((*first, *frag["args"]), frag["kwargs"])
    if spliced:
        assert parent is not None
        body, args = body.replace(_MARK, parent, 1), args.replace(_MARK, parent, 1)
        if parent is not _MARK and codec.uses_extensions(parent):  # (a worker of v1 refuses it)
            body = as_extended(body)
    if signer is not None and parent is not _MARK:  # (a chord's body: signed by its caller)
        body = signer.sign(body)
    if frag["countdown_ms"]:
        return _schedule_op(msg, body, args, frag["countdown_ms"])
    return _stream_op(msg, body, args)


def enqueue_ops(msg: Message, body: bytes, delay_ms: int = 0) -> Ops:
    """The op that enqueues an encoded job, with its record if it keeps one: into its stream
    now, or into the schedule for ``delay_ms`` (a periodic job's tick, a unique job). A job
    of a fair queue (``msg.fair_key``) is staged by its key, now or when due."""
    args = encode_args(msg.args, msg.kwargs)
    return _schedule_op(msg, body, args, delay_ms) if delay_ms > 0 else _stream_op(msg, body, args)


def _schedule_op(msg: Message, body: bytes, args: bytes, delay_ms: int) -> Ops:
    k = QueueKeys(msg.queue)
    record, done = _record_keys(msg)
    member = schedule_member(msg, body, fair=True)
    info = [msg.task, msg.queue, msg.priority, args, _later(msg), done]
    op = ["schedule", k.schedule, k.due, delay_ms, member, record, (msg.result_ttl_s or 0) * 1000]
    out = Ops()
    out.add([*op, *info], k.schedule, k.due, record, done, *_later_keys(msg))
    return out


def _stream_op(msg: Message, body: bytes, args: bytes) -> Ops:
    k = QueueKeys(msg.queue)
    record, done = _record_keys(msg)
    stream, ttl_ms = k.stream(msg.priority), (msg.result_ttl_s or 0) * 1000
    op = ["job", stream, msg.task, body, msg.id, record, ttl_ms, msg.queue, msg.priority, args]
    op += [_later(msg), done]
    if msg.fair_key is not None:  # (a unique or periodic job of a fair queue: staged by it)
        op.append(msg.fair_key)
    out = Ops()
    out.add(op, stream, record, done, *_later_keys(msg))
    return out


def _record_keys(msg: Message) -> tuple[str, str]:
    """The job's record and done list, or two '' when it keeps no record."""
    if not msg.recorded:
        return "", ""
    k = QueueKeys(msg.queue)
    return k.job(msg.id), k.done(msg.id)


def _later(msg: Message) -> list[Any]:
    """The records of the steps after this one (``[record, done, ttl ms]`` each, with those
    of the chords it is a header member of): they end as cancelled with it if it was
    cancelled before it could start."""
    wf = msg.wf or {}
    return [*wf.get("fail", ()), *(ref for chord in wf.get("abort", ()) for ref in chord["fail"])]


def _later_keys(msg: Message) -> list[str]:
    return [key for ref in _later(msg) for key in ref[:2]]


def _chord_ops(frag: dict[str, Any], parent: bytes | None, signer: Signer | None) -> Ops:
    """``["chord_new", key, n, ttl ms, pre, post, immutable, body op]``: the chord's state,
    holding its body's job op with the body split around its first argument (the header's
    results, joined in by the script that counts the last one); then the header members.
    A mutable body's signature leaves that joined value out (see :mod:`taskq.signing`).

    Each member's reference to the chord carries the state's digest, so the script that
    counts its result runs only the state this (signed) member was started with: the
    state lives in Redis, where whoever may write the queue could change it."""
    body = frag["body"]
    template = _job_ops(body, None if body["imm"] else _MARK, signer)
    [op] = template.ops
    pre, _, post = op[3].partition(_MARK)
    if signer is not None and not body["imm"]:
        post += signer.split_trailer(pre, post)
    op[3], op[9] = b"", op[9].replace(_MARK, NIL, 1)
    out = Ops()
    imm = b"1" if body["imm"] else b"0"
    state = [b"%d" % frag["n"], b"%d" % (frag["ttl"] * 1000), pre, post, imm, lua_pack(op)]
    out.add(["chord_new", frag["key"], *state], frag["key"], *template.keys)
    members = [_with_digest(m, frag["key"], chord_digest(state)) for m in frag["members"]]
    out.extend(spawn(members, parent, signer))
    return out


def chord_digest(state: Sequence[bytes]) -> str:
    """SHA-1 (hex) of a chord's stored state, each field preceded by its length: what
    ``_flow.lua`` computes with ``redis.sha1hex`` before it runs the state."""
    return hashlib.sha1(b"".join(b"%d:%s" % (len(v), v) for v in state)).hexdigest()


def _with_digest(frag: dict[str, Any], key: str, digest: str) -> dict[str, Any]:
    """``frag`` with its reference to chord ``key`` (on it, or on the step of its chain
    that ends it) carrying ``digest``."""
    if frag["t"] == "chord":  # a member ending in a chord: the reference is on its body
        return {**frag, "body": _with_digest(frag["body"], key, digest)}
    wf = frag.get("wf")
    if not wf:
        return frag
    wf = dict(wf)
    chord = wf.get("chord")
    if chord and chord[0] == key:
        wf["chord"] = [chord[0], chord[1], digest]
    if wf.get("next"):
        wf["next"] = [_with_digest(f, key, digest) for f in wf["next"]]
    return {**frag, "wf": wf}


def on_success(msg: Message, result: bytes | None, signer: Signer | None) -> Ops:
    """What a job's success starts: its next steps and callbacks (signed by ``signer``), and
    its chord's count; it releases its uniqueness lock."""
    wf = msg.wf or {}
    out = _unlock(msg)
    if result is None:  # a job whose success passes nothing on
        return out
    out.extend(spawn(wf.get("next", ()), result, signer))
    chord = wf.get("chord")
    if chord:  # [key, index, digest of the chord's state] (no digest: an older producer)
        out.add(["chord_add", chord[0], chord[1], result, *chord[2:]], chord[0])
    return out


def on_failure(
    msg: Message, error_type: str, error: str, signer: Signer | None, *, errbacks: bool = True
) -> Ops:
    """What a job's failure for good does: later steps fail, error callbacks start (with the
    failed job's id) unless ``errbacks`` is False (a cancel: no one is told of what its
    caller chose), each chord it belongs to fails, once, and its uniqueness lock goes."""
    wf = msg.wf or {}
    cause = [msg.id, msg.task, error_type, error]
    out = _unlock(msg)
    for ref in wf.get("fail", ()):
        out.add(["fail", *ref, *cause], ref[0], ref[1])
    job_id = bytes(msgpack.packb(msg.id))
    out.extend(spawn(wf.get("errback", ()) if errbacks else (), job_id, signer))
    for chord in wf.get("abort", ()):
        inner = Ops()
        for ref in chord["fail"]:
            inner.add(["fail", *ref, *cause], ref[0], ref[1])
        inner.extend(spawn(chord["errback"] if errbacks else (), job_id, signer))
        out.add(["chord_fail", chord["key"], inner.ops], chord["key"], *inner.keys)
    return out


def _unlock(msg: Message) -> Ops:
    """``["unlock", key, job id]``: the job's end releases its uniqueness lock (if it still
    holds it)."""
    out = Ops()
    if msg.unique is not None:
        out.add(["unlock", msg.unique, msg.id], msg.unique)
    return out


def ends_with_writes(msg: Message) -> bool:
    """Whether the job's end writes more than its ack (workflow steps, a lock to release)."""
    return bool(msg.wf) or msg.unique is not None


def needs_result(msg: Message) -> bool:
    """Whether the job's success needs its encoded result (to store, or to pass on)."""
    if msg.recorded:
        return True
    wf = msg.wf
    return bool(wf and (wf.get("next") or wf.get("chord")))
