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
import hashlib
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any, NamedTuple

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from taskq.errors import BrokerError
from taskq.keys import GROUP, PRIORITIES, RETRY_CONSUMER, QueueKeys, stream_key
from taskq.message import Message, now_ms

KEYS_PER_QUEUE = 9
"""Keys ``fetch.lua`` takes per queue (see the script's header)."""
PROLOGUES = ("_fence", "_now")
"""Helper functions every script starts with: the ownership fence and the Redis clock."""
SWEEP_BUDGET = 1000
"""Entries one sweep script call may recover; the sweep calls it again while it is used up."""


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


@functools.cache
def _lua(name: str) -> str:
    folder = resources.files("taskq.lua")
    prologue = "".join(folder.joinpath(f"{p}.lua").read_text() for p in PROLOGUES)
    return prologue + folder.joinpath(f"{name}.lua").read_text()


def connect(redis_url: str) -> redis.Redis:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs, credentials included."""
    try:
        # backslashreplace: a str that is not valid UTF-8 (a task's error message with lone
        # surrogates, from os.fsdecode) is stored readably instead of failing the write.
        return redis.Redis.from_url(
            redis_url,
            socket_connect_timeout=5,
            socket_timeout=30,
            socket_keepalive=True,
            encoding_errors="backslashreplace",
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
        self.stream_position = {s: i for i, s in enumerate(self.streams)}
        """Stream → its index in ``streams``: how the scoreboard names a stream."""
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
            except NoScriptError:
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
        [entry_id] = self._pipelined([_xadd_command(msg, body)])
        return str(entry_id.decode())

    def schedule(self, msg: Message, body: bytes, *, in_ms: int | None = None) -> None:
        """Park a delayed job in the queue's schedule: due ``in_ms`` from now by the Redis
        clock (a countdown), or at ``msg.eta_ms`` (an absolute eta)."""
        self._pipelined([self._schedule_command(msg, body, in_ms)])

    def publish_many(self, jobs: Iterable[tuple[Message, bytes]]) -> list[str | None]:
        """Enqueue many jobs in one round trip; those with a future ``eta_ms`` go to the
        schedule.

        Returns the entry ids (None for delayed jobs).
        """
        now = now_ms()
        commands = [
            self._schedule_command(msg, body, None)
            if msg.eta_ms is not None and msg.eta_ms > now
            else _xadd_command(msg, body)
            for msg, body in jobs
        ]
        replies = self._pipelined(commands)
        return [r.decode() if isinstance(r, bytes) else None for r in replies]

    def _schedule_command(self, msg: Message, body: bytes, in_ms: int | None) -> tuple[Any, ...]:
        member = b"%d\n%s\n%s" % (PRIORITIES.index(msg.priority), msg.task.encode(), body)
        at = "" if in_ms is not None else msg.eta_ms
        key = QueueKeys(msg.queue).schedule
        return ("EVALSHA", _sha("schedule"), 1, key, at, in_ms or 0, member)

    def _pipelined(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send commands in one write on a pooled connection and read every reply.

        Thread-safe like the pool; lighter than a redis-py pipeline, which matters on the
        producer's hot path. Scripts are sent as EVALSHA; those Redis does not know yet (a
        new or restarted server) are loaded and sent again, alone. Any other error reply
        raises once every reply has been read.
        """
        replies = self._send(commands)
        missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if missing:
            names = {_SCRIPT_OF_SHA[str(commands[i][1])] for i in missing}
            self._send([("SCRIPT", "LOAD", _lua(name)) for name in names])
            for i, reply in zip(missing, self._send([commands[i] for i in missing]), strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        return replies

    def _send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """One write, every reply read (an error reply is returned, not raised)."""
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:  # the reply was read whole: still in step
                    replies.append(exc)
            return replies
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
        argv: list[Any] = [GROUP, consumer, count, int(fence_acks), len(acks)]
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

    def next_due_in_ms(self) -> int | None:
        """How long until the earliest retry or delayed job of these queues is due (ms, by
        the Redis clock), if there is one."""
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for k in self.keys.values():
            for key in (*(k.retry(p) for p in PRIORITIES), k.schedule):
                pipe.zrange(key, 0, 0, withscores=True)
        (seconds, micros), *firsts = pipe.execute()
        due = [score for first in firsts for _member, score in first]
        now = int(seconds) * 1000 + int(micros) // 1000
        return max(0, int(min(due)) - now) if due else None

    def park(self, d: Delivery, *, owner: str, delay_ms: int) -> bool:
        """Leave a failed job pending, owned by the retry pseudo-consumer for ``delay_ms``."""
        k = self.keys[d.queue]
        keys = [d.stream, k.retry(d.priority), k.failures]
        args = [GROUP, d.entry_id, owner, RETRY_CONSUMER, delay_ms]
        return bool(self._script("park")(keys=keys, args=args))

    def dead_letter(self, d: Delivery, *, owner: str, fields: dict[str, Any]) -> str | None:
        """Move a pending job to the dead-letter stream (ack + delete at the source, atomically).

        ``owner`` fences the move: it happens only if the entry is still pending under that
        consumer ('' for any). Returns the dead entry id, or None if the entry was elsewhere.
        """
        k = self.keys[d.queue]
        keys = [d.stream, k.retry(d.priority), k.failures, k.deadletter]
        flat: list[Any] = [x for kv in fields.items() for x in kv]
        reply = self._script("dead_letter")(keys=keys, args=[GROUP, d.entry_id, owner, *flat])
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
                for row in self._pending_rows(stream, consumer):
                    eid = row["message_id"].decode()
                    entries = self.client.xrange(stream, eid, eid)
                    body = entries[0][1].get(b"body") if entries else None
                    out.append(Delivery(stream, q, p, eid, int(row["times_delivered"]), body))
        return out

    def _pending_rows(self, stream: str, consumer: str, page: int = 1000) -> list[Any]:
        """XPENDING rows of one consumer on one stream, every page of them."""
        rows: list[Any] = []
        start = "-"
        while True:
            try:
                got = self.client.xpending_range(stream, GROUP, start, "+", page, consumer)
            except redis.ResponseError:  # no stream or no group: nothing is pending
                return rows
            rows += got
            if len(got) < page:
                return rows
            start = "(" + got[-1]["message_id"].decode()

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

    def sweep(self, queue: str, *, min_idle_ms: int, max_calls: int = 10) -> int:
        """Recover entries idle past ``min_idle_ms`` in a queue; returns how many were recovered.

        Each script call recovers at most ``SWEEP_BUDGET`` entries of a stream, so Redis never
        stalls on a big pending list; a stream with more waits for the next interval after
        ``max_calls`` calls.
        """
        k = self.keys[queue]
        recovered = 0
        for p in PRIORITIES:
            keys = [k.stream(p), k.retry(p)]
            for _ in range(max_calls):
                n = int(
                    self._script("sweep")(
                        keys=keys, args=[GROUP, RETRY_CONSUMER, min_idle_ms, SWEEP_BUDGET]
                    )
                )
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
        streams = self.streams
        args = [GROUP, idle_ms, only, RETRY_CONSUMER, *keep]
        return int(self._script("forget_consumers")(keys=streams, args=args))

    def heartbeat(
        self, worker_id: str, record: dict[str, Any], *, ttl_ms: int, visibility_timeout_ms: int
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
        flat = [x for kv in record.items() for x in kv]
        args = [worker_id, ttl_ms, visibility_timeout_ms, *flat]
        conflict = self._script("heartbeat")(keys=keys, args=args)
        if not conflict:
            return None
        return self.queues[int(conflict[0]) - 1], int(conflict[1])

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


def _xadd_command(msg: Message, body: bytes) -> tuple[Any, ...]:
    return ("XADD", stream_key(msg.queue, msg.priority), "*", "task", msg.task, "body", body)


_SCRIPT_OF_SHA: dict[str, str] = {}


@functools.cache
def _sha(name: str) -> str:
    """The SHA1 Redis knows a script by (computed here: no round trip)."""
    sha = hashlib.sha1(_lua(name).encode()).hexdigest()
    _SCRIPT_OF_SHA[sha] = name
    return sha


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
