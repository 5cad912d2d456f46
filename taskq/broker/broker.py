"""The Broker: every change of a job's place in Redis, each one command or one Lua script.

A move happens entirely or not at all: enqueue (XADD, or ``schedule.lua``), deliver + ack
(``fetch.lua``, the per-job path), retry (``park.lua``: out of the stream into a retry set),
promotion of due delayed jobs and retries (``promote.lua``, the masters' housekeeping), crash
recovery (XAUTOCLAIM by the sweep), dead-letter (``deadletter.lua``) and hand-back
(``requeue.lua``). Finished jobs leave their stream by trimming, not one XDEL each.

Leases. A running job stays pending under its child's consumer. The worker's master renews the
idle time of every entry pending under its live children (``renew.lua``, XCLAIM JUSTID) every
third of the visibility timeout, from its own process, so a task that holds the GIL cannot
starve its lease. Only an entry whose whole worker died stays idle long enough for the sweep.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from taskq.broker.delivery import Delivery, Fetched, delivery
from taskq.broker.enqueue import publish_command
from taskq.broker.fetcher import Fetcher
from taskq.broker.fetching import SlotFetcher, ensure_groups
from taskq.broker.link import Direct, Link, script_command
from taskq.broker.pending import autoclaim, pending_of
from taskq.broker.replies import as_int, entries, text
from taskq.keys import GROUP, PRIORITIES, RECOVER_CONSUMER, QueueKeys
from taskq.message import Message
from taskq.storing import Completion, FailedRun

PROMOTE_LIMIT = 500
"""Due members one housekeeping call moves per set (the rest follow on the next call)."""

if TYPE_CHECKING:
    from taskq.deadletter import Deadletter


def _housekeeping_keys(slot: SlotFetcher) -> list[str]:
    """The keys ``promote.lua`` takes for the queues of one slot, in the order its header
    gives (per queue)."""
    return [
        key
        for k in slot.keys.values()
        for key in (*k.streams, k.schedule, *(k.retry(p) for p in PRIORITIES), k.due, k.deadletter)
    ]


class Broker:
    """Job storage for a set of queues on one Redis server.

    Args:
        link: the connection pool (shared, thread-safe).
        queues: the queues this broker serves, in the order a worker reads them.
    """

    def __init__(
        self,
        link: Link,
        queues: Sequence[str],
        *,
        groups: Sequence[Sequence[str]] = (),
        fair: Collection[str] = (),
    ) -> None:
        self.link = link
        self.fetcher = Fetcher(link, queues, groups=groups, fair=fair)
        """The read side: every fetch and blocking read goes through it."""
        self.fair = frozenset(fair)
        """The fair queues (docs/fairness.md): their workers mark them so at start."""
        whole = self.fetcher.whole
        self.queues = whole.queues
        self.fair_queues = tuple(q for q in self.queues if q in self.fair)
        """The fair ones of ``queues``, in their order."""
        self.keys = whole.keys
        self.streams = whole.streams
        """The job streams, in the order a worker reads them."""
        self.stream_position = whole.stream_position
        """Stream → its index in ``streams``: how the scoreboard names a stream."""
        self._housekeeping = [(slot, _housekeeping_keys(slot)) for slot in self.fetcher.slots]
        """Per hash slot: its fetcher (whose connection runs ``promote.lua``) and the keys."""

    @property
    def direct(self) -> Direct:
        """This broker's own connection, for the single-threaded consumer loop."""
        return self.fetcher.whole.direct

    def disconnect(self) -> None:
        """Drop this broker's connections (e.g. after a read was cut off mid-reply)."""
        self.fetcher.whole.disconnect()
        self.link.disconnect()

    # -- producer side -------------------------------------------------------------------

    def publish(self, msg: Message, body: bytes) -> str:
        """XADD one job to its priority stream (with its status record, if it keeps one);
        returns the entry id."""
        return text(self.link.call(*publish_command(msg, body)))

    # -- consumer side -------------------------------------------------------------------

    def ensure_groups(self) -> None:
        """Create the consumer group on every stream (idempotent: BUSYGROUP is ignored)."""
        ensure_groups(self.link, self.streams)

    def fetch(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery] = (),
        *,
        completions: Mapping[Delivery, Completion] | None = None,
        fence_acks: bool = True,
        trim: bool = False,
        dirty: Sequence[str] = (),
    ) -> Fetched:
        """Ack finished jobs and take up to ``count`` new ones, in one round trip.

        Args:
            consumer: the caller's consumer name.
            count: how many jobs to take (0: only ack).
            acks: finished deliveries.
            completions: what some of them write with their acks: results for their status
                records, the next steps of their workflows.
            fence_acks: ack only entries still pending under ``consumer``. The caller may skip
                this for jobs it fetched less than half a visibility timeout ago.
            trim: delete the finished jobs at the head of the streams acked here and of the
                ``dirty`` ones (acked since the last trim); a call that finds nothing new
                does it anyway.

        Returns:
            The deliveries (possibly more than ``count``: up to ``count`` from each stream
            read; keep the first ``count``, in priority order, and hand the others back), and
            when the earliest delayed job or retry of these queues is due.
        """
        return self.fetcher.fetch(consumer, count, acks, completions, fence_acks, trim, dirty)

    def mark_running(self, jobs: Sequence[tuple[str, str, str, int]]) -> int:
        """Mark these records running (``start.lua``): (queue, job id, consumer, ms since
        the run started) each; only records still ``waiting`` change. The fetch leaves this
        to the masters, so a job costs no write when it is taken."""
        by_queue: dict[str, tuple[list[str], list[Any]]] = {}
        for queue, job_id, consumer, ms in jobs:  # one call per queue: one hash tag each
            keys, args = by_queue.setdefault(queue, ([], []))
            keys.append(QueueKeys(queue).job(job_id))
            args += [consumer, ms]
        calls = [script_command("start", keys, args) for keys, args in by_queue.values()]
        return sum(as_int(n) for n in self.link.pipeline(calls)) if calls else 0

    def read_blocking(self, consumer: str, count: int, block_ms: int) -> list[Delivery]:
        """Wait up to ``block_ms`` for new entries on any stream (used only when all are empty).

        Entries that arrive on several streams during the same wait come back together (up to
        ``count`` from each: XREADGROUP's COUNT is per stream), in priority order.
        """
        return self.fetcher.read_blocking(consumer, count, block_ms)

    def promote(self, *, force: bool = False) -> int:
        """Housekeeping: move due delayed jobs and retries of these queues into their streams.

        Cheap when nothing is due (one GET per queue) unless ``force``, which looks at the
        sets themselves (for members added without the due key, by a foreign producer).
        Returns ms until the next one is due by the Redis clock (-1: none).
        """
        args = [PROMOTE_LIMIT, int(force)]
        dues = [
            as_int(slot.direct.script("promote", keys, args), -1)
            for slot, keys in self._housekeeping
        ]
        return min((d for d in dues if d >= 0), default=-1)

    # -- moves of one pending entry (fenced on its owner) -----------------------------------

    def park(
        self,
        d: Delivery,
        *,
        owner: str,
        task: str,
        body: bytes,
        delay_ms: int,
        failed: FailedRun | None = None,
        ops: tuple[bytes, Sequence[str]] | None = None,
    ) -> bool:
        """Move a failed job out of its stream into its retry set for ``delay_ms``.

        ``body`` is the job's body with the attempts used so far (the caller patches it); the
        job comes back as a fresh entry when due. ``failed`` is recorded in the job's status
        record, for a job that keeps one; ``ops`` (msgpack, and their keys) run with the move
        (a concurrency slot's release).
        """
        k = self.keys[d.queue]
        member = b"%d\n%s\n%s" % (PRIORITIES.index(d.priority), task.encode(), body)
        keys = [d.stream, k.retry(d.priority), k.due]
        args = [GROUP, d.entry_id, owner, delay_ms, member, d.first_failure_ms or ""]
        args += (ops[0] if ops else "", int(failed is not None))
        if failed is not None:
            keys.append(k.job(failed.job_id))
            args += (failed.ttl_ms, failed.attempt, failed.error_type, failed.error)
            args.append(failed.traceback)
        keys += ops[1] if ops else ()
        return bool(self.link.script("park", keys, args))

    def snooze(
        self,
        d: Delivery,
        *,
        owner: str,
        task: str,
        body: bytes,
        delay_ms: int,
        record_ttl_ms: int | None = None,
        ops: tuple[bytes, Sequence[str]] | None = None,
    ) -> bool:
        """Move a snoozed job out of its stream into the schedule for ``delay_ms`` (Redis
        clock), like a delayed job: ``body`` keeps the attempts it used (a snooze spends
        none). With ``record_ttl_ms`` its record says ``snoozed`` with the due time;
        ``ops`` run with the move (a concurrency slot's release)."""
        k = self.keys[d.queue]
        member = b"%d\n%s\n%s" % (PRIORITIES.index(d.priority), task.encode(), body)
        keys = [d.stream, k.schedule, k.due]
        if d.record_id and record_ttl_ms is not None:
            keys.append(k.job(d.record_id))
        ttl = record_ttl_ms if len(keys) > 3 else ""
        args = [GROUP, d.entry_id, owner, delay_ms, member, ops[0] if ops else "", ttl]
        keys += ops[1] if ops else ()
        return bool(self.link.script("snooze", keys, args))

    def deadletter(
        self,
        d: Delivery,
        *,
        owner: str,
        entry: Deadletter,
        record_ttl_ms: int | None = None,
        ops: tuple[bytes, Sequence[str]] | None = None,
    ) -> str | None:
        """Move a pending job to the dead-letter stream (ack + delete at the source, atomically),
        with ``record_ttl_ms`` end its status record as failed, and run the workflow ``ops``
        (msgpack, and the keys they touch) its failure causes.

        ``owner`` fences the move: it happens only if the entry is still pending under that
        consumer. Returns the dead entry id, or None if the entry was elsewhere.
        """
        k = self.keys[d.queue]
        keys = [d.stream, k.deadletter]
        if d.record_id and record_ttl_ms is not None:
            keys += (k.job(d.record_id), k.done(d.record_id))
        ttl = record_ttl_ms if len(keys) > 2 else ""
        blob = b""
        if ops is not None:
            blob = ops[0]
            keys += ops[1]
        args = [GROUP, d.entry_id, owner, d.first_failure_ms or "", ttl, blob, *entry.to_fields()]
        reply = self.link.script("deadletter", keys, args)
        return reply.decode() if isinstance(reply, bytes) else None

    def drop(
        self,
        d: Delivery,
        *,
        owner: str,
        state: str,
        record_ttl_ms: int | None,
        ops: tuple[bytes, Sequence[str]] | None = None,
        unrecorded: tuple[str, int] | None = None,
    ) -> bool:
        """End a pending job that will not run (``state``: expired, or cancelled): ack and
        delete it, count it, end its record, run the workflow ``ops`` its end causes.
        ``unrecorded``: the id of a job without a record and how long (ms) its end is kept
        for its status (its cancellation tombstone goes)."""
        k = self.keys[d.queue]
        keys = [d.stream, k.counts]
        if d.record_id and record_ttl_ms is not None:
            keys += (k.job(d.record_id), k.done(d.record_id))
        ttl = record_ttl_ms if len(keys) > 2 else ""
        blob = ops[0] if ops else b""
        keys += ops[1] if ops else ()
        args = [GROUP, d.entry_id, owner, state, ttl, blob]
        if unrecorded is not None and ttl == "":
            args += unrecorded
        return as_int(self.link.script("drop", keys, args)) == 1

    def requeue(self, d: Delivery, *, task: str, body: bytes, owner: str) -> str | None:
        """Replace a pending entry with a fresh one at the end of the same stream (hand-back)."""
        keys = [d.stream]
        if d.record_id:
            keys.append(self.keys[d.queue].job(d.record_id))
        args = [GROUP, d.entry_id, owner, task, body, d.first_failure_ms or "", d.record_id or ""]
        reply = self.link.script("requeue", keys, args)
        return reply.decode() if isinstance(reply, bytes) else None

    def set_aside(self, d: Delivery, *, owner: str, task: str, pause_field: str) -> int:
        """Move a fetched job out of its stream into the set of the pause that covers it
        (``aside.lua``): 1, or 0 if that pause was resumed meanwhile (run the job), or -1
        if the entry is no longer pending under ``owner``."""
        k = self.keys[d.queue]
        member = b"%d\n%s\n%s" % (PRIORITIES.index(d.priority), task.encode(), d.body or b"")
        keys = [d.stream, k.aside(pause_field), k.counts]
        if d.record_id:
            keys.append(k.job(d.record_id))
        args = [GROUP, d.entry_id, owner, pause_field, member]
        return as_int(self.link.script("aside", keys, args))

    def pending_of(self, consumer: str) -> list[Delivery]:
        """Every entry pending under ``consumer``, with its body if the entry still exists."""
        return pending_of(self.link, self.keys, consumer)

    def deliveries_at(self, places: Sequence[tuple[int, str]]) -> list[Delivery]:
        """The entries at (stream index, entry id), with their bodies; gone ones are left out."""
        if not places:
            return []
        commands = [("XRANGE", self.streams[i], eid, eid) for i, eid in places]
        where, out = self.fetcher.whole.where, []
        for (i, _), rows in zip(places, self.link.pipeline(commands), strict=True):
            out += [delivery(where[i], eid, fields) for eid, fields in entries(rows)]
        return out

    # -- maintenance (run by worker masters) ---------------------------------------------

    def renew(self, consumers: Sequence[str]) -> int:
        """Reset the idle time of every entry pending under ``consumers`` (their leases)."""
        if not consumers:
            return 0
        args = [GROUP, *consumers]
        return sum(as_int(self.link.script("renew", s.streams, args)) for s in self.fetcher.slots)

    def try_lead_sweep(self, queue: str, worker_id: str, lease_ms: int) -> bool:
        """Take this interval's fleet-wide sweep lease; it expires by itself (no stale lock)."""
        reply = self.link.call("SET", self.keys[queue].sweeper, worker_id, "NX", "PX", lease_ms)
        return reply is not None

    def recover(self, queue: str, *, min_idle_ms: int, max_calls: int = 10) -> list[Delivery]:
        """Claim the entries of a queue idle past ``min_idle_ms`` (their worker died) for the
        recovering pseudo-consumer, and return them; the caller settles each one."""
        return autoclaim(self.link, queue, min_idle_ms=min_idle_ms, max_calls=max_calls)

    def tidy(self, queue: str, *, limit: int = 1000) -> int:
        """Delete finished jobs that linger in a queue's streams behind an older running job
        (and trim the heads). Returns how many entries went."""
        k = self.keys[queue]
        return sum(
            as_int(self.link.script("tidy", [k.stream(p)], [GROUP, limit])) for p in PRIORITIES
        )

    def forget_consumers(self, *, idle_ms: int, keep: Sequence[str] = ()) -> int:
        """Delete consumers with nothing pending that have been idle for ``idle_ms``."""
        return self._forget(idle_ms=idle_ms, only="", keep=keep)

    def forget_consumer(self, consumer: str) -> int:
        """Delete one consumer from every stream where it has nothing pending."""
        return self._forget(idle_ms=0, only=consumer, keep=())

    def _forget(self, *, idle_ms: int, only: str, keep: Sequence[str]) -> int:
        args = [GROUP, idle_ms, only, RECOVER_CONSUMER, *keep]
        return sum(
            as_int(self.link.script("forget_consumers", slot.streams, args))
            for slot in self.fetcher.slots
        )
