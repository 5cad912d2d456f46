"""Where Redis lives: a URL read as one server, a Redis Cluster or a Sentinel-watched master.

The forms (docs/protocol.md, "Topologies"):

* ``redis://[user:pw@]host:port/db``, ``rediss://...`` (TLS), ``unix:///path``: one server.
* ``redis+cluster://[user:pw@]host:port,host:port[?options]`` (``rediss+cluster://`` for TLS):
  a Redis Cluster, found from any reachable seed; db 0 only.
* ``redis+sentinel://[user:pw@]host:port,host:port/master_name[/db][?options]``: the master
  the sentinels name ``master_name`` (``rediss+sentinel://``: TLS to the master). The user and
  password are the master's; ``sentinel_username=`` / ``sentinel_password=`` are the
  sentinels' own, if they have one.

Options after ``?`` are redis-py's URL options (``ssl_ca_certs=``, ``socket_timeout=``...).
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode

import redis.connection

from taskq.config import redact
from taskq.errors import ConfigError

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}


class Seeds(NamedTuple):
    """A cluster's or the sentinels' addresses, and the connection options of the URL (a
    named tuple: every worker's start defines it, and a frozen dataclass costs 5x more)."""

    hosts: tuple[tuple[str, int], ...]
    options: dict[str, Any]
    master_name: str
    sentinel_options: dict[str, Any]


def kind_of(url: str) -> str:
    """``cluster``, ``sentinel`` or ``single``, from the URL's scheme."""
    scheme = url.partition("://")[0].lower()
    if scheme in CLUSTER_SCHEMES:
        return "cluster"
    if scheme in SENTINEL_SCHEMES:
        return "sentinel"
    return "single"


def parse_seeds(url: str) -> Seeds:
    """The hosts and options of a ``redis+cluster://`` or ``redis+sentinel://`` URL.

    Raises:
        ConfigError: no host, a bad port, a db other than 0 on a cluster, no master name.
    """
    scheme, _, rest = url.partition("://")
    kind = kind_of(url)
    base = {**CLUSTER_SCHEMES, **SENTINEL_SCHEMES}[scheme.lower()]
    rest, _, query = rest.partition("?")
    creds, at, where = rest.rpartition("@")
    netloc, _, path = where.partition("/")
    hosts = tuple(_host_port(h, url) for h in netloc.split(",") if h.strip())
    if not hosts:
        raise ConfigError(f"{redact(url)}: no host:port seed")
    params = parse_qsl(query, keep_blank_values=True)
    sentinel_options = {
        k.removeprefix("sentinel_"): v for k, v in params if k.startswith("sentinel_")
    }
    params = [(k, v) for k, v in params if not k.startswith("sentinel_")]
    parts = [p for p in path.split("/") if p]
    master_name, db = "", "0"
    if kind == "sentinel":
        if not parts:
            raise ConfigError(f"{redact(url)}: no master name (redis+sentinel://h:p,h:p/name/db)")
        master_name, db = parts[0], parts[1] if len(parts) > 1 else "0"
    elif parts:
        db = parts[0]
    if kind == "cluster" and db != "0":
        raise ConfigError(f"{redact(url)}: a Redis Cluster has db 0 only")
    one = f"{base}://{creds}{at}{hosts[0][0]}:{hosts[0][1]}/{db}"
    try:
        parse: Any = redis.connection.parse_url  # (it is unannotated)
        options: dict[str, Any] = parse(one + ("?" + urlencode(params) if params else ""))
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact(url)!r}: {exc}") from None
    for name in ("host", "port"):
        options.pop(name, None)
    if kind == "cluster":
        options.pop("db", None)
    return Seeds(hosts, options, master_name, sentinel_options)


def _host_port(text: str, url: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host:
        host, port = port, "6379"
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ConfigError(f"{redact(url)}: bad port in seed {text!r}") from None
