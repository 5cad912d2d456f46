"""The periodic schedules' state in Redis: one hash per queue (``<queue>:periodic``) holding
each schedule's last enqueued tick, read by every master that schedules it and moved forward
only by ``periodic.lua``, the script that also enqueues the tick's job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from taskq.broker.link import Link
from taskq.broker.replies import as_int, flat_pairs, redis_ms, text
from taskq.keys import QueueKeys


class ScheduleState(NamedTuple):
    """A schedule's stored value: the last tick enqueued (ms), the definition it was enqueued
    under (``Schedule.key``) and when that definition was registered (the Redis time its
    master started: of two definitions alive at once, the later one wins); ``raw`` is the
    value as stored, for the next claim."""

    last_ms: int
    definition: str
    registered_ms: int
    raw: str

    @classmethod
    def parse(cls, raw: str) -> ScheduleState | None:
        """None for an empty or unreadable value (the schedule then starts over). A value
        without a registration time (written before there was one) reads as registered at 0."""
        parts = raw.split("|")
        if len(parts) == 2:
            parts.append("0")
        if len(parts) != 3 or not all(_is_ms(part) for part in parts[::2]):
            return None
        return cls(int(parts[0]), parts[1], int(parts[2]), raw)

    @staticmethod
    def value(last_ms: int, definition: str, registered_ms: int) -> str:
        return f"{last_ms}|{definition}|{registered_ms}"


def _is_ms(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 15


class Claim(NamedTuple):
    """What a claim found: whether it moved the schedule, the value now stored, Redis time."""

    claimed: bool
    raw: str
    now_ms: int


class Schedules:
    """The periodic schedules of queues, on one link."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def read(self, queue: str) -> tuple[dict[str, str], int]:
        """Every stored schedule value of ``queue`` by name, and the Redis clock (ms)."""
        pairs, now = self.link.pipeline([("HGETALL", QueueKeys(queue).periodic), ("TIME",)])
        values = {text(k): text(v) for k, v in flat_pairs(pairs).items()}
        return values, redis_ms(now)

    def claim(
        self,
        queue: str,
        name: str,
        expected: str,
        new: str,
        ops: tuple[bytes, Sequence[str]],
    ) -> Claim:
        """Move schedule ``name`` from ``expected`` to ``new`` and run ``ops`` (the jobs of
        the claimed ticks, msgpack, and the keys they touch), unless another worker moved it
        first."""
        blob, keys = ops
        reply = self.link.script(
            "periodic", [QueueKeys(queue).periodic, *keys], [name, expected, new, blob]
        )
        return Claim(as_int(reply[0]) == 1, text(reply[1]), as_int(reply[2]))
