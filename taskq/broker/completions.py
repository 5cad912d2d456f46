"""A success's writes as ``fetch.lua`` reads them: its result for its status record and the
workflow ops it starts, packed for the script that acks it."""

from __future__ import annotations

from typing import Any

from taskq.keys import QueueKeys
from taskq.message import lua_pack
from taskq.results import Completion


def completion_blob(k: QueueKeys, c: Completion, now_mono: float) -> tuple[bytes, list[str]]:
    """A completion as ``fetch.lua`` reads it, and the keys it touches."""
    ended_ago_ms = int((now_mono - c.finished_mono) * 1000)
    fields: dict[str, Any] = {"e": ended_ago_ms}
    keys = list(c.op_keys)
    if c.recorded:
        record, done = k.job(c.job_id), k.done(c.job_id)
        fields.update(r=record, d=done, t=c.ttl_ms, v=c.value, a=c.attempts)
        fields["s"] = ended_ago_ms + int(c.duration_ms)
        keys += (record, done)
    if c.ops:
        fields["o"] = c.ops
    return lua_pack(fields), keys
