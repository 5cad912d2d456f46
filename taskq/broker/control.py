"""The control plane's Redis side: pauses (``<queue>:paused``, the sets of the jobs set aside
under them) read by workers and written by ``taskq pause``/``resume`` and ``app.pause()``."""

from __future__ import annotations

from collections.abc import Sequence

from taskq.broker.link import Link
from taskq.broker.replies import as_int, flat_pairs, text
from taskq.keys import QueueKeys
from taskq.pauses import Pause

RESUME_CHUNK = 1_000
"""Jobs one resume call moves back to their streams (it calls again while some are left)."""


def paused_key(queue: str) -> str:
    return QueueKeys(queue).paused


def read_pauses(link: Link, queues: Sequence[str]) -> dict[str, dict[Pause, int]]:
    """Each queue's pauses and when each began (ms): one HGETALL per queue, pipelined.
    Fields that are not a pause's are passed over (the hash is untrusted)."""
    replies = link.pipeline([("HGETALL", paused_key(q)) for q in queues])
    out: dict[str, dict[Pause, int]] = {}
    for queue, raw in zip(queues, replies, strict=True):
        pauses = {}
        for field, value in flat_pairs(raw).items():
            pause = Pause.from_field(text(field))
            if pause is not None:
                pauses[pause] = as_int(value, 0)
        out[queue] = pauses
    return out


def pause(link: Link, queue: str, p: Pause) -> bool:
    """Pause ``p`` in ``queue``; False if it was paused already."""
    return as_int(link.script("pause", [paused_key(queue)], [p.field])) == 1


def resume(link: Link, queue: str, p: Pause) -> int:
    """End pause ``p`` in ``queue`` and move the jobs set aside under it back to their
    streams (in calls of RESUME_CHUNK); returns how many went back."""
    k = QueueKeys(queue)
    keys = [k.paused, k.aside(p.field), k.counts, *k.streams, k.deadletter]
    moved = 0
    while True:
        before = as_int(link.call("ZCARD", keys[1]))
        left = as_int(link.script("resume", keys, [p.field, RESUME_CHUNK]))
        moved += max(0, before - left)
        if left == 0 or left >= before:
            return moved
