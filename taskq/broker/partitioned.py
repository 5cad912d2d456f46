"""Reading a partitioned queue: strict priority across its partitions, one slot per call.

Each partition is a queue of its own (``{tasks.0}``, ``{tasks.1}``, ...; on a Redis Cluster,
each in its own slot), so no one script sees them all. A fetch therefore looks first and
takes second, each step one pipeline (on a cluster, one write per node, all nodes at once):

1. *Look*: per partition and priority, the newest entry (``XREVRANGE + - COUNT 1``) and the
   group's last delivered id (``XINFO GROUPS``): a stream has a job waiting exactly when its
   newest entry is past the group's cursor. The acks ride along (with the due keys and TIME).
2. *Take*: from the highest priority at which any partition has a job waiting, read from
   those partitions in turn (rotating, so none starves), until ``count`` jobs came.

The bound: **no job starts while, at the look of its fetch, any partition of the queue had a
job of a higher priority waiting.** A job that arrives between the look and the take waits
for the next fetch. Acks with results or workflow steps, fenced acks and trims go through each
partition's own fetch script first (one call per partition that has them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from taskq.broker.delivery import Delivery, Fetched, delivery
from taskq.broker.fetching import SlotFetcher, due_in_ms
from taskq.broker.link import Link
from taskq.broker.replies import as_int, entries, info_records, redis_ms, text
from taskq.broker.resp import Command
from taskq.errors import BrokerError
from taskq.keys import GROUP, PRIORITIES
from taskq.storing import Completion


def units_of(
    link: Link,
    queues: Sequence[str],
    groups: Sequence[Sequence[str]],
    fair: Collection[str] = (),
) -> list[SlotFetcher | PartitionGroup]:
    """What a fetch over ``queues`` reads in turn: each run of queues that are no partitions
    (a fetcher of its own), and the partitions of each queue (a group). Empty without
    partitions."""
    if not groups:
        return []
    member = {q: tuple(g) for g in groups for q in g}
    specs: list[list[str] | tuple[str, ...]] = []
    for q in queues:
        if q in member:
            specs += [member[q]] if q == member[q][0] else []
        elif specs and isinstance(specs[-1], list):
            specs[-1].append(q)
        else:
            specs.append([q])
    return [
        SlotFetcher(link, spec, fair)
        if isinstance(spec, list)
        else PartitionGroup([SlotFetcher(link, [p], fair) for p in spec])
        for spec in specs
    ]


class PartitionGroup:
    """The partitions of one queue, each read by a one-queue fetcher."""

    def __init__(self, parts: Sequence[SlotFetcher]) -> None:
        self.parts = list(parts)
        self.keys = {q: k for p in self.parts for q, k in p.keys.items()}
        self.stream_position = {s: i for p in self.parts for s, i in p.stream_position.items()}
        self._turn = 0

    def fetch(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery],
        completions: Mapping[Delivery, Completion],
        fence_acks: bool,
        trim: bool,
        dirty: Sequence[str],
    ) -> Fetched:
        """Ack ``acks`` and take up to ``count`` jobs by the bound above."""
        plain: list[Delivery] = []
        for part in self.parts:
            mine = [d for d in acks if d.queue in part.keys]
            done = {d: c for d, c in completions.items() if d.queue in part.keys}
            stale = [s for s in dirty if s in part.stream_position] if trim else []
            if done or (fence_acks and mine) or stale:
                part.fetch(consumer, 0, mine, completions=done, fence_acks=fence_acks, trim=trim,
                           dirty=stale)  # fmt: skip
            else:
                plain += mine
        waiting, due_in_ms = self._look(plain)
        got = self._take(consumer, count, waiting) if count else []
        return Fetched(got, due_in_ms)

    def _look(self, acks: Sequence[Delivery]) -> tuple[list[list[int]], int]:
        """Per priority, the indexes of the partitions with a job waiting; ms until the first
        delayed job or retry of the queue is due (-1: none)."""
        by_stream: dict[str, list[str]] = {}
        for d in acks:
            by_stream.setdefault(d.stream, []).append(d.entry_id)
        commands: list[Command] = [("XACK", s, GROUP, *ids) for s, ids in by_stream.items()]
        commands.append(("TIME",))
        for part in self.parts:
            commands += [("GET", k.due) for k in part.keys.values()]
            for stream, queue, priority in part.where:
                commands += [("XREVRANGE", stream, "+", "-", "COUNT", 1)]
                commands += [("XINFO", "GROUPS", stream)]
                if part.fair_streams:  # (its jobs wait staged for their turn too)
                    commands.append(("GET", part.keys[queue].fair_staged_count(priority)))
        replies = self.parts[0].direct.pipeline(commands)
        for reply in replies[: len(by_stream)]:
            if isinstance(reply, BrokerError) and "NOGROUP" not in str(reply):
                raise reply
        at = len(by_stream)
        now, at = redis_ms(replies[at]), at + 1
        waiting: list[list[int]] = [[] for _ in PRIORITIES]
        dues: list[Any] = []
        for i, part in enumerate(self.parts):
            dues += replies[at : at + len(part.keys)]
            at += len(part.keys)
            for p in range(len(PRIORITIES)):
                staged = as_int(replies[at + 2], 0) if part.fair_streams else 0
                if _waits(replies[at], replies[at + 1]) or staged > 0:
                    waiting[p].append(i)
                at += 3 if part.fair_streams else 2
        return waiting, due_in_ms(now, dues)

    def _take(self, consumer: str, count: int, waiting: list[list[int]]) -> list[Delivery]:
        level = next((p for p, ids in enumerate(waiting) if ids), None)
        if level is None:
            return []
        n = len(self.parts)
        order = sorted(waiting[level], key=lambda i: (i - self._turn) % n)
        self._turn = (order[0] + 1) % n
        got: list[Delivery] = []
        for i in order:
            part = self.parts[i]
            if part.fair_streams:  # its fetch admits the jobs it reads (fair_admit.lua)
                got += part.fetch(consumer, count - len(got)).deliveries
                if len(got) >= count:
                    break
                continue
            stream = part.streams[level]
            args = ("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count - len(got))
            [reply] = part.direct.pipeline([(*args, "STREAMS", stream, ">")])
            if isinstance(reply, BrokerError):
                if "NOGROUP" not in str(reply):
                    raise reply
                part.ensure_groups()
                continue
            where = (stream, part.queues[0], PRIORITIES[level])
            mine = [delivery(where, eid, f) for _, rows in reply or () for eid, f in entries(rows)]
            part.note_records(mine)
            got += mine
            if len(got) >= count:
                break
        return got


def _waits(newest: Any, groups: Any) -> bool:
    """Whether a stream's newest entry is past the group's last delivered id."""
    if isinstance(newest, BrokerError) or not entries(newest):
        return False
    newest_id = _id(entries(newest)[0][0])
    if isinstance(groups, BrokerError):
        return True  # no group yet: every entry waits
    for g in info_records(groups):
        if text(g.get("name", "")) == GROUP:
            return newest_id > _id(text(g.get("last-delivered-id", "0-0")))
    return True


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
