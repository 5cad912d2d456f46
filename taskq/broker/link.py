"""The connection to Redis: the one place that talks to redis-py.

Every command taskq sends goes through a :class:`Link` in one of three ways: ``call`` (one
command), ``pipeline`` (several commands in one write; ``transaction=True`` wraps them in
MULTI/EXEC) and ``script`` (a Lua script by its SHA1, loaded again when Redis does not know
it). Replies are Redis's own (RESP2: bytes, ints, lists), not redis-py's parsed forms, so the
broker's parsers see exactly what the server sent. redis-py's errors become taskq's here:
:class:`~taskq.errors.BrokerUnavailable` (wait and retry) or
:class:`~taskq.errors.BrokerRefused` (do not).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, cast

import redis
import redis.sentinel
from redis.exceptions import NoScriptError

from taskq.broker.resp import Command, Connection, pack, read_replies
from taskq.broker.scripts import script_sha, script_text
from taskq.config import redact
from taskq.errors import BrokerError, BrokerRefused, BrokerUnavailable

Fence = Callable[[Connection], bool]
"""Checks that a connection still reaches the server it must (the master the sentinels name
now); closes it and returns True if not, so that it is opened again before its next use."""


CLIENT_OPTIONS: dict[str, Any] = {
    "protocol": 2,  # the replies the parsers here read (redis-py 8 defaults to RESP3)
    "socket_connect_timeout": 5,
    "socket_timeout": 30,
    "socket_keepalive": True,
    # A str that is not valid UTF-8 (a task's error message with lone surrogates, from
    # os.fsdecode) is stored readably instead of failing the write.
    "encoding_errors": "backslashreplace",
    # redis-py's default of 100 would fail the 101st thread or coroutine that sends or waits
    # for a result at once; Redis's own maxclients (10,000 by default) is the real bound.
    "max_connections": 10_000,
}
"""redis-py client options of every link, blocking or asyncio."""


class Link:
    """A connection pool to one Redis server (thread-safe), and the way every command goes.

    Args:
        client: the redis-py client whose pool is used (its command methods are not).
        url: where it points, for error messages (its password is never shown).
        fence: checked on every connection before each exchange (a Sentinel-watched master:
            see :class:`~taskq.broker.links.MasterWatch`).
    """

    def __init__(self, client: redis.Redis, url: str, *, fence: Fence | None = None) -> None:
        self._client = client
        self.url = redact(url)
        self._fence = fence
        self._spare: list[Connection] = []
        """The last exchange's connection, kept out of the pool for the next one: a producer
        that sends one job at a time then skips the pool's lock and accounting (about 6.5 of
        the 8.7 µs a pooled exchange spends there). Threads that find it taken use the pool."""
        self._pid = os.getpid()
        """The process the spare belongs to (a forked child's copy must not share its socket)."""

    def __repr__(self) -> str:
        return f"<Link {self.url}>"

    cluster = False
    """Whether this is a Redis Cluster (keys are routed by hash slot)."""

    def slot_of(self, key: str) -> int:
        """The hash slot ``key`` lives in: 0 on one server, where every key is together."""
        return 0

    # -- the three ways ------------------------------------------------------------------

    def call(self, *args: Any) -> Any:
        """Send one command and return its reply."""
        return self.pipeline([args])[0]

    def pipeline(
        self, commands: Sequence[Command], *, transaction: bool = False, errors: bool = True
    ) -> list[Any]:
        """Send ``commands`` in one write and return their replies, in order.

        Scripts (EVALSHA) that Redis does not know yet (a new or restarted server) are loaded
        and sent again, alone. With ``transaction``, the commands run in MULTI/EXEC, so they
        see one moment of the data (no scripts there).

        Args:
            errors: raise if a reply is an error (once every reply has been read); with
                False, such a reply is returned in its place as a :class:`BrokerError`.

        Raises:
            BrokerRefused: a reply was an error.
            BrokerUnavailable: see the class.
        """
        if transaction:
            replies = self._send([("MULTI",), *commands, ("EXEC",)])
            for reply in replies:
                if isinstance(reply, redis.ResponseError):  # EXECABORT and the like
                    raise_as_broker_error(reply, self.url)
            replies = list(replies[-1])
            return map_errors(replies, self.url, errors)
        replies = load_missing_scripts(commands, self._send(commands), self._send)
        return map_errors(replies, self.url, errors)

    def script(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run one of taskq's Lua scripts."""
        return self.call(*script_command(name, keys, args))

    # -- for the consumer loop -----------------------------------------------------------

    def direct(self) -> Direct:
        """A connection of the caller's own, outside the pool (the consumer's hot path)."""
        conn = cast(Connection, self._client.connection_pool.make_connection())
        return Direct(conn, self.url, self._fence)

    # -- lifetime ------------------------------------------------------------------------

    def disconnect(self) -> None:
        """Close every pooled connection (they are opened again on demand)."""
        self._client.connection_pool.disconnect()

    def close(self) -> None:
        self._client.close()

    def _send(self, commands: Sequence[Command]) -> list[Any]:
        conn = self._take()
        try:
            return exchange(conn, commands, self.url)
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._put_back(conn)

    def _take(self) -> Connection:
        """The spare connection, checked as the pool checks its own, or one of the pool's;
        either checked by the fence."""
        pool = self._client.connection_pool
        try:
            conn = self._spare.pop() if self._spare and self._pid == os.getpid() else None
        except IndexError:  # (another thread took it meanwhile)
            conn = None
        if conn is None:
            try:
                conn = cast(Connection, pool.get_connection())
            except redis.RedisError as exc:
                raise_as_broker_error(exc, self.url)
        elif _stale(conn):  # closed by the server meanwhile (a restart, its timeout)
            conn.disconnect()
        try:
            if self._fence is not None:
                self._fence(conn)
            conn.connect()  # (a no-op when open)
        except BaseException as exc:
            pool.release(cast(Any, conn))
            if isinstance(exc, redis.RedisError):
                raise_as_broker_error(exc, self.url)
            raise
        return conn

    def _put_back(self, conn: Connection) -> None:
        if not self._spare and self._pid == os.getpid():
            self._spare.append(conn)  # (two threads at once may keep two: no matter)
        else:
            self._client.connection_pool.release(cast(Any, conn))


class Direct:
    """One connection owned by one single-threaded caller: no pool, no lock."""

    def __init__(self, conn: Connection, url: str, fence: Fence | None = None) -> None:
        self._conn = conn
        self.url = url
        self._fence = fence
        self._connected = False
        """Connected by ``connect()``, as a pool does (a Sentinel-managed connection asks the
        sentinels for the master's address there, not in the lazy connect of a send)."""

    def call(self, *args: Any) -> Any:
        """Send one command; an error reply raises :class:`~taskq.errors.BrokerError`."""
        [reply] = self._exchange([args])
        if isinstance(reply, redis.ResponseError):
            raise_as_broker_error(reply, self.url)
        return reply

    def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one write; an error reply comes back in its place as a
        :class:`BrokerError` (not raised), for the caller to judge. Scripts (EVALSHA) that
        Redis does not know yet are loaded and sent again, after the others."""
        replies = load_missing_scripts(commands, self._exchange(commands), self._exchange)
        return [
            as_broker_error(r, self.url) if isinstance(r, redis.ResponseError) else r
            for r in replies
        ]

    def script(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run a script, loading it again if Redis does not know it (after a restart)."""
        command = script_command(name, keys, args)
        [reply] = self._exchange([command])
        if isinstance(reply, NoScriptError):
            [_, reply] = self._exchange([("SCRIPT", "LOAD", script_text(name)), command])
        if isinstance(reply, redis.ResponseError):
            raise_as_broker_error(reply, self.url)
        return reply

    def disconnect(self) -> None:
        """Drop the connection (e.g. after a read was cut off mid-reply); it reconnects."""
        self._connected = False
        self._conn.disconnect()

    def _exchange(self, commands: Sequence[Command]) -> list[Any]:
        if self._connected and self._fence is not None and self._fence(self._conn):
            self._connected = False
            # An outage, not a silent reconnect: the consumer then asks the new master what
            # it holds (acks it sent the old one since the failover were lost there).
            raise BrokerUnavailable(f"the sentinels of {self.url} name another master now")
        try:
            if not self._connected:
                self._conn.connect()
                self._connected = True
            return exchange(self._conn, commands, self.url)
        except redis.RedisError as exc:
            self.disconnect()
            raise_as_broker_error(exc, self.url)
        except BaseException:
            self.disconnect()
            raise


_SCRIPTS: dict[str, str] = {}
"""SHA1 → text of every script a command was made for, to load it on NOSCRIPT."""


def script_command(name: str, keys: Sequence[Any], args: Sequence[Any]) -> Command:
    sha = script_sha(name)
    _SCRIPTS.setdefault(sha, script_text(name))
    return ("EVALSHA", sha, len(keys), *keys, *args)


def missing_scripts(
    commands: Sequence[Command], replies: Sequence[Any]
) -> tuple[list[int], list[Command]]:
    """The replies that say NOSCRIPT (a new or restarted server), and the SCRIPT LOADs that
    teach Redis their scripts before those commands are sent again."""
    missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
    if not missing:
        return missing, []
    shas = {str(commands[i][1]) for i in missing}
    return missing, [("SCRIPT", "LOAD", _SCRIPTS[sha]) for sha in shas]


def load_missing_scripts(
    commands: Sequence[Command],
    replies: list[Any],
    send: Callable[[Sequence[Command]], list[Any]],
) -> list[Any]:
    """``replies``, where those that said NOSCRIPT are replaced by the reply of their command
    sent again (through ``send``) once its script is loaded."""
    missing, loads = missing_scripts(commands, replies)
    if missing:
        send(loads)
        again = send([commands[i] for i in missing])
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies


def map_errors(replies: list[Any], url: str, errors: bool) -> list[Any]:
    """Error replies raised as :class:`BrokerError`, or (``errors=False``) put in place."""
    for i, reply in enumerate(replies):
        if isinstance(reply, redis.ResponseError):
            if errors:
                raise_as_broker_error(reply, url)
            replies[i] = as_broker_error(reply, url)
    return replies


def exchange(conn: Connection, commands: Sequence[Command], url: str) -> list[Any]:
    """One write of every command, then every reply (an error reply is returned, not raised).

    Raises:
        BrokerUnavailable / BrokerError: the connection failed (then it is out of step and
            the caller must drop it).
    """
    try:
        conn.send_packed_command(pack(conn, commands))
        return read_replies(conn, len(commands))
    except redis.RedisError as exc:
        raise_as_broker_error(exc, url)


def _stale(conn: Connection) -> bool:
    try:
        conn.connect()
        return conn.can_read()  # (data nobody asked for, or the server's EOF)
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return True


def raise_as_broker_error(exc: Exception, url: str) -> NoReturn:
    """Raise ``exc`` (a redis-py error or error reply) as taskq's own error."""
    raise as_broker_error(exc, url) from exc


_NOT_NOW = (
    redis.exceptions.BusyLoadingError,  # LOADING: a restarted server reads its data
    redis.exceptions.ReadOnlyError,  # a replica, or a master that was demoted
    redis.exceptions.OutOfMemoryError,  # maxmemory reached
    redis.exceptions.MasterDownError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
)
"""Error replies that mean "not now": redis-py maps their codes to these types."""

_NOT_NOW_CODES = ("BUSY ", "NOREPLICAS ")
"""And those it does not map: a long script; a master with fewer good replicas than its
``min-replicas-to-write`` (as an old master is from the moment Sentinel promotes its replica)."""


def as_broker_error(exc: Exception, url: str) -> BrokerError:
    """taskq's error for a redis-py one: unavailable (wait and retry) or refused (do not)."""
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        return BrokerRefused(f"Redis at {url} refused the credentials: {exc}")
    if isinstance(exc, redis.TimeoutError):
        return BrokerUnavailable(f"Redis at {url} did not answer in time ({exc})", timed_out=True)
    if isinstance(exc, redis.ConnectionError) and _tls_failed(exc):
        # Still "unavailable": a worker waits out certificates being replaced.
        return BrokerUnavailable(
            f"TLS with Redis at {url} failed ({exc}); the URL's ssl_ca_certs must have signed "
            "the server's certificate, and a server that checks clients (tls-auth-clients) "
            "needs ssl_certfile and ssl_keyfile"
        )
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        return BrokerUnavailable(f"the sentinels of {url} name no reachable master ({exc})")
    if isinstance(exc, redis.ConnectionError):
        return BrokerUnavailable(
            f"cannot reach Redis at {url} ({exc}); start one with `taskq server` or point "
            "TASKQ_REDIS_URL at yours"
        )
    text = str(exc)
    if isinstance(exc, redis.exceptions.AskError):
        return BrokerRefused(
            f"Redis at {url} is a Redis Cluster node (it answered "
            f"{'MOVED' if isinstance(exc, redis.exceptions.MovedError) else 'ASK'} {text}): "
            "use a redis+cluster:// URL"
        )
    if "cluster support disabled" in text:
        return BrokerRefused(f"Redis at {url} is not a Redis Cluster: {text}")
    # BUSY and NOREPLICAS have no type of their own; OOM inside a script is a plain script
    # error on Redis 6.2: they are told by their text.
    if (
        isinstance(exc, _NOT_NOW)
        or text.startswith(_NOT_NOW_CODES)
        or "OOM command not allowed" in text
    ):
        return BrokerUnavailable(f"Redis at {url} cannot serve now: {text}")
    if isinstance(exc, redis.ResponseError):
        return BrokerRefused(f"Redis at {url} refused: {text}")
    return BrokerError(f"Redis at {url}: {text}")


def _tls_failed(exc: BaseException) -> bool:
    """Whether an SSL error (a refused or unverified certificate, the server closing the
    handshake) is behind ``exc``: then "start a Redis" is the wrong advice."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
