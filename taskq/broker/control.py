"""The control plane's Redis side: pauses (``<queue>:paused``, the sets of the jobs set aside
under them) read by workers and written by ``taskq pause``/``resume`` and ``app.pause()``,
and the audit stream ``<queue>:audit`` every control action appends to."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from taskq.broker.link import Link
from taskq.broker.replies import as_int, entries, flat_pairs, text
from taskq.broker.resp import Command
from taskq.errors import BrokerError
from taskq.keys import QueueKeys
from taskq.pauses import LimitOverride, Pause

if TYPE_CHECKING:
    from taskq.audit import AuditEntry

T = TypeVar("T")

RESUME_CHUNK = 1_000
"""Jobs one resume call moves back to their streams (it calls again while some are left)."""


class Auditor:
    """Who acts (the Redis ACL user, asked once per link: ``ACL WHOAMI``) and how many
    entries each audit stream keeps."""

    def __init__(self, link: Link, cap: int) -> None:
        self.link = link
        self.cap = cap
        self._user: str | None = None

    @property
    def user(self) -> str:
        if self._user is None:
            try:
                self._user = text(self.link.call("ACL", "WHOAMI"))
            except BrokerError:  # a user without ACL WHOAMI (or an old server): unnamed
                self._user = "?"
        return self._user

    def args(self, action: str, detail: Mapping[str, Any]) -> list[Any]:
        """The audit stream's cap and an entry's fields, as scripts take them (the script
        that acts appends the entry in the same step)."""
        from taskq.audit import AuditEntry  # loaded by the first control action, not at start

        return [self.cap, *AuditEntry.fields(action, self.user, detail)]


def read_pauses(link: Link, queues: Sequence[str]) -> dict[str, dict[Pause, int]]:
    """Each queue's pauses and when each began (ms): one HGETALL per queue, pipelined.
    Fields that are not a pause's are passed over (the hash is untrusted)."""
    replies = link.pipeline([("HGETALL", QueueKeys(q).paused) for q in queues])
    return {q: _parsed(raw, lambda v: as_int(v, 0)) for q, raw in zip(queues, replies, strict=True)}


def read_control(
    link: Link, queues: Sequence[str]
) -> tuple[dict[str, dict[Pause, int]], dict[str, dict[Pause, LimitOverride]]]:
    """Each queue's pauses and its limits set at run time (a limit's task and key are
    spelled as a pause's): two HGETALL per queue, pipelined. What is not a pause's or a
    limit's is passed over (the hashes are untrusted)."""
    commands: list[Command] = []
    for q in queues:
        commands += [("HGETALL", QueueKeys(q).paused), ("HGETALL", QueueKeys(q).limits)]
    replies = link.pipeline(commands)
    pauses, limits = {}, {}
    for i, queue in enumerate(queues):
        pauses[queue] = _parsed(replies[2 * i], lambda v: as_int(v, 0))
        limits[queue] = _parsed(replies[2 * i + 1], lambda v: LimitOverride.from_json(text(v)))
    return pauses, limits


def _parsed(raw: Any, value: Callable[[Any], T | None]) -> dict[Pause, T]:
    out = {}
    for field, v in flat_pairs(raw).items():
        which, parsed = Pause.from_field(text(field)), value(v)
        if which is not None and parsed is not None:
            out[which] = parsed
    return out


def set_limit(auditor: Auditor, queue: str, which: Pause, limit: LimitOverride | None) -> str:
    """Set (``limit``) or clear (None) a limit at run time, audited; returns what is stored
    now (JSON, '' once cleared)."""
    k = QueueKeys(queue)
    action = "limit_set" if limit is not None else "limit_clear"
    detail = {**_detail(which), **(json.loads(limit.to_json()) if limit else {})}
    args = [which.field, limit.to_json() if limit else "", *auditor.args(action, detail)]
    return text(auditor.link.script("limit_set", [k.limits, k.audit], args))


def release_held(link: Link, queue: str, held: str) -> int:
    """Move every job waiting in a concurrency limit's ``held`` set back to its stream
    (its task has no concurrency limit any more); returns how many went."""
    k = QueueKeys(queue)
    keys = [k.limits, held, k.counts, *k.streams, k.deadletter, k.audit]
    moved = 0
    while True:
        before = as_int(link.call("ZCARD", held))
        left = as_int(link.script("resume", keys, ["", RESUME_CHUNK]))
        moved += max(0, before - left)
        if left == 0 or left >= before:
            return moved


def pause(auditor: Auditor, queue: str, p: Pause) -> bool:
    """Pause ``p`` in ``queue`` (audited); False if it was paused already."""
    k = QueueKeys(queue)
    args = [p.field, *auditor.args("pause", _detail(p))]
    return as_int(auditor.link.script("pause", [k.paused, k.audit], args)) == 1


def resume(auditor: Auditor, queue: str, p: Pause) -> int:
    """End pause ``p`` in ``queue`` (audited) and move the jobs set aside under it back to
    their streams (in calls of RESUME_CHUNK); returns how many went back."""
    k, link = QueueKeys(queue), auditor.link
    keys = [k.paused, k.aside(p.field), k.counts, *k.streams, k.deadletter, k.audit]
    audit = auditor.args("resume", _detail(p))
    moved = 0
    while True:
        before = as_int(link.call("ZCARD", keys[1]))
        left = as_int(link.script("resume", keys, [p.field, RESUME_CHUNK, *audit]))
        audit, moved = [], moved + max(0, before - left)
        if left == 0 or left >= before:
            return moved


def _detail(p: Pause) -> dict[str, Any]:
    return {"task": p.task, "key": p.key}


def append_audit(
    link: Link, queue: str, cap: int, entry: tuple[str, str, str, Mapping[str, Any]]
) -> None:
    """Append one entry (action, user, host, detail) to a queue's audit stream, for an action
    that was not one script with its entry (the dashboard's, after it acted)."""
    from taskq.audit import AuditEntry  # (loaded on first use, as above)

    action, user, host, detail = entry
    fields = AuditEntry.fields(action, user, detail, host)
    link.call("XADD", QueueKeys(queue).audit, "MAXLEN", "~", max(1, cap), "*", *fields)


def read_audit(link: Link, queues: Sequence[str], since_ms: int = 0) -> list[AuditEntry]:
    """The audit entries of ``queues`` from ``since_ms`` on (Redis clock), oldest first."""
    from taskq.audit import AuditEntry

    replies = link.pipeline([("XRANGE", QueueKeys(q).audit, since_ms, "+") for q in queues])
    found = [
        AuditEntry.from_entry(queue, text(eid), {text(f): text(v) for f, v in fields.items()})
        for queue, rows in zip(queues, replies, strict=True)
        for eid, fields in entries(rows)
    ]
    return sorted(found, key=lambda e: (e.at_ms, e.queue, e.entry_id))
