"""taskq's RESP packer writes exactly what redis-py's would, for every argument type taskq
sends, and leaves the rest to redis-py."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import Connection

from taskq.broker.link import CLIENT_OPTIONS
from taskq.broker.resp import pack

CONN = Connection(encoding_errors=CLIENT_OPTIONS["encoding_errors"])

COMMANDS: list[tuple[Any, ...]] = [
    ("XADD", "tasks:normal", "*", "task", "app.add", "body", b"\x82\xa1v\x01" + bytes(range(256))),
    ("EVALSHA", "a" * 40, 2, "k1", "{q}:job:x", -1, 0, 10**15, 1.5, 1e-07, b""),
    ("SET", "café ☕", "\udcff lone surrogate", "PX", 60_000),  # os.fsdecode-style text
    ("PING",),
    ("XADD", "big", "*", "body", b"x" * 100_000),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_the_same_bytes_as_redis_py(command: tuple[Any, ...]) -> None:
    assert b"".join(pack(CONN, [command])) == b"".join(CONN.pack_commands([command]))


def test_several_commands_in_one_write() -> None:
    assert b"".join(pack(CONN, COMMANDS)) == b"".join(CONN.pack_commands(COMMANDS))


def test_other_types_go_to_redis_py() -> None:
    view = ("SET", "k", memoryview(b"abc"))
    assert b"".join(pack(CONN, [view])) == b"".join(CONN.pack_commands([view]))
    for bad in (None, True, object()):
        with pytest.raises(redis.DataError):
            pack(CONN, [("SET", "k", bad)])
