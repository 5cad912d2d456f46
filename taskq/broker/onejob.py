"""The consumer's reads, as commands and replies kept apart: the one-job read without a
script (the hot path) and the ``fetch.lua`` call, so that a worker on queues in several
cluster slots can send every slot's read in one round (see :mod:`taskq.broker.slots`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from taskq.broker.completions import completions_arg
from taskq.broker.delivery import Delivery, Fetched, delivery
from taskq.broker.replies import as_int, entries, flat_pairs, redis_ms, text
from taskq.broker.resp import Command
from taskq.errors import BrokerError
from taskq.keys import GROUP
from taskq.results import Completion

if TYPE_CHECKING:
    from taskq.broker.broker import Broker


def one_job_commands(
    b: Broker, consumer: str, acks: Sequence[Delivery], *, read: bool = True
) -> tuple[list[Command], int, int]:
    """XACK of ``acks``, TIME, the due keys, and (``read``) one XREADGROUP per stream down to
    the broker's reach. Returns them, how many XACKs lead, and where the reads start."""
    by_stream: dict[str, list[str]] = {}
    for d in acks:
        by_stream.setdefault(d.stream, []).append(d.entry_id)
    commands: list[Command] = [("XACK", s, GROUP, *ids) for s, ids in by_stream.items()]
    commands += [("TIME",), *(("GET", k.due) for k in b.keys.values())]
    first_read = len(commands)
    if read:
        commands += [
            ("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", 1, "STREAMS", s, ">")
            for s in b.streams[: b._reach + 1]
        ]
    return commands, len(by_stream), first_read


def one_job_replies(b: Broker, replies: list[Any], n_acks: int, first_read: int) -> Fetched | None:
    """The deliveries and due time in those replies; None if a stream or group is gone."""
    for reply in replies:
        if isinstance(reply, BrokerError):
            if "NOGROUP" not in str(reply):
                raise reply
            return None
    now = redis_ms(replies[n_acks])
    due = [as_int(r) for r in replies[n_acks + 1 : first_read] if r is not None]
    got = [
        delivery(b._where[b.stream_position[text(stream)]], eid, fields)
        for reply in replies[first_read:]
        for stream, rows in reply or ()
        for eid, fields in entries(rows)
    ]
    return Fetched(got, max(0, min(due) - now) if due else -1)


def fetch_script_args(
    b: Broker,
    consumer: str,
    count: int,
    acks: Sequence[Delivery],
    completions: Mapping[Delivery, Completion] | None,
    fence_acks: bool,
    trim: bool,
    dirty: Sequence[str],
) -> tuple[list[Any], list[Any]]:
    """The keys and arguments of the ``fetch.lua`` call of :meth:`Broker.fetch`."""
    ends = (
        [(i, completions[d]) for i, d in enumerate(acks, 1) if d in completions]
        if completions
        else []
    )
    argv: list[Any] = [GROUP, consumer, count, int(fence_acks), int(trim), len(acks)]
    argv += (len(b.streams), len(ends), len(b._fetch_keys))
    for d in acks:
        argv += (b.stream_position[d.stream] + 1, d.entry_id)
    keys: list[Any] = b._fetch_keys
    if ends:
        argv.append(completions_arg(ends, time.monotonic()))
        touched = [k for _i, c in ends for k in c.op_keys]
        if touched:
            keys = [*keys, *touched]
    argv += sorted({b.stream_position[s] + 1 for s in (*dirty, *(d.stream for d in acks))})
    return keys, argv


def fetch_script_replies(b: Broker, flat: Any) -> Fetched:
    """The deliveries in ``fetch.lua``'s reply (the broker's reach follows them)."""
    got = [
        delivery(b._where[int(flat[i]) - 1], text(flat[i + 1]), flat_pairs(flat[i + 2]))
        for i in range(1, len(flat), 3)
    ]
    b._reach = b.stream_position[got[0].stream] if got else 0
    b._tracking = any(d.record_id for d in got)
    return Fetched(got, as_int(flat[0], -1))
