"""The moves operators start (``taskq purge``, ``taskq deadletter retry`` and ``purge``),
each one command or one script like every other move of a job."""

from __future__ import annotations

from collections.abc import Sequence

from taskq.broker.link import Link
from taskq.broker.replies import as_int, entries, text
from taskq.keys import GROUP, PRIORITIES, QueueKeys


class Operators:
    """Operator moves on one Redis server (any queue)."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def purge_deadletters(self, queue: str, *, older_than_ms: int | None = None) -> int:
        """Delete dead-letter entries (older than a time, or all); returns how many."""
        key = QueueKeys(queue).deadletter
        if older_than_ms is None:
            length, _ = self.link.pipeline([("XLEN", key), ("DEL", key)], transaction=True)
            return as_int(length)
        # Dead-letter ids are the time of death, so MINID drops exactly the older ones.
        return as_int(self.link.call("XTRIM", key, "MINID", f"{older_than_ms}-0"))

    def deadletter_retry(
        self,
        queue: str,
        dead_id: str,
        *,
        stream: str,
        task: str,
        body: bytes,
        job_id: str,
        record_ttl_ms: int | None = None,
        lock: tuple[str, int] | None = None,
    ) -> tuple[bool, str]:
        """Move one dead-lettered job back to a job stream of its queue, in one step.

        ``record_ttl_ms``, for a job that keeps a status record: it is waiting again, and its
        done list goes so that waiters block until the new end. ``lock`` (key, hold ms), for
        a unique job whose end releases its lock: it takes the lock again, and does not move
        while another job holds it. Returns whether it moved, and the holder of the lock if
        that is why it did not ("" otherwise: the dead entry is gone).
        """
        k = QueueKeys(queue)
        keys = [k.deadletter, stream]
        if record_ttl_ms is not None:
            keys += (k.job(job_id), k.done(job_id))
        if lock is not None:
            keys.append(lock[0])
        ttl = "" if record_ttl_ms is None else record_ttl_ms
        args = [dead_id, task, body, job_id, ttl, lock[1] if lock else ""]
        reply = self.link.script("deadletter_retry", keys, args)
        if isinstance(reply, list):  # ['held', holder id]
            return False, text(reply[1])
        return bool(reply), ""

    def purge_waiting(
        self,
        queue: str,
        priorities: Sequence[str] = PRIORITIES,
        *,
        include_pending: bool = False,
        batch: int = 1000,
    ) -> dict[str, tuple[int, int]]:
        """Delete the jobs of a queue that no worker has taken yet (``taskq purge``).

        Waiting entries (after the group's last-delivered-id) are XDEL'd; the group's cursor
        and pending list are left alone, so running and retrying jobs are untouched unless
        ``include_pending``, which acks and deletes those too. Only entries up to each
        stream's newest id at the start go, so jobs enqueued meanwhile survive, and each
        script call removes at most ``batch`` entries, so Redis never stalls on a big stream.
        Delayed (scheduled) and dead-lettered jobs are not touched.

        Returns:
            Per priority, (waiting jobs removed, pending jobs removed).
        """
        k = QueueKeys(queue)
        out: dict[str, tuple[int, int]] = {}
        for p in priorities:
            newest = entries(self.link.call("XREVRANGE", k.stream(p), "+", "-", "COUNT", 1))
            waiting = pending = 0
            done = not newest
            while not done:
                w, n, finished = self.link.script(
                    "purge", [k.stream(p)], [GROUP, newest[0][0], batch, int(include_pending)]
                )
                waiting, pending, done = waiting + int(w), pending + int(n), bool(finished)
            out[p] = (waiting, pending)
        return out
