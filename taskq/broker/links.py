"""Connecting: the link a Redis URL asks for (one server, a Redis Cluster, a Sentinel-watched
master); :mod:`taskq.broker.topology` reads the URL forms."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
import redis.backoff
import redis.cluster
import redis.retry
import redis.sentinel

from taskq.broker.cluster import ClusterLink
from taskq.broker.link import CLIENT_OPTIONS, Link
from taskq.broker.resp import Connection
from taskq.broker.topology import kind_of, parse_seeds
from taskq.config import redact
from taskq.errors import ConfigError

_C = TypeVar("_C", redis.Redis, "redis.asyncio.Redis")


def driver_options() -> dict[str, Any]:
    """The library version a client sends in ``CLIENT SETINFO``, given as redis-py's own
    ``redis.__version__``. Left out, redis-py reads it from its package metadata, the first
    time in a process about 7M instructions, paid by a worker's master before its first
    heartbeat."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # an older redis-py, without driver_info: lib_version is the option
        return {"lib_version": redis.__version__}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


def client_from_url(factory: Callable[..., _C], url: str) -> _C:
    """``factory(url, **CLIENT_OPTIONS)`` (a redis-py ``from_url``), with the URL checked and
    the library version of :func:`driver_options`.

    Raises:
        ConfigError: the URL is not a Redis URL, or asks for RESP3 (taskq speaks RESP2).
    """
    try:
        client = factory(url, **CLIENT_OPTIONS, **driver_options())
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact(url)!r}: {exc}") from None
    if str(client.connection_pool.connection_kwargs.get("protocol")) != "2":
        raise ConfigError(f"{redact(url)}: taskq speaks RESP2; remove protocol=3 from the URL")
    return client


def connect(url: str) -> Link:
    """A link to the Redis at ``url``: ``redis://``, ``rediss://`` (TLS) or ``unix://`` for
    one server, ``redis+cluster://`` for a Redis Cluster, ``redis+sentinel://`` for the
    master a set of sentinels watches (:mod:`taskq.broker.topology` has the forms).

    Nothing is sent until the first command.

    Raises:
        ConfigError: the URL is not a Redis URL, or asks for RESP3 (taskq speaks RESP2).
    """
    kind = kind_of(url)
    if kind == "cluster":
        return ClusterLink(cluster_factory(url), url)
    if kind == "sentinel":
        client = sentinel_client(url)
        return Link(client, url, fence=MasterWatch(client).fence)
    return Link(client_from_url(redis.Redis.from_url, url), url)


def cluster_factory(url: str) -> Callable[[], redis.cluster.RedisCluster]:
    """What builds redis-py's cluster client for ``url`` (it reads the slot table at once,
    so the link calls it on its first command)."""
    seeds = parse_seeds(url)
    options = {**seeds.options, **CLIENT_OPTIONS}
    if str(seeds.options.get("protocol", 2)) != "2":
        raise ConfigError(f"{redact(url)}: taskq speaks RESP2; remove protocol=3 from the URL")

    def make() -> redis.cluster.RedisCluster:
        node: Callable[[str, int], Any] = redis.cluster.ClusterNode  # (it is unannotated)
        nodes = [node(h, p) for h, p in seeds.hosts]
        # Retries are the link's (it knows which commands did not run); the client only
        # keeps the slot table and the pools.
        no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
        return redis.cluster.RedisCluster(startup_nodes=nodes, retry=no_retry, **options)

    return make


def sentinel_client(url: str) -> redis.Redis:
    """A client of the master the sentinels of ``url`` name: its pool asks them for the
    master's address at every new connection (the link's :class:`MasterWatch` closes the
    open ones when the sentinels name another)."""
    seeds = parse_seeds(url)
    if str(seeds.options.get("protocol", 2)) != "2":
        raise ConfigError(f"{redact(url)}: taskq speaks RESP2; remove protocol=3 from the URL")
    sentinel_kwargs = {"socket_connect_timeout": 2, "socket_timeout": 2, "protocol": 2}
    sentinel_kwargs.update(seeds.sentinel_options)
    make: Any = redis.sentinel.Sentinel  # (it is unannotated)
    sentinels = make(list(seeds.hosts), sentinel_kwargs=sentinel_kwargs)
    # The pool's connections take the master's address from the sentinels; a default one
    # that cannot connect keeps a connection opened any other way off localhost:6379.
    options = {**seeds.options, **CLIENT_OPTIONS, "host": "sentinel-master.invalid", "port": 1}
    return cast(redis.Redis, sentinels.master_for(seeds.master_name, **options))


MASTER_CHECK_S = 0.1
"""How often a Sentinel link asks the sentinels which server is the master (at most; only
when it sends): after a failover, the jobs a worker reads and acks on the old master in
this time, and in the second or so the sentinels take to name the new one, are run again."""


class WatchClock:
    """When a master watch asks the sentinels again, and what they last named: the part the
    blocking :class:`MasterWatch` and the asyncio one (:mod:`taskq.broker.alink`) share."""

    def __init__(self, pool: Any, interval_s: float) -> None:
        self._pool = pool  # (a SentinelConnectionPool, blocking or asyncio)
        self._interval_s = interval_s
        self._address: tuple[str, int] | None = None
        self._asked_at = -interval_s

    def _due(self) -> bool:
        return time.monotonic() - self._asked_at >= self._interval_s

    def _told(self, address: tuple[str, int] | None) -> None:
        """Keep what the sentinels answered (None: none answered, keep the last address:
        the connections' own errors tell of an outage)."""
        if address is not None:
            self._address = address
        self._asked_at = time.monotonic()

    def _astray(self, conn: Any, is_open: bool) -> bool:
        """``conn`` is open to a server other than the master the sentinels last named."""
        where = (getattr(conn, "host", None), getattr(conn, "port", None))
        return self._address is not None and is_open and where != self._address


class MasterWatch(WatchClock):
    """Keeps a Sentinel link's connections on the master the sentinels name.

    After a failover the old master goes on serving as a master, with no replica, until the
    sentinels turn it into a replica (~10 s later: Sentinel's fixed wait before it
    reconfigures an instance that says it is a master). A connection still open to it reads
    jobs the new master will hand out again and acks jobs there, writes that are thrown
    away when it resyncs: a worker that kept its connections ran most of a queue twice. So
    at most every ``interval_s`` the watch asks the sentinels for the master's address, and
    each connection whose server is not that one is closed before its next exchange (it
    opens again on the new master; redis-py's pool closes its idle ones when asked).
    """

    def __init__(self, client: redis.Redis, interval_s: float = MASTER_CHECK_S) -> None:
        super().__init__(client.connection_pool, interval_s)
        self._lock = threading.Lock()

    def master(self) -> tuple[str, int] | None:
        """The master's address as the sentinels last named it (None: none named yet)."""
        if not self._due():
            return self._address
        with self._lock:
            if self._due():
                self._told(self._ask())
        return self._address

    def fence(self, conn: Connection) -> bool:
        """Close ``conn`` if it is open to a server other than the master; True if closed."""
        self.master()
        if not self._astray(conn, conn._sock is not None):
            return False
        conn.disconnect()
        return True

    def _ask(self) -> tuple[str, int] | None:
        try:
            host, port = self._pool.get_master_address()
        except redis.RedisError:  # no sentinel answers
            return None
        return str(host), int(port)
