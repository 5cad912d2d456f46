"""Redis Streams I/O: the only module that writes to Redis.

Every change of a job's place is one command or one Lua script, so it happens entirely or not
at all: enqueue (XADD, or ZADD into the schedule), deliver + ack (``fetch.lua``), retry
(``park.lua``), crash recovery (``sweep.lua``), dead-letter (``dead_letter.lua``) and hand-back
(``requeue.lua``).

Leases. A running job stays pending under its child's consumer. The worker's master renews the
idle time of every entry pending under its live children (``renew.lua``, XCLAIM JUSTID) every
third of the visibility timeout, from its own process, so a task that holds the GIL cannot
starve its lease. Only an entry whose whole worker died stays idle long enough for the sweep.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any, NamedTuple

import redis
from redis.commands.core import Script

from taskq.errors import BrokerError
from taskq.keys import GROUP, PRIORITIES, RETRY_CONSUMER, QueueKeys, stream_key
from taskq.message import Message, now_ms

KEYS_PER_QUEUE = 9
"""Keys ``fetch.lua`` takes per queue (see the script's header)."""
FENCED = ("park", "dead_letter", "requeue")
"""Scripts that move one pending entry, and so start with the ownership fence."""


class Delivery(NamedTuple):
    """One stream entry handed to a consumer: where it lives and its raw body."""

    stream: str
    queue: str
    priority: str
    entry_id: str
    deliveries: int
    body: bytes | None


class Fetched(NamedTuple):
    """What one fetch returned: deliveries, or when the next delayed job or retry is due."""

    deliveries: list[Delivery]
    next_due_ms: int


@functools.cache
def _lua(name: str) -> str:
    folder = resources.files("taskq.lua")
    text = folder.joinpath(f"{name}.lua").read_text()
    return folder.joinpath("_fence.lua").read_text() + text if name in FENCED else text


def connect(redis_url: str) -> redis.Redis:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs, credentials included."""
    try:
        return redis.Redis.from_url(
            redis_url, socket_connect_timeout=5, socket_timeout=30, socket_keepalive=True
        )
    except ValueError as exc:
        raise BrokerError(f"invalid Redis URL {redis_url!r}: {exc}") from None


class Broker:
    """Job storage for a set of queues on one Redis server."""

    def __init__(self, client: redis.Redis, queues: Sequence[str]) -> None:
        self.client = client
        self.queues = tuple(queues)
        self.keys = {q: QueueKeys(q) for q in self.queues}
        self._fetch_keys: list[str] = []
        self._index: dict[str, int] = {}
        self._where: dict[int, tuple[str, str, str]] = {}
        for q in self.queues:
            k = self.keys[q]
            block = [
                *k.streams,
                *(k.retry(p) for p in PRIORITIES),
                k.schedule,
                k.failures,
                k.deadletter,
            ]
            for i, p in enumerate(PRIORITIES):
                self._index[k.stream(p)] = len(self._fetch_keys) + i + 1
                self._where[len(self._fetch_keys) + i + 1] = (k.stream(p), q, p)
            self._fetch_keys += block
        self._scripts: dict[str, Script] = {}
        self._shas: dict[str, str] = {}
        self.streams = [s for k in self.keys.values() for s in k.streams]
        self._conn: Any = None

    def _direct(self, *args: Any) -> Any:
        """One command on this broker's own connection, skipping the pool (hot path).

        Only for the single-threaded consumer loop; everything else goes through the pool.
        """
        conn = self._conn
        if conn is None:
            conn = self._conn = self.client.connection_pool.make_connection()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            raise

    def _evalsha(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a script on the direct connection, loading it again after a Redis restart."""
        sha = self._shas.get(name)
        if sha is not None:
            try:
                return self._direct("EVALSHA", sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                pass
        sha = self._shas[name] = self._direct("SCRIPT", "LOAD", _lua(name)).decode()
        return self._direct("EVALSHA", sha, len(keys), *keys, *args)

    def disconnect(self) -> None:
        """Drop this broker's connections (e.g. after a read was cut off mid-reply)."""
        if self._conn is not None:
            self._conn.disconnect()
        self.client.connection_pool.disconnect()

    def _script(self, name: str) -> Script:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(_lua(name))
        return script

    # -- producer side -------------------------------------------------------------------

    def publish(self, msg: Message, body: bytes) -> str:
        """XADD one job to its priority stream; returns the entry id."""
        [entry_id] = self._pipelined([_enqueue_command(msg, body)])
        return str(entry_id.decode())

    def schedule(self, msg: Message, body: bytes) -> None:
        """Park a delayed job in the queue's schedule until ``msg.eta_ms``."""
        self._pipelined([_enqueue_command(msg, body)])

    def publish_many(self, jobs: Iterable[tuple[Message, bytes]]) -> list[str | None]:
        """Enqueue many jobs in one round trip; delayed ones go to the schedule.

        Returns the entry ids (None for delayed jobs).
        """
        replies = self._pipelined([_enqueue_command(msg, body) for msg, body in jobs])
        return [r.decode() if isinstance(r, bytes) else None for r in replies]

    def _pipelined(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send commands in one write on a pooled connection and read every reply.

        Thread-safe like the pool; lighter than a redis-py pipeline, which matters on the
        producer's hot path. A reply that is an error raises after the connection is dropped.
        """
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            return [conn.read_response() for _ in commands]
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    # -- consumer side -------------------------------------------------------------------

    def ensure_groups(self) -> None:
        """Create the consumer group on every stream (idempotent: BUSYGROUP is ignored)."""
        for k in self.keys.values():
            for stream in k.streams:
                try:
                    self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
                except redis.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

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
        argv: list[Any] = [GROUP, consumer, count, now_ms(), int(fence_acks), len(acks)]
        for d, failed_before in acks:
            index = self._index[d.stream]
            failures = (index - 1) // KEYS_PER_QUEUE * KEYS_PER_QUEUE + 8
            argv += (index, d.entry_id, failures if failed_before else 0)
        reply = self._evalsha("fetch", self._fetch_keys, argv)
        return Fetched(self._deliveries(reply, 1), int(reply[0]))

    def _deliveries(self, flat: list[Any], start: int) -> list[Delivery]:
        out = []
        for i in range(start, len(flat), 4):
            stream, queue, priority = self._where[int(flat[i])]
            entry_id = flat[i + 1].decode()
            out.append(
                Delivery(stream, queue, priority, entry_id, int(flat[i + 2]), _body(flat[i + 3]))
            )
        return out

    def read_blocking(self, consumer: str, count: int, block_ms: int) -> list[Delivery]:
        """Wait up to ``block_ms`` for new entries on any stream (used only when all are empty).

        Entries that arrive on several streams during the same wait come back together; the
        caller runs them in priority order.
        """
        streams = self.streams
        args: list[Any] = ["GROUP", GROUP, consumer, "COUNT", count, "BLOCK", max(1, block_ms)]
        args += ["STREAMS", *streams, *([">"] * len(streams))]
        try:
            reply = self._direct("XREADGROUP", *args)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_groups()
            return []
        out = []
        for stream, entries in _stream_items(reply):
            _, queue, priority = self._where[self._index[stream]]
            out += [
                Delivery(stream, queue, priority, eid.decode(), 1, _body(f)) for eid, f in entries
            ]
        out.sort(key=lambda d: self._index[d.stream])
        return out

    def next_due_ms(self) -> int | None:
        """When the earliest retry or delayed job of these queues is due (ms), if any."""
        pipe = self.client.pipeline(transaction=False)
        for k in self.keys.values():
            for key in (*(k.retry(p) for p in PRIORITIES), k.schedule):
                pipe.zrange(key, 0, 0, withscores=True)
        due = [score for first in pipe.execute() for _member, score in first]
        return int(min(due)) if due else None

    def park(self, d: Delivery, *, owner: str, due_ms: int) -> bool:
        """Leave a failed job pending, owned by the retry pseudo-consumer until ``due_ms``."""
        k = self.keys[d.queue]
        keys = [d.stream, k.retry(d.priority), k.failures]
        args = [GROUP, d.entry_id, owner, RETRY_CONSUMER, due_ms, now_ms()]
        return bool(self._script("park")(keys=keys, args=args))

    def dead_letter(self, d: Delivery, *, owner: str, fields: dict[str, Any]) -> str | None:
        """Move a pending job to the dead-letter stream (ack + delete at the source, atomically).

        ``owner`` fences the move: it happens only if the entry is still pending under that
        consumer ('' for any). Returns the dead entry id, or None if the entry was elsewhere.
        """
        k = self.keys[d.queue]
        keys = [d.stream, k.retry(d.priority), k.failures, k.deadletter]
        flat: list[Any] = [x for kv in fields.items() for x in kv]
        reply = self._script("dead_letter")(
            keys=keys, args=[GROUP, d.entry_id, owner, now_ms(), *flat]
        )
        return reply.decode() if isinstance(reply, bytes) else None

    def requeue(self, d: Delivery, *, task: str, body: bytes, owner: str) -> str | None:
        """Replace a pending entry with a fresh one at the end of the same stream (hand-back)."""
        keys = [d.stream, self.keys[d.queue].failures]
        reply = self._script("requeue")(keys=keys, args=[GROUP, d.entry_id, owner, task, body])
        return reply.decode() if isinstance(reply, bytes) else None

    def pending_of(self, consumer: str) -> list[Delivery]:
        """Every entry pending under ``consumer``, with its body if the entry still exists."""
        out = []
        for q, k in self.keys.items():
            for p, stream in zip(PRIORITIES, k.streams, strict=True):
                try:
                    rows = self.client.xpending_range(stream, GROUP, "-", "+", 1000, consumer)
                except redis.ResponseError:
                    continue
                for row in rows:
                    eid = row["message_id"].decode()
                    entries = self.client.xrange(stream, eid, eid)
                    body = entries[0][1].get(b"body") if entries else None
                    out.append(Delivery(stream, q, p, eid, int(row["times_delivered"]), body))
        return out

    # -- maintenance (run by worker masters) ---------------------------------------------

    def renew(self, consumers: Sequence[str]) -> int:
        """Reset the idle time of every entry pending under ``consumers`` (their leases)."""
        if not consumers:
            return 0
        streams = self.streams
        return int(self._script("renew")(keys=streams, args=[GROUP, *consumers]))

    def try_lead_sweep(self, queue: str, worker_id: str, lease_ms: int) -> bool:
        """Take this interval's fleet-wide sweep lease; it expires by itself (no stale lock)."""
        return bool(self.client.set(self.keys[queue].sweeper, worker_id, nx=True, px=lease_ms))

    def sweep(
        self, queue: str, *, min_idle_ms: int, batch: int = 100, max_batches: int = 10
    ) -> int:
        """Recover entries idle past ``min_idle_ms`` in a queue; returns how many were recovered."""
        k = self.keys[queue]
        recovered = 0
        for p in PRIORITIES:
            keys = [k.stream(p), k.retry(p), k.cursor(p)]
            for _ in range(max_batches):
                n, wrapped = self._script("sweep")(
                    keys=keys, args=[GROUP, RETRY_CONSUMER, min_idle_ms, batch, now_ms()]
                )
                recovered += int(n)
                if wrapped:
                    break
        return recovered

    def forget_consumers(self, *, idle_ms: int, keep: Sequence[str] = ()) -> int:
        """Delete consumers with nothing pending that have been idle for ``idle_ms``."""
        return self._forget(idle_ms=idle_ms, only="", keep=keep)

    def forget_consumer(self, consumer: str) -> int:
        """Delete one consumer from every stream where it has nothing pending."""
        return self._forget(idle_ms=0, only=consumer, keep=())

    def _forget(self, *, idle_ms: int, only: str, keep: Sequence[str]) -> int:
        streams = self.streams
        args = [GROUP, idle_ms, only, RETRY_CONSUMER, *keep]
        return int(self._script("forget_consumers")(keys=streams, args=args))

    def heartbeat(self, worker_id: str, record: dict[str, Any], *, ttl_ms: int) -> None:
        """Write a worker's registry record; it expires unless refreshed within ``ttl_ms``."""
        pipe = self.client.pipeline(transaction=True)
        for k in self.keys.values():
            pipe.delete(k.worker(worker_id))
            pipe.hset(k.worker(worker_id), mapping=record)
            pipe.pexpire(k.worker(worker_id), ttl_ms)
            pipe.zadd(k.workers, {worker_id: now_ms()})
            pipe.zremrangebyscore(k.workers, "-inf", now_ms() - ttl_ms)
        pipe.execute()

    def unregister(self, worker_id: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        for k in self.keys.values():
            pipe.delete(k.worker(worker_id))
            pipe.zrem(k.workers, worker_id)
        pipe.execute()

    def purge_dead(self, queue: str, *, older_than_ms: int | None = None) -> int:
        """Delete dead-letter entries (older than a time, or all); returns how many."""
        key = QueueKeys(queue).deadletter
        if older_than_ms is None:
            pipe = self.client.pipeline(transaction=True)
            pipe.xlen(key)
            pipe.delete(key)
            return int(pipe.execute()[0])
        # Dead-letter ids are the time of death, so MINID drops exactly the older ones.
        return int(self.client.xtrim(key, minid=f"{older_than_ms}-0", approximate=False))

    def dead_retry(self, queue: str, dead_id: str, *, stream: str, task: str, body: bytes) -> bool:
        """Move one dead-lettered job back to a job stream of its queue, in one step."""
        keys = [QueueKeys(queue).deadletter, stream]
        return bool(self._script("dead_retry")(keys=keys, args=[dead_id, task, body]))

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
            newest = self.client.xrevrange(k.stream(p), count=1)
            waiting = pending = 0
            done = not newest
            while not done:
                w, n, finished = self._script("purge")(
                    keys=[k.stream(p), k.retry(p), k.failures],
                    args=[GROUP, newest[0][0], batch, int(include_pending)],
                )
                waiting, pending, done = waiting + int(w), pending + int(n), bool(finished)
            out[p] = (waiting, pending)
        return out


def _enqueue_command(msg: Message, body: bytes) -> tuple[Any, ...]:
    """XADD to the job's stream, or ZADD to the schedule when it is due later."""
    if msg.eta_ms is not None and msg.eta_ms > now_ms():
        member = b"%d\n%s\n%s" % (PRIORITIES.index(msg.priority), msg.task.encode(), body)
        return ("ZADD", QueueKeys(msg.queue).schedule, msg.eta_ms, member)
    return ("XADD", stream_key(msg.queue, msg.priority), "*", "task", msg.task, "body", body)


def _body(fields: Any) -> bytes | None:
    if isinstance(fields, dict):
        value = fields.get(b"body")
        return value if isinstance(value, bytes) else None
    if isinstance(fields, list):
        for i in range(0, len(fields) - 1, 2):
            if fields[i] == b"body":
                return fields[i + 1] if isinstance(fields[i + 1], bytes) else None
    return None


def _stream_items(reply: Any) -> list[tuple[str, list[tuple[Any, Any]]]]:
    """XREADGROUP's reply as (stream, [(entry id, fields)]) pairs (RESP2 list or RESP3 map)."""
    out = []
    for stream, entries in reply.items() if isinstance(reply, dict) else reply or ():
        name = stream.decode() if isinstance(stream, bytes) else str(stream)
        out.append((name, [(e[0], e[1]) for e in entries]))
    return out
