"""Rate limits in Redis: the script that admits a job of a rate-limited task or defers it to
its slot (``limit.lua``)."""

from __future__ import annotations

from taskq.broker.delivery import Delivery
from taskq.broker.link import Link
from taskq.broker.replies import as_int
from taskq.keys import GROUP, PRIORITIES, QueueKeys

ADMITTED, DEFERRED, LOST = 1, 2, 0


def admit(
    link: Link,
    d: Delivery,
    *,
    owner: str,
    limit_key: str,
    starts: int,
    window_ms: int,
    slot: str,
    task: str,
    body: bytes,
    record_ttl_ms: int,
) -> int:
    """Take a start slot for a delivery, or move it to the schedule until its slot comes
    (``body``: the job's body as it goes there, its attempts unchanged). Returns
    :data:`ADMITTED`, :data:`DEFERRED` or :data:`LOST` (no longer pending under ``owner``)."""
    k = QueueKeys(d.queue)
    keys = [limit_key, d.stream, k.schedule, k.due]
    if d.record_id:
        keys.append(k.job(d.record_id))
    member = b"%d\n%s\n%s" % (PRIORITIES.index(d.priority), task.encode(), body)
    args = [GROUP, d.entry_id, owner, starts, window_ms, slot, member, record_ttl_ms]
    return as_int(link.script("limit", keys, args))


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
