"""The consumer's reads: the pipelined read without a script (the hot path) and the
``fetch.lua`` call, their commands and replies kept apart so that a worker on queues in
several cluster slots can send every slot's read in one round (see
:mod:`taskq.broker.slots`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from taskq.broker.completions import completions_arg
from taskq.broker.delivery import Delivery, Fetched, delivery
from taskq.broker.link import script_command
from taskq.broker.replies import as_int, entries, flat_pairs, redis_ms, text
from taskq.broker.resp import Command
from taskq.errors import BrokerError
from taskq.keys import GROUP
from taskq.results import Completion, read_ms

if TYPE_CHECKING:
    from taskq.broker.broker import Broker


def pipelined_commands(
    b: Broker,
    consumer: str,
    acks: Sequence[Delivery],
    *,
    read: bool = True,
    count: int = 1,
    first: int = 0,
) -> tuple[list[Command], int, int]:
    """XACK of ``acks``, TIME, the due keys, and (``read``) one XREADGROUP of up to ``count``
    entries per stream from stream ``first`` down to the broker's reach. Returns them, how
    many XACKs lead, and where the reads start."""
    by_stream: dict[str, list[str]] = {}
    for d in acks:
        by_stream.setdefault(d.stream, []).append(d.entry_id)
    commands: list[Command] = [("XACK", s, GROUP, *ids) for s, ids in by_stream.items()]
    commands += [("TIME",), *(("GET", k.due) for k in b.keys.values())]
    first_read = len(commands)
    if read:
        commands += [
            ("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count, "STREAMS", s, ">")
            for s in b.streams[first : b._reach + 1]
        ]
    return commands, len(by_stream), first_read


def fetch_pipelined(
    b: Broker,
    consumer: str,
    count: int,
    acks: Sequence[Delivery],
    trim: Sequence[str],
    first: int = 0,
) -> Fetched:
    """Up to ``count`` jobs without the fetch script: XACK the finished ones and read up to
    ``count`` entries from each stream down to the reach (from stream ``first``), in one
    write with the due keys and the clock (and ``trim.lua`` on the ``trim`` streams, after
    the acks). Redis spends what the commands cost, without a script's copies of every entry
    it returns (at 64 jobs a fetch, the script cost Redis several times its commands).

    The streams read are the ones that may hold the best jobs: the reach is the stream of the
    last job a full batch kept, every stream after a short one. A short batch from the
    streams read is filled from the streams below them in a second round trip. When several
    streams have jobs, more than ``count`` can come back: the caller keeps the first
    ``count`` (in priority order) and hands the others back.
    """
    commands, n_acks, first_read = pipelined_commands(
        b, consumer, acks, read=count > 0, count=count, first=first
    )
    read_to = first + len(commands) - first_read  # the streams read end before this one
    if trim:
        commands.append(script_command("trim", trim, [GROUP]))
    replies = b.direct.pipeline(commands)
    if trim:
        # Housekeeping only: a trim that failed (its stream deleted under it, which the reads
        # answer) is done by a later fetch.
        replies.pop()
    found = pipelined_replies(b, replies, n_acks, first_read)
    if found is None:  # a stream or its group was deleted (FLUSHALL, DEL): read again
        b.ensure_groups()
        return fetch_pipelined(b, consumer, count, (), (), first)
    fetched = follow(b, found, count)
    short = count - len(fetched.deliveries)
    if short <= 0 or read_to in (first, len(b.streams)):
        return fetched
    b._reach = len(b.streams) - 1
    more = fetch_pipelined(b, consumer, short, (), (), first=read_to)
    if not fetched.deliveries and not more.deliveries:
        b._reach = 0
    dues = [d for d in (fetched.due_in_ms, more.due_in_ms) if d >= 0]
    return Fetched(fetched.deliveries + more.deliveries, min(dues) if dues else -1)


def follow(b: Broker, fetched: Fetched, count: int) -> Fetched:
    """Move the broker's reach after a read of ``count`` jobs: to the stream of the last of
    the ``count`` kept, or to every stream when fewer came back."""
    got = fetched.deliveries
    if len(got) >= count > 0:
        b._reach = b.stream_position[got[count - 1].stream]
    elif got:
        b._reach = len(b.streams) - 1
    return fetched


def pipelined_replies(
    b: Broker, replies: list[Any], n_acks: int, first_read: int
) -> Fetched | None:
    """The deliveries and due time in those replies; None if a stream or group is gone."""
    for reply in replies:
        if isinstance(reply, BrokerError):
            if "NOGROUP" not in str(reply):
                raise reply
            return None
    now = redis_ms(replies[n_acks])
    got = [
        delivery(b._where[b.stream_position[text(stream)]], eid, fields)
        for reply in replies[first_read:]
        for stream, rows in reply or ()
        for eid, fields in entries(rows)
    ]
    return Fetched(got, due_in_ms(now, replies[n_acks + 1 : first_read]))


def due_in_ms(now_ms: int, due_keys: Sequence[Any]) -> int:
    """Ms until the earliest of the queues' due keys (GET replies) is due; -1: none is set.
    A due key is untrusted: a fraction is rounded up, and one that is not a time at all is
    passed over (not read as 0, which would promote in a tight loop): the master's forced
    promote, every few seconds, rewrites it from the sets."""
    dues = [ms for ms in map(read_ms, due_keys) if ms is not None]
    return max(0, min(dues) - now_ms) if dues else -1


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
