"""The asyncio connection to Redis, for producers in an event loop (FastAPI, Starlette).

:class:`AsyncLink` is :class:`~taskq.broker.link.Link` on ``redis.asyncio``: the same
client options, the same RESP2 replies, scripts loaded again on NOSCRIPT, and redis-py's
errors turned into taskq's. It sends what the steps of :mod:`taskq.broker.steps` yield, so
every exchange is written once for both links.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.sentinel

from taskq.broker.link import (
    CLIENT_OPTIONS,
    map_errors,
    missing_scripts,
    raise_as_broker_error,
)
from taskq.broker.links import MASTER_CHECK_S, WatchClock, client_from_url, connect
from taskq.broker.resp import Command, pack
from taskq.broker.topology import kind_of, parse_seeds
from taskq.config import redact


def connect_async(url: str) -> AsyncLink:
    """An asyncio link to ``url``; nothing is sent until the first command.

    Raises:
        ConfigError: the URL is not a Redis URL, or asks for RESP3.
    """
    kind = kind_of(url)
    if kind == "cluster":
        return AsyncClusterLink(url)
    if kind == "sentinel":
        client = _sentinel_client(url)
        return AsyncLink(client, url, watch=AsyncMasterWatch(client))
    return AsyncLink(client_from_url(redis.asyncio.Redis.from_url, url), url)


def _sentinel_client(url: str) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`~taskq.broker.link.sentinel_client`."""
    seeds = parse_seeds(url)
    sentinel_kwargs = {"socket_connect_timeout": 2, "socket_timeout": 2, "protocol": 2}
    sentinel_kwargs.update(seeds.sentinel_options)
    make: Any = redis.asyncio.sentinel.Sentinel  # (it is unannotated)
    sentinels = make(list(seeds.hosts), sentinel_kwargs=sentinel_kwargs)
    # The pool's connections take the master's address from the sentinels; a default one
    # that cannot connect keeps a connection opened any other way off localhost:6379.
    options = {**seeds.options, **CLIENT_OPTIONS, "host": "sentinel-master.invalid", "port": 1}
    return cast(redis.asyncio.Redis, sentinels.master_for(seeds.master_name, **options))


class AsyncMasterWatch(WatchClock):
    """:class:`~taskq.broker.links.MasterWatch` for an event loop: it asks the sentinels
    through the link's own asyncio Sentinel client (at most every ``interval_s``, only when
    the link sends), so the loop never waits on a socket and a plain link pays nothing."""

    def __init__(self, client: redis.asyncio.Redis, interval_s: float = MASTER_CHECK_S) -> None:
        super().__init__(client.connection_pool, interval_s)
        self._lock = asyncio.Lock()
        """One question at a time: the coroutines that find it due meanwhile wait for its
        answer rather than each asking the sentinels."""

    async def fence(self, conn: Any) -> bool:
        """Close ``conn`` if it is open to a server other than the master; True if closed."""
        if self._due():
            async with self._lock:
                if self._due():
                    self._told(await self._ask())
        if not self._astray(conn, conn.is_connected):
            return False
        await conn.disconnect()
        return True

    async def _ask(self) -> tuple[str, int] | None:
        try:
            host, port = await self._pool.get_master_address()
        except redis.RedisError:  # no sentinel answers
            return None
        return str(host), int(port)

    async def close(self) -> None:
        """Close the connections to the sentinels (the link's pool closes its own)."""
        for sentinel in self._pool.sentinel_manager.sentinels:
            await sentinel.aclose()


class AsyncLink:
    """A pool of asyncio connections to one Redis server, for one event loop.

    Args:
        client: the redis-py asyncio client whose pool is used.
        url: where it points, for error messages (its password is never shown).
        watch: checks every connection before each exchange (a Sentinel-watched master).
    """

    def __init__(
        self, client: redis.asyncio.Redis, url: str, *, watch: AsyncMasterWatch | None = None
    ) -> None:
        self._client = client
        self.url = redact(url)
        self._watch = watch
        self._spare: Any = None
        """The last exchange's connection, kept out of the pool for the next one, as
        :class:`~taskq.broker.link.Link` keeps one: ``await adelay()`` one at a time then
        skips the pool's lock and accounting (about 6.7 of its 7.7 µs)."""

    def __repr__(self) -> str:
        return f"<AsyncLink {self.url}>"

    async def pipeline(self, commands: Sequence[Command], *, errors: bool = True) -> list[Any]:
        """Send ``commands`` in one write and return their replies (see ``Link.pipeline``)."""
        replies = await self._send(commands)
        missing, loads = missing_scripts(commands, replies)
        if missing:
            await self._send(loads)
            again = await self._send([commands[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return map_errors(replies, self.url, errors)

    async def close(self) -> None:
        """Close every connection of the pool."""
        self._spare = None  # (the pool closes it with the others)
        await self._client.aclose()
        if self._watch is not None:
            await self._watch.close()

    async def _take(self) -> Any:
        """The spare connection, checked as the pool checks its own, or one of the pool's;
        either checked by the fence."""
        pool = self._client.connection_pool
        conn, self._spare = self._spare, None
        try:
            if conn is None:
                conn = await pool.get_connection()  # type: ignore[no-untyped-call]
            else:  # closed by the server meanwhile?
                await pool.ensure_connection(conn)
            if self._watch is not None and await self._watch.fence(conn):
                await pool.ensure_connection(conn)  # (opens it on the master named now)
        except BaseException as exc:
            if conn is not None:
                await pool.release(conn)
            if isinstance(exc, redis.RedisError):
                raise_as_broker_error(exc, self.url)
            raise
        return conn

    async def _send(self, commands: Sequence[Command]) -> list[Any]:
        pool = self._client.connection_pool
        conn = await self._take()
        try:
            await conn.send_packed_command(pack(conn, commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except redis.ResponseError as exc:  # read whole: still in step
                    replies.append(exc)
            return replies
        except BaseException as exc:  # cut off mid-exchange (a cancel too): out of step
            await conn.disconnect()
            if isinstance(exc, redis.RedisError):
                raise_as_broker_error(exc, self.url)
            raise
        finally:
            if self._spare is None:
                self._spare = conn
            else:
                await pool.release(conn)


class AsyncClusterLink(AsyncLink):
    """:class:`AsyncLink` on a Redis Cluster: the blocking cluster link's routing, run in a
    worker thread so that the event loop never waits on a socket."""

    def __init__(self, url: str) -> None:  # (no asyncio client: the sync link routes)
        self._sync = connect(url)
        self.url = self._sync.url

    def __repr__(self) -> str:
        return f"<AsyncClusterLink {self.url}>"

    async def pipeline(self, commands: Sequence[Command], *, errors: bool = True) -> list[Any]:
        return await asyncio.to_thread(self._sync.pipeline, commands, errors=errors)

    async def close(self) -> None:
        await asyncio.to_thread(self._sync.close)
