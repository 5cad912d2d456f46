"""The pages of jobs that wait outside their streams for a reason of their own (``taskq
jobs``, the dashboard's ``/queues/<queue>/paused|debounced|batching``): the jobs set aside
under one pause (``<queue>:held:paused:<field>``), and the debounce bursts and filling batches
of the queue's gathering index (``<queue>:gathering``).

Each page is read by rank from its sorted set (``ZRANGE`` with a start and a count, the rank
as the cursor) and then what the members name, one pipeline: never a full scan. The gathering
index lists bursts and batches together, soonest due first; a page of one kind passes over
the other's members and the stale ones (a burst whose job started, a batch that ran), so it
may hold fewer rows than it read.
"""

from __future__ import annotations

from dataclasses import replace

from taskq.broker.control import read_pauses
from taskq.broker.link import Link
from taskq.broker.reads import gathering_rows, scored_text
from taskq.broker.replies import as_int, text
from taskq.broker.resp import Command
from taskq.keys import QueueKeys
from taskq.ops.jobrows import (
    BATCHING,
    DEBOUNCED,
    PAUSED,
    JobRow,
    batch_row,
    check_rank_cursor,
    member_row,
)

Page = tuple[list[JobRow], str | None]
"""Rows read, and the cursor of the next read (None at the end)."""


def pause_fields(link: Link, queue: str) -> list[str]:
    """The queue's pauses (their fields, each naming a set of jobs set aside), sorted; what
    is not a pause's field is passed over (the hash is untrusted)."""
    return sorted(p.field for p in read_pauses(link, [queue])[queue])


def _is_burst(reply: object) -> bool:
    """A burst's hash as HMGET read it: its job and member there (an error reply, from a key
    of another type, is not)."""
    return isinstance(reply, list) and isinstance(reply[1], bytes) and bool(reply[0])


def _index(
    link: Link, k: QueueKeys, after: str | None, count: int, kind: str
) -> tuple[list[tuple[str, int]], str | None]:
    """One read of the gathering index from rank ``after``: (members of ``kind`` with their
    due time, the next cursor)."""
    start = check_rank_cursor(after)
    read = scored_text(link.call("ZRANGE", k.gathering, start, start + count - 1, "WITHSCORES"))
    mine = [(m, due) for m, due in read if m.startswith(kind + ":")]
    return mine, (str(start + count) if len(read) == count else None)


def debounced(link: Link, queue: str, after: str | None, count: int) -> Page:
    """The jobs of the debounce bursts in ``count`` entries of the index from ``after``, due
    when their schedule member is (the burst's hash names it and its job; a burst whose
    member left the schedule has started and is passed over)."""
    k = QueueKeys(queue)
    bursts, cursor = _index(link, k, after, count, "debounce")
    reads: list[Command] = [("HMGET", f"{queue}:{m}", "job", "member", "count") for m, _ in bursts]
    named = link.pipeline(reads, errors=False) if reads else []
    waiting = [(text(r[0]), r[1], r[2]) for r in named if _is_burst(r)]
    checks: list[Command] = [("ZSCORE", k.schedule, member) for _, member, _ in waiting]
    scores = link.pipeline(checks) if checks else []
    rows = []
    for (job, member, calls), score in zip(waiting, scores, strict=True):
        if score is None:
            continue
        row = member_row(member, int(float(score)), DEBOUNCED)
        if row.job_id == job:  # the hash is untrusted: its member must be its job's
            rows.append(replace(row, calls=max(1, as_int(calls, 1))))
    return rows, cursor


def batching(link: Link, queue: str, after: str | None, count: int) -> Page:
    """The filling batches in ``count`` entries of the index from ``after``, each as its first
    call (whose id is the batch job's) with how many calls it holds; a batch that ran (its
    list gone) is passed over."""
    k = QueueKeys(queue)
    batches, cursor = _index(link, k, after, count, "batch")
    reads: list[Command] = []
    for m, _ in batches:
        reads += [("LLEN", f"{queue}:{m}"), ("LINDEX", f"{queue}:{m}", 0)]
    replies = link.pipeline(reads, errors=False) if reads else []
    rows = []
    for i, (_, due) in enumerate(batches):
        calls, first = as_int(replies[2 * i]), replies[2 * i + 1]
        row = batch_row(first, due, calls) if calls and isinstance(first, bytes) else None
        if row is not None:
            rows.append(row)
    return rows, cursor


GATHERING_COUNTED = 1_000
"""Bursts and batches the figures count at most (the soonest due)."""


def figures(link: Link, queue: str) -> dict[str, int]:
    """Jobs set aside under the queue's pauses, and its live debounce bursts and filling
    batches as ``taskq inspect gathering`` lists them (up to :data:`GATHERING_COUNTED`)."""
    k = QueueKeys(queue)
    sets: list[Command] = [("ZCARD", k.aside(f)) for f in pause_fields(link, queue)]
    paused = sum(as_int(n) for n in (link.pipeline(sets) if sets else []))
    rows = gathering_rows(link, queue, GATHERING_COUNTED)
    kinds = [r.kind for r in rows]
    return {PAUSED: paused, DEBOUNCED: kinds.count("debounce"), BATCHING: kinds.count("batch")}
