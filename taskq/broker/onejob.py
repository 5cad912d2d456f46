"""The one-job read without a script (the consumer's hot path): its commands and the
parse of their replies, apart so that a worker on queues in several cluster slots can send
every slot's read in one round (see :mod:`taskq.broker.slots`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from taskq.broker.delivery import Delivery, Fetched, delivery
from taskq.broker.link import Command
from taskq.broker.replies import as_int, entries, redis_ms, text
from taskq.errors import BrokerError
from taskq.keys import GROUP

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
