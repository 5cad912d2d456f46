"""Rate limits in Redis: the script that admits a job of a rate-limited task or defers it to
its slot (``limit.lua``)."""

from __future__ import annotations

from collections.abc import Sequence

from taskq.broker.delivery import Delivery
from taskq.broker.link import Link
from taskq.broker.replies import as_int
from taskq.keys import GROUP, PRIORITIES, QueueKeys

ADMITTED, DEFERRED, LOST = 1, 2, 0


def admit(
    link: Link,
    jobs: Sequence[tuple[Delivery, str, bytes]],
    *,
    task: str,
    owner: str,
    limit_key: str,
    starts: int,
    window_ms: int,
    record_ttl_ms: int,
) -> list[int]:
    """Take start slots for deliveries of one task, one limit and one stream, in their order,
    or move each that must wait to the schedule until its slot comes. ``jobs``: each
    delivery with its slot's member (job id and attempt) and its body as it goes there (its
    attempts unchanged). Returns a verdict per
    job: :data:`ADMITTED`, :data:`DEFERRED` or :data:`LOST` (no longer pending under
    ``owner``)."""
    d0 = jobs[0][0]
    k = QueueKeys(d0.queue)
    keys = [limit_key, d0.stream, k.schedule, k.due]
    args: list[object] = [GROUP, owner, starts, window_ms, record_ttl_ms]
    p = b"%d\n%s\n" % (PRIORITIES.index(d0.priority), task.encode())
    for d, slot, body in jobs:
        record_at = 0
        if d.record_id:
            keys.append(k.job(d.record_id))
            record_at = len(keys)
        args += (d.entry_id, slot, p + body, record_at)
    return [as_int(v) for v in link.script("limit", keys, args)]


def take_slot(
    link: Link,
    d: Delivery,
    *,
    owner: str,
    running: str,
    held: str,
    limit: int,
    member: str,
    task: str,
    body: bytes,
    worker_ttl_ms: int,
) -> int:
    """Take a running slot for a delivery, or move it out of its stream to wait for one
    (``body``: as it goes back, its attempts unchanged). Returns :data:`ADMITTED`,
    :data:`DEFERRED` or :data:`LOST`."""
    k = QueueKeys(d.queue)
    keys = [running, held, d.stream, k.workers]
    if d.record_id:
        keys.append(k.job(d.record_id))
    keys += k.streams
    waiting = b"%d\n%s\n%s" % (PRIORITIES.index(d.priority), task.encode(), body)
    args = [GROUP, d.entry_id, owner, limit, member, waiting, worker_ttl_ms, d.queue]
    args.append(int(bool(d.record_id)))
    return as_int(link.script("slot", keys, args))
