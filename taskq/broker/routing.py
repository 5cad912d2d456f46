"""Routing a command on Redis Cluster: the keys it names, their hash slot, and the raw
write and read of one node's batch (the replies as :func:`~taskq.broker.link.exchange`
gives them)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import redis
from redis.crc import key_slot

from taskq.broker.link import raise_as_broker_error
from taskq.broker.resp import Command, Connection, pack, read_replies
from taskq.errors import ConfigError

_KEYLESS = frozenset(
    {
        "TIME",
        "PING",
        "WAIT",
        "SCRIPT",
        "INFO",
        "ECHO",
        "FLUSHDB",
        "FLUSHALL",
        "DBSIZE",
        "MULTI",
        "ACL",
        "SCAN",  # on a cluster, sent after a command on the node to scan (it rides along)
    }
)
_ALL_ARGS = frozenset({"DEL", "EXISTS", "UNLINK", "MGET", "TOUCH", "BLMOVE", "LMOVE"})
_BROADCAST = frozenset({"FLUSHDB", "FLUSHALL"})


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes, if the key has a hash tag (``{...}``)."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def command_keys(command: Command) -> Sequence[Any]:
    """The keys a command names (the ones taskq sends; none for TIME, PING...)."""
    name = str(command[0]).upper()
    if name in ("EVALSHA", "EVAL"):
        return command[3 : 3 + int(command[2])]
    if name in ("XREADGROUP", "XREAD"):
        at = next(i for i, a in enumerate(command) if str(a).upper() == "STREAMS")
        return command[at + 1 : at + 1 + (len(command) - at - 1) // 2]
    if name in ("XGROUP", "XINFO"):
        return command[2:3]
    if name in _KEYLESS or name == "EXEC" or len(command) < 2:
        return ()
    return command[1:] if name in _ALL_ARGS else command[1:2]


def as_text(key: Any) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else str(key)


@functools.lru_cache(maxsize=4096)
def slot_of_key(key: str) -> int:
    """The hash slot of a taskq key (cached: streams and due keys come on every fetch);
    ConfigError if it has no hash tag."""
    if hash_tag(key) is None:
        queue = key.split(":", 1)[0]
        raise ConfigError(
            f"queue {queue!r} cannot live on Redis Cluster: its keys would span hash slots; "
            f"name it '{{{queue}}}' (or '{{group}}.{queue}' to share a slot with other "
            "queues); see docs/protocol.md, Redis Cluster"
        )
    return key_slot(key.encode())


def send_all(conn: Connection, commands: Sequence[Command], url: str) -> None:
    try:
        conn.send_packed_command(pack(conn, commands))
    except redis.RedisError as exc:
        raise_as_broker_error(exc, url)


def read_all(conn: Connection, n: int, url: str) -> list[Any]:
    """``n`` replies (an error reply is returned in its place, not raised)."""
    try:
        return read_replies(conn, n)
    except redis.RedisError as exc:
        raise_as_broker_error(exc, url)


class NotRun(Exception):
    """Commands that were not sent (no connection, no node for the slot): send them again."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause
