"""Reads of fair queues' keys (:mod:`taskq.fairview`'s values), written once as steps for the
blocking and the asyncio link: ``app.fair_key``, ``taskq inspect``, the metrics and the
dashboard all read through here.

A key's waiting jobs are counted from its staged lists (``LLEN`` of each priority's); the
waiting keys' scores only rank the keys (admitting takes nothing off them, docs/fairness.md),
so the top keys are the best counted of the :data:`TOP_CANDIDATES` ranked highest.

Run them with ``errors=False``: a key of the wrong type (WRONGTYPE) then comes back as an
error in its place and reads as empty, so one bad key hides only itself. Every read is one
round trip for the sets (GET, ZCARD, ZRANGE of the top keys, ZSCAN when a page is asked
for), then one for the keys found (their lists' lengths and one HMGET of their weights):
O(log keys) plus the page, never O(keys).
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
    FairKey,
    FairStats,
    key_shown,
    weight_of,
)
from taskq.keys import PRIORITIES, QueueKeys

TOP_CANDIDATES = 3 * TOP_KEYS
"""Keys ranked highest by the waiting keys' scores that a read counts to find the top keys
(a score bounds a key's jobs from above; fair workers set the top scores exact every
:data:`~taskq.broker.fairness.RECOUNT_EVERY_S`)."""


def fair_key_steps(queues: Sequence[str], key: str) -> Steps[FairKey]:
    """``key``'s waiting jobs summed over ``queues`` (a queue's partitions) and its weight as
    the first of them stores it (a weight is set in every partition)."""
    member = key.encode()
    commands: list[Command] = [("HGET", QueueKeys(queues[0]).fair_weights, key)] if queues else []
    for q in queues:
        commands += _length_commands(QueueKeys(q), member)
    replies = yield commands
    stored = _ok(replies[0]) if replies else None
    return FairKey(key, weight_of(stored), sum(_count(_ok(r)) for r in replies[1:]))


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
        commands.append(("ZRANGE", k.fair_waiting, 0, TOP_CANDIDATES - 1, "REV"))
        if keys_cursor is not None:
            commands.append(("ZSCAN", k.fair_waiting, keys_cursor, "COUNT", KEYS_PAGE))
    replies = yield commands
    read = {q: _read(replies[i * per : (i + 1) * per]) for i, q in enumerate(queues)}
    fair = {q: r for q, r in read.items() if r.on or r.active}
    counted = yield from _count_steps({q: [*r.top, *r.page] for q, r in fair.items()})
    return {q: r.stats(counted[q]) for q, r in fair.items()}


Members = list[bytes]
"""Members of a waiting set, as read."""


@dataclass(frozen=True)
class _Read:
    """One queue's replies, parsed."""

    on: bool
    active: int
    top: Members
    page: Members
    cursor: str | None

    def stats(self, counted: dict[bytes, FairKey]) -> FairStats:
        cursor = self.cursor if self.cursor != "0" else None
        top = sorted(_keys(self.top, counted), key=lambda k: k.waiting, reverse=True)
        page = tuple(_keys(self.page, counted))
        return FairStats(self.on, self.active, tuple(top[:TOP_KEYS]), page, cursor)


def _read(replies: Sequence[Any]) -> _Read:
    """GET of the mode, ZCARD, ZRANGE of the top keys, and the ZSCAN page if asked."""
    mode, count, top, *page = (_ok(r) for r in replies)
    scanned, cursor = _scan(page[0]) if page else ([], None)
    on = mode is not None and text(mode) == "on"
    return _Read(on, _count(count), _members(top), scanned, cursor)


def _count_steps(members: dict[str, Members]) -> Steps[dict[str, dict[bytes, FairKey]]]:
    """Each of ``members`` of each queue counted (its lists' lengths) and weighed (one HMGET
    per queue with members)."""
    asked = {q: list(dict.fromkeys(ms)) for q, ms in members.items()}
    asked = {q: ms for q, ms in asked.items() if ms}
    counted: dict[str, dict[bytes, FairKey]] = {q: {} for q in members}
    if not asked:
        return counted
    commands: list[Command] = []
    for q, ms in asked.items():
        k = QueueKeys(q)
        commands.append(("HMGET", k.fair_weights, *ms))
        for m in ms:
            commands += _length_commands(k, m)
    replies = iter((yield commands))
    for q, ms in asked.items():
        stored = _ok(next(replies))
        values = stored if isinstance(stored, list) and len(stored) == len(ms) else [None] * len(ms)
        for m, v in zip(ms, values, strict=True):
            waiting = sum(_count(_ok(next(replies))) for _ in PRIORITIES)
            counted[q][m] = FairKey(key_shown(m), weight_of(v), waiting)
    return counted


def _length_commands(k: QueueKeys, member: bytes) -> list[Command]:
    """LLEN of ``member``'s staged list in each priority."""
    return [("LLEN", k.fair_staged(p, "").encode() + member) for p in PRIORITIES]


def _keys(members: Members, counted: dict[bytes, FairKey]) -> list[FairKey]:
    """Each member once (ZSCAN may return one twice), in the order read, without those
    counted at no jobs (their last left since the set was read)."""
    found = (counted.get(m) for m in dict.fromkeys(members))
    return [key for key in found if key is not None and key.waiting > 0]


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


def _members(reply: Any) -> Members:
    """A list reply's members that are bytes."""
    return [m for m in reply if isinstance(m, bytes)] if isinstance(reply, list) else []


def _scan(reply: Any) -> tuple[Members, str | None]:
    """ZSCAN's ``[cursor, [member, score, ...]]``: the page's members, and the next cursor."""
    if not isinstance(reply, list) or len(reply) != 2 or not isinstance(reply[1], list):
        return [], "0"
    cursor = text(reply[0])
    return _members(reply[1][::2]), cursor if cursor.isdigit() else "0"
