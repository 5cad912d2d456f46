"""The Broker: every change of a job's place in Redis, each one command or one Lua script.

A move happens entirely or not at all: enqueue (XADD, or ``schedule.lua``), deliver + ack
(``fetch.lua``), retry (``park.lua``), crash recovery (``sweep.lua``), dead-letter
(``deadletter.lua``) and hand-back (``requeue.lua``).

Leases. A running job stays pending under its child's consumer. The worker's master renews the
idle time of every entry pending under its live children (``renew.lua``, XCLAIM JUSTID) every
third of the visibility timeout, from its own process, so a task that holds the GIL cannot
starve its lease. Only an entry whose whole worker died stays idle long enough for the sweep.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from taskq.broker.link import Command, Direct, Link, script_command
from taskq.broker.replies import as_int, entries, flat_pairs, pending_rows, text
from taskq.deadletter import Deadletter
from taskq.errors import BrokerRefused
from taskq.keys import GROUP, PRIORITIES, RETRY_CONSUMER, QueueKeys, stream_key
from taskq.message import Message, now_ms

SWEEP_BUDGET = 1000
"""Entries one sweep script call may recover; the sweep calls it again while it is used up."""
PAGE = 1000
"""Pending entries read per XPENDING call."""


class Delivery(NamedTuple):
    """One stream entry handed to a consumer: where it lives and its raw body."""

    stream: str
    queue: str
    priority: str
    entry_id: str
    deliveries: int
    body: bytes | None


class Fetched(NamedTuple):
    """What one fetch returned: deliveries, or how long until the next delayed job or retry
    is due (ms by the Redis clock; -1 if none)."""

    deliveries: list[Delivery]
    next_due_in_ms: int


def _fetch_keys(k: QueueKeys) -> list[str]:
    """The keys ``fetch.lua`` takes for one queue, in the order its header gives."""
    return [*k.streams, *(k.retry(p) for p in PRIORITIES), k.schedule, k.failures, k.deadletter]


KEYS_PER_QUEUE = len(_fetch_keys(QueueKeys("q")))
"""Passed to ``fetch.lua``, so the script and this module cannot disagree about it."""


class Broker:
    """Job storage for a set of queues on one Redis server.

    Args:
        link: the connection pool (shared, thread-safe).
        queues: the queues this broker serves, in the order a worker reads them.
    """

    def __init__(self, link: Link, queues: Sequence[str]) -> None:
        self.link = link
        self.queues = tuple(queues)
        self.keys = {q: QueueKeys(q) for q in self.queues}
        self._fetch_keys: list[str] = []
        self._index: dict[str, int] = {}
        self._failures_index: dict[str, int] = {}
        self._where: dict[int, tuple[str, str, str]] = {}
        for q in self.queues:
            k = self.keys[q]
            base = len(self._fetch_keys)
            for i, p in enumerate(PRIORITIES):
                self._index[k.stream(p)] = base + i + 1  # Lua's KEYS are 1-based
                self._failures_index[k.stream(p)] = base + 8
                self._where[base + i + 1] = (k.stream(p), q, p)
            self._fetch_keys += _fetch_keys(k)
        self.streams = [s for k in self.keys.values() for s in k.streams]
        self.stream_position = {s: i for i, s in enumerate(self.streams)}
        """Stream → its index in ``streams``: how the scoreboard names a stream."""
        self._direct: Direct | None = None

    @property
    def direct(self) -> Direct:
        """This broker's own connection, for the single-threaded consumer loop."""
        if self._direct is None:
            self._direct = self.link.direct()
        return self._direct

    def disconnect(self) -> None:
        """Drop this broker's connections (e.g. after a read was cut off mid-reply)."""
        if self._direct is not None:
            self._direct.disconnect()
        self.link.disconnect()

    # -- producer side -------------------------------------------------------------------

    def publish(self, msg: Message, body: bytes) -> str:
        """XADD one job to its priority stream; returns the entry id."""
        return text(self.link.call(*_xadd_command(msg, body)))

    def schedule(self, msg: Message, body: bytes, *, in_ms: int | None = None) -> None:
        """Park a delayed job in the queue's schedule: due ``in_ms`` from now by the Redis
        clock (a countdown), or at ``msg.eta_ms`` (an absolute eta)."""
        self.link.call(*_schedule_command(msg, body, in_ms))

    def publish_many(self, jobs: Iterable[tuple[Message, bytes]]) -> list[str | None]:
        """Enqueue many jobs in one round trip; those with a future ``eta_ms`` go to the
        schedule.

        Returns the entry ids (None for delayed jobs).
        """
        now = now_ms()
        commands = [
            _schedule_command(msg, body, None)
            if msg.eta_ms is not None and msg.eta_ms > now
            else _xadd_command(msg, body)
            for msg, body in jobs
        ]
        replies = self.link.pipeline(commands)
        return [r.decode() if isinstance(r, bytes) else None for r in replies]

    # -- consumer side -------------------------------------------------------------------

    def ensure_groups(self) -> None:
        """Create the consumer group on every stream (idempotent: BUSYGROUP is ignored)."""
        commands = [("XGROUP", "CREATE", s, GROUP, "0", "MKSTREAM") for s in self.streams]
        for reply in self.link.pipeline(commands, errors=False):
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply

    def fetch(
        self,
        consumer: str,
        count: int,
        acks: Sequence[tuple[Delivery, bool]] = (),
        *,
        fence_acks: bool = True,
    ) -> Fetched:
        """Ack finished jobs and take up to ``count`` new ones, in one script call.

        Args:
            consumer: the caller's consumer name.
            count: how many jobs to take (0: only ack).
            acks: finished deliveries, each with whether it ever failed (its failure record
                must then be cleared).
            fence_acks: ack only entries still pending under ``consumer``. The caller may skip
                this for jobs it fetched less than half a visibility timeout ago.
        """
        argv: list[Any] = [GROUP, consumer, count, int(fence_acks), KEYS_PER_QUEUE, len(acks)]
        for d, failed_before in acks:
            failures = self._failures_index[d.stream] if failed_before else 0
            argv += (self._index[d.stream], d.entry_id, failures)
        reply = self.direct.script("fetch", self._fetch_keys, argv)
        return Fetched(self._deliveries(reply), int(reply[0]))

    def _deliveries(self, flat: list[Any]) -> list[Delivery]:
        out = []
        for i in range(1, len(flat), 4):
            stream, queue, priority = self._where[int(flat[i])]
            fields = flat_pairs(flat[i + 3])
            out.append(
                Delivery(
                    stream,
                    queue,
                    priority,
                    text(flat[i + 1]),
                    int(flat[i + 2]),
                    fields.get(b"body"),
                )
            )
        return out

    def read_blocking(self, consumer: str, count: int, block_ms: int) -> list[Delivery]:
        """Wait up to ``block_ms`` for new entries on any stream (used only when all are empty).

        Entries that arrive on several streams during the same wait come back together (up to
        ``count`` from each: XREADGROUP's COUNT is per stream), in priority order.
        """
        streams = self.streams
        args: list[Any] = ["GROUP", GROUP, consumer, "COUNT", count, "BLOCK", max(1, block_ms)]
        args += ["STREAMS", *streams, *([">"] * len(streams))]
        try:
            reply = self.direct.call("XREADGROUP", *args)
        except BrokerRefused as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_groups()
            return []
        out = []
        for stream_raw, rows in reply or ():
            stream = text(stream_raw)
            _, queue, priority = self._where[self._index[stream]]
            out += [
                Delivery(stream, queue, priority, eid, 1, fields.get(b"body"))
                for eid, fields in entries(rows)
            ]
        out.sort(key=lambda d: self._index[d.stream])
        return out

    def next_due_in_ms(self) -> int | None:
        """How long until the earliest retry or delayed job of these queues is due (ms, by
        the Redis clock), if there is one."""
        commands: list[Command] = [("TIME",)]
        for k in self.keys.values():
            for key in (*(k.retry(p) for p in PRIORITIES), k.schedule):
                commands.append(("ZRANGE", key, 0, 0, "WITHSCORES"))
        (seconds, micros), *firsts = self.link.pipeline(commands)
        due = [float(first[1]) for first in firsts if first]
        now = int(seconds) * 1000 + int(micros) // 1000
        return max(0, int(min(due)) - now) if due else None

    # -- moves of one pending entry (fenced on its owner) -----------------------------------

    def park(self, d: Delivery, *, owner: str, delay_ms: int) -> bool:
        """Leave a failed job pending, owned by the retry pseudo-consumer for ``delay_ms``."""
        k = self.keys[d.queue]
        keys = [d.stream, k.retry(d.priority), k.failures]
        args = [GROUP, d.entry_id, owner, RETRY_CONSUMER, delay_ms]
        return bool(self.link.script("park", keys, args))

    def deadletter(self, d: Delivery, *, owner: str, entry: Deadletter) -> str | None:
        """Move a pending job to the dead-letter stream (ack + delete at the source, atomically).

        ``owner`` fences the move: it happens only if the entry is still pending under that
        consumer. Returns the dead entry id, or None if the entry was elsewhere.
        """
        k = self.keys[d.queue]
        keys = [d.stream, k.retry(d.priority), k.failures, k.deadletter]
        reply = self.link.script("deadletter", keys, [GROUP, d.entry_id, owner, *entry.to_fields()])
        return reply.decode() if isinstance(reply, bytes) else None

    def requeue(self, d: Delivery, *, task: str, body: bytes, owner: str) -> str | None:
        """Replace a pending entry with a fresh one at the end of the same stream (hand-back)."""
        keys = [d.stream, self.keys[d.queue].failures]
        reply = self.link.script("requeue", keys, [GROUP, d.entry_id, owner, task, body])
        return reply.decode() if isinstance(reply, bytes) else None

    def pending_of(self, consumer: str) -> list[Delivery]:
        """Every entry pending under ``consumer``, with its body if the entry still exists."""
        found: list[tuple[str, str, str, str, int]] = []
        for q, k in self.keys.items():
            for p, stream in zip(PRIORITIES, k.streams, strict=True):
                for eid, _owner, _idle, deliveries in self._pending_rows(stream, consumer):
                    found.append((stream, q, p, eid, deliveries))
        if not found:
            return []
        bodies = self.link.pipeline([("XRANGE", f[0], f[3], f[3]) for f in found])
        out = []
        for (stream, q, p, eid, deliveries), rows in zip(found, bodies, strict=True):
            row = entries(rows)
            out.append(
                Delivery(stream, q, p, eid, deliveries, row[0][1].get(b"body") if row else None)
            )
        return out

    def _pending_rows(self, stream: str, consumer: str) -> list[tuple[str, str, int, int]]:
        """XPENDING rows of one consumer on one stream, every page of them."""
        rows: list[tuple[str, str, int, int]] = []
        start = "-"
        while True:
            try:
                got = pending_rows(
                    self.link.call("XPENDING", stream, GROUP, start, "+", PAGE, consumer)
                )
            except BrokerRefused:  # no stream or no group: nothing is pending
                return rows
            rows += got
            if len(got) < PAGE:
                return rows
            start = "(" + got[-1][0]

    # -- maintenance (run by worker masters) ---------------------------------------------

    def renew(self, consumers: Sequence[str]) -> int:
        """Reset the idle time of every entry pending under ``consumers`` (their leases)."""
        if not consumers:
            return 0
        return as_int(self.link.script("renew", self.streams, [GROUP, *consumers]))

    def try_lead_sweep(self, queue: str, worker_id: str, lease_ms: int) -> bool:
        """Take this interval's fleet-wide sweep lease; it expires by itself (no stale lock)."""
        reply = self.link.call("SET", self.keys[queue].sweeper, worker_id, "NX", "PX", lease_ms)
        return reply is not None

    def sweep(self, queue: str, *, min_idle_ms: int, max_calls: int = 10) -> int:
        """Recover entries idle past ``min_idle_ms`` in a queue; returns how many were recovered.

        Each script call recovers at most ``SWEEP_BUDGET`` entries of a stream, so Redis never
        stalls on a big pending list; a stream with more waits for the next interval after
        ``max_calls`` calls.
        """
        k = self.keys[queue]
        recovered = 0
        for p in PRIORITIES:
            for _ in range(max_calls):
                args = [GROUP, RETRY_CONSUMER, min_idle_ms, SWEEP_BUDGET]
                n = as_int(self.link.script("sweep", [k.stream(p), k.retry(p)], args))
                recovered += n
                if n < SWEEP_BUDGET:
                    break
        return recovered

    def forget_consumers(self, *, idle_ms: int, keep: Sequence[str] = ()) -> int:
        """Delete consumers with nothing pending that have been idle for ``idle_ms``."""
        return self._forget(idle_ms=idle_ms, only="", keep=keep)

    def forget_consumer(self, consumer: str) -> int:
        """Delete one consumer from every stream where it has nothing pending."""
        return self._forget(idle_ms=0, only=consumer, keep=())

    def _forget(self, *, idle_ms: int, only: str, keep: Sequence[str]) -> int:
        args = [GROUP, idle_ms, only, RETRY_CONSUMER, *keep]
        return as_int(self.link.script("forget_consumers", self.streams, args))

    def heartbeat(
        self, worker_id: str, fields: dict[str, Any], *, ttl_ms: int, visibility_timeout_ms: int
    ) -> tuple[str, int] | None:
        """Write a worker's registry record (``heartbeat_ms`` is the Redis clock's); it
        expires unless refreshed within ``ttl_ms``.

        Also claims ``visibility_timeout_ms`` as the setting of each queue, which every live
        worker of a queue must share. Returns the first queue whose live workers use another
        value, with that value, or None.
        """
        keys = [
            key
            for k in self.keys.values()
            for key in (k.worker(worker_id), k.workers, k.visibility)
        ]
        flat = [x for kv in fields.items() for x in kv]
        args = [worker_id, ttl_ms, visibility_timeout_ms, *flat]
        conflict = self.link.script("heartbeat", keys, args)
        if not conflict:
            return None
        return self.queues[int(conflict[0]) - 1], int(conflict[1])

    def unregister(self, worker_id: str) -> None:
        commands: list[Command] = []
        for k in self.keys.values():
            commands += [("DEL", k.worker(worker_id)), ("ZREM", k.workers, worker_id)]
        self.link.pipeline(commands, transaction=True)

    # -- operators -----------------------------------------------------------------------

    def purge_deadletters(self, queue: str, *, older_than_ms: int | None = None) -> int:
        """Delete dead-letter entries (older than a time, or all); returns how many."""
        key = QueueKeys(queue).deadletter
        if older_than_ms is None:
            length, _ = self.link.pipeline([("XLEN", key), ("DEL", key)], transaction=True)
            return as_int(length)
        # Dead-letter ids are the time of death, so MINID drops exactly the older ones.
        return as_int(self.link.call("XTRIM", key, "MINID", f"{older_than_ms}-0"))

    def deadletter_retry(
        self, queue: str, dead_id: str, *, stream: str, task: str, body: bytes
    ) -> bool:
        """Move one dead-lettered job back to a job stream of its queue, in one step."""
        keys = [QueueKeys(queue).deadletter, stream]
        return bool(self.link.script("deadletter_retry", keys, [dead_id, task, body]))

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
                    "purge",
                    [k.stream(p), k.retry(p), k.failures],
                    [GROUP, newest[0][0], batch, int(include_pending)],
                )
                waiting, pending, done = waiting + int(w), pending + int(n), bool(finished)
            out[p] = (waiting, pending)
        return out


def _xadd_command(msg: Message, body: bytes) -> Command:
    return ("XADD", stream_key(msg.queue, msg.priority), "*", "task", msg.task, "body", body)


def _schedule_command(msg: Message, body: bytes, in_ms: int | None) -> Command:
    member = b"%d\n%s\n%s" % (PRIORITIES.index(msg.priority), msg.task.encode(), body)
    at = "" if in_ms is not None else msg.eta_ms
    return script_command("schedule", [QueueKeys(msg.queue).schedule], [at, in_ms or 0, member])
