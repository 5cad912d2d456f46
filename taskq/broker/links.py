"""Connecting: the link a Redis URL asks for (one server, a Redis Cluster, a Sentinel-watched
master); :mod:`taskq.broker.topology` reads the URL forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import redis
import redis.backoff
import redis.cluster
import redis.retry
import redis.sentinel

from taskq.broker.cluster import ClusterLink
from taskq.broker.link import CLIENT_OPTIONS, Link, client_from_url
from taskq.broker.topology import kind_of, parse_seeds
from taskq.config import redact
from taskq.errors import ConfigError


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
        return Link(sentinel_client(url), url)
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
    master's address at every new connection, so after a failover reconnects find the new
    master (a connection to a demoted one fails with READONLY and is dropped)."""
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
