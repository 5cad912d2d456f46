"""Reads of fair queues' keys (:mod:`taskq.fairview`'s values), written once as steps for the
blocking and the asyncio link: ``app.fair_key``, ``taskq inspect``, the metrics and the
dashboard all read through here.

Run them with ``errors=False``: a key of the wrong type (WRONGTYPE) then comes back as an
error in its place and reads as empty, so one bad key hides only itself. Every read is one
round trip for the sets (GET, ZCARD, ZRANGE of the top keys, ZSCAN when a page is asked
for), then one HMGET of the weights of the keys found: O(log keys) plus the page, never
O(keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskq.broker.replies import text
from taskq.broker.resp import Command
from taskq.broker.steps import Steps
from taskq.errors import BrokerError
from taskq.fairview import (
    KEYS_PAGE,
    TOP_KEYS,
    WEIGHT_DEFAULT,
    FairKey,
    FairStats,
    key_shown,
    waiting_of,
    weight_of,
)
from taskq.keys import QueueKeys

Scored = list[tuple[bytes, int]]
"""Members of a waiting set with a valid count of jobs, as read."""


def fair_key_steps(queues: Sequence[str], key: str) -> Steps[FairKey]:
    """``key``'s waiting jobs summed over ``queues`` (a queue's partitions) and its weight as
    the first of them stores it (a weight is set in every partition)."""
    commands: list[Command] = []
    for q in queues:
        k = QueueKeys(q)
        commands += [("ZSCORE", k.fair_waiting, key), ("HGET", k.fair_weights, key)]
    replies = yield commands
    waiting = sum(waiting_of(_ok(replies[i])) or 0 for i in range(0, len(replies), 2))
    stored = _ok(replies[1]) if replies else None
    return FairKey(key, weight_of(stored), waiting)


def fair_stats_steps(
    queues: Sequence[str], *, keys_cursor: str | None = None
) -> Steps[dict[str, FairStats]]:
    """The :class:`FairStats` of each of ``queues`` that is fair (marked ``on``, or with keys
    waiting); with ``keys_cursor``, also the ZSCAN page of its keys from that cursor (``"0"``:
    the first)."""
    if not queues:
        return {}
    per = 4 if keys_cursor is not None else 3
    commands: list[Command] = []
    for q in queues:
        k = QueueKeys(q)
        commands += [("GET", k.fair_mode), ("ZCARD", k.fair_waiting)]
        commands.append(("ZRANGE", k.fair_waiting, 0, TOP_KEYS - 1, "REV", "WITHSCORES"))
        if keys_cursor is not None:
            commands.append(("ZSCAN", k.fair_waiting, keys_cursor, "COUNT", KEYS_PAGE))
    replies = yield commands
    read = {q: _read(replies[i * per : (i + 1) * per]) for i, q in enumerate(queues)}
    fair = {q: r for q, r in read.items() if r.on or r.active}
    weights = yield from _weights_steps({q: [*r.top, *r.page] for q, r in fair.items()})
    return {q: r.stats(weights[q]) for q, r in fair.items()}


@dataclass(frozen=True)
class _Read:
    """One queue's replies, parsed."""

    on: bool
    active: int
    top: Scored
    page: Scored
    cursor: str | None

    def stats(self, weights: dict[bytes, int]) -> FairStats:
        cursor = self.cursor if self.cursor != "0" else None
        return FairStats(
            self.on, self.active, _keys(self.top, weights), _keys(self.page, weights), cursor
        )


def _read(replies: Sequence[Any]) -> _Read:
    """GET of the mode, ZCARD, ZRANGE of the top keys, and the ZSCAN page if asked."""
    mode, count, top, *page = (_ok(r) for r in replies)
    scanned, cursor = _scan(page[0]) if page else ([], None)
    on = mode is not None and text(mode) == "on"
    return _Read(on, _count(count), _scored(top), scanned, cursor)


def _weights_steps(members: dict[str, Scored]) -> Steps[dict[str, dict[bytes, int]]]:
    """The weights of ``members`` of each queue (one HMGET per queue with members)."""
    asked = {q: list(dict.fromkeys(m for m, _ in scored)) for q, scored in members.items()}
    asked = {q: ms for q, ms in asked.items() if ms}
    weights: dict[str, dict[bytes, int]] = {q: {} for q in members}
    if not asked:
        return weights
    replies = yield [("HMGET", QueueKeys(q).fair_weights, *ms) for q, ms in asked.items()]
    for (q, ms), reply in zip(asked.items(), replies, strict=True):
        stored = _ok(reply)
        values = stored if isinstance(stored, list) and len(stored) == len(ms) else [None] * len(ms)
        weights[q] = {m: weight_of(v) for m, v in zip(ms, values, strict=True)}
    return weights


def _keys(scored: Scored, weights: dict[bytes, int]) -> tuple[FairKey, ...]:
    """Each member once (ZSCAN may return one twice), in the order read."""
    seen: dict[bytes, FairKey] = {}
    for member, waiting in scored:
        if member not in seen:
            seen[member] = FairKey(key_shown(member), weights.get(member, WEIGHT_DEFAULT), waiting)
    return tuple(seen.values())


def _ok(reply: Any) -> Any:
    """A reply, or None in place of a key of the wrong type; any other error reply (a
    command the ACL refuses) is raised, not read as empty."""
    if isinstance(reply, BrokerError):
        if "WRONGTYPE Operation against a key" not in str(reply):
            raise reply
        return None
    return reply


def _count(reply: Any) -> int:
    return reply if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0 else 0


def _scored(reply: Any) -> Scored:
    """``[member, score, ...]``: the members whose score is a count of jobs."""
    if not isinstance(reply, list):
        return []
    pairs = zip(reply[::2], reply[1::2], strict=False)
    return [(m, n) for m, s in pairs if isinstance(m, bytes) and (n := waiting_of(s)) is not None]


def _scan(reply: Any) -> tuple[Scored, str | None]:
    """ZSCAN's ``[cursor, [member, score, ...]]``: the page, and the next cursor."""
    if not isinstance(reply, list) or len(reply) != 2 or not isinstance(reply[1], list):
        return [], "0"
    cursor = text(reply[0])
    return _scored(reply[1]), cursor if cursor.isdigit() else "0"
