"""Queues in several hash slots of a Redis Cluster: cut into runs that share a slot, each
served by a broker of its own, so that every call goes to one slot and never across."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from taskq.broker.delivery import Delivery, Fetched
from taskq.broker.link import Link
from taskq.keys import PRIORITIES, QueueKeys
from taskq.results import Completion

if TYPE_CHECKING:
    from taskq.broker.broker import Broker


def slot_runs(link: Link, queues: Sequence[str]) -> list[tuple[str, ...]]:
    """``queues`` cut into runs of consecutive queues whose keys share a hash slot (one run
    on one server; on a Redis Cluster a queue without a hash tag is a ConfigError)."""
    runs: list[tuple[str, ...]] = []
    last = None
    for q in queues:
        slot = link.slot_of(QueueKeys(q).stream(PRIORITIES[0]))
        if runs and slot == last:
            runs[-1] += (q,)
        else:
            runs.append((q,))
        last = slot
    return runs


def fetch_parts(
    parts: Sequence[Broker],
    consumer: str,
    count: int,
    acks: Sequence[Delivery],
    completions: Mapping[Delivery, Completion] | None,
    fence_acks: bool,
    trim: bool,
    dirty: Sequence[str],
) -> Fetched:
    """:meth:`Broker.fetch` over queues in several slots: one call per slot, in the queues'
    order, until ``count`` jobs came back (later slots are called only for their acks)."""
    got: list[Delivery] = []
    dues: list[int] = []
    for part in parts:
        mine = [d for d in acks if d.queue in part.keys]
        want = max(0, count - len(got))
        if not want and not mine:
            continue
        fetched = part.fetch(
            consumer,
            want,
            mine,
            completions={d: c for d, c in (completions or {}).items() if d.queue in part.keys},
            fence_acks=fence_acks,
            trim=trim,
            dirty=[s for s in dirty if s in part.stream_position],
        )
        got += fetched.deliveries
        if not fetched.deliveries:  # next time, read all its streams in the first round trip
            part.reach_all()
        if fetched.due_in_ms >= 0:
            dues.append(fetched.due_in_ms)
    return Fetched(got, min(dues) if dues else -1)
