"""A success's writes as ``fetch.lua`` reads them: its result for its status record and the
workflow ops it starts, packed for the script that acks it."""

from __future__ import annotations

from collections.abc import Sequence

from taskq.message import lua_pack
from taskq.storing import Completion


def completions_arg(ends: Sequence[tuple[int, Completion]], now_mono: float) -> bytes:
    """A batch's completions as ``fetch.lua`` reads them, one packed array for the batch:
    per completion ``[its ack's index, ms since the run ended, job id or nil, record ttl ms,
    result, attempts, run ms, ops]``. The script names the record and done list from the
    job id and the ack's stream, so neither travels."""
    return lua_pack(
        [
            (
                i,
                int((now_mono - c.finished_mono) * 1000),
                c.job_id if c.recorded else None,
                c.ttl_ms,
                c.value,
                c.attempts,
                int(c.duration_ms),
                c.ops,
            )
            for i, c in ends
        ]
    )
