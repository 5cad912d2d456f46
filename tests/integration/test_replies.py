"""taskq's RESP reply reader gives exactly what redis-py's RESP2 parser gives, for every kind of
reply a real Redis sends, however the socket cuts the bytes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.connection import Connection
from redis.exceptions import NoScriptError

from taskq.broker.link import CLIENT_OPTIONS
from taskq.broker.resp import Command, _Replies, pack, read_replies
from tests.resp_support import Chunks

NESTED = """return {1, 'a', {}, {'b', {2, {}}, 'c'}, redis.error_reply('ERR inner'),
  redis.status_reply('FINE'), -3}"""
BODY = b"\r\n$5\r\n*2\r\n" + bytes(range(256))  # RESP-looking bytes inside a value

COMMANDS: list[Command] = [  # each reads only, so every connection gets the same replies
    ("PING",),
    ("GET", "k"),
    ("GET", "missing"),
    ("STRLEN", "k"),
    ("XRANGE", "s", "-", "+"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "STREAMS", "s", "0"),  # its pending entries
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "STREAMS", "s", ">"),  # nothing new: nil
    ("LRANGE", "empty", 0, -1),
    ("EVAL", NESTED, 0),
    ("EVALSHA", "0" * 40, 0),  # NOSCRIPT
    ("NO-SUCH-COMMAND",),
    ("GET", "big"),
    ("MULTI",),
    ("GET", "k"),
    ("INCR", "k"),  # an error inside EXEC's reply (k is not a number)
    ("EXEC",),
]


@pytest.fixture
def conns(redis_url: str) -> Iterator[tuple[Connection, Connection]]:
    """Two connections to a Redis holding what COMMANDS read."""
    client = redis.Redis.from_url(redis_url, **CLIENT_OPTIONS)
    client.set("k", "v")
    client.set("big", b"x" * 3_000_000)
    client.xadd("s", {"task": "t", "body": BODY}, id="1-1")
    client.xadd("s", {"task": "t", "body": b""}, id="1-2")
    client.xgroup_create("s", "g", id="0")
    client.xreadgroup("g", "c", {"s": ">"})
    pair = (client.connection_pool.make_connection(), client.connection_pool.make_connection())
    for c in pair:
        c.connect()
    yield pair
    for c in pair:
        c.disconnect()
    client.close()


def _same(a: Any, b: Any) -> bool:
    """Equal replies; errors are equal when they are of one type with one message."""
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b and type(a) is type(b))


def _redis_py(conn: Connection, command: Command) -> Any:
    conn.send_packed_command(conn.pack_commands([command]))
    try:
        return conn.read_response()
    except redis.ResponseError as exc:
        return exc


def _ours(conn: Connection, commands: list[Command]) -> list[Any]:
    conn.send_packed_command(pack(conn, commands))
    return read_replies(conn, len(commands))


def test_the_same_replies_as_redis_py(conns: tuple[Connection, Connection]) -> None:
    ours, theirs = conns
    for command in COMMANDS:
        [reply] = _ours(ours, [command])
        assert _same(reply, _redis_py(theirs, command)), command
    assert isinstance(_ours(ours, [("EVALSHA", "0" * 40, 0)])[0], NoScriptError)
    assert _ours(ours, [("GET", "big")]) == [b"x" * 3_000_000]


def test_many_replies_of_one_write(conns: tuple[Connection, Connection]) -> None:
    ours, theirs = conns
    expected = [_redis_py(theirs, c) for c in COMMANDS]
    got = _ours(ours, COMMANDS)
    assert len(got) == len(expected)
    assert all(_same(g, e) for g, e in zip(got, expected, strict=True))


@pytest.fixture
def raw_replies(redis_url: str, conns: tuple[Connection, Connection]) -> tuple[bytes, list[Any]]:
    """The bytes Redis wrote for COMMANDS (but the 3 MB value, left to the tests above), and
    what redis-py made of them."""
    commands = [c for c in COMMANDS if "big" not in c]
    expected = [_redis_py(conns[1], c) for c in commands]
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"".join(pack(conns[0], commands)))
        data = b""
        while True:
            data += sock.recv(1 << 20)
            try:  # all of it yet? (a source that ends mid-reply is an error)
                _Replies(Chunks(data, len(data)), len(commands)).read()  # type: ignore[arg-type]
                return data, expected
            except redis.ConnectionError:
                continue


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
def test_a_reply_cut_anywhere(raw_replies: tuple[bytes, list[Any]], size: int) -> None:
    data, expected = raw_replies
    got = _Replies(Chunks(data, size), len(expected)).read()  # type: ignore[arg-type]
    assert len(got) == len(expected)
    assert all(_same(g, e) for g, e in zip(got, expected, strict=True))


def test_a_long_value_in_many_pieces() -> None:
    value = bytes(range(256)) * 1_000
    data = b"*2\r\n$%d\r\n%s\r\n:-7\r\n" % (len(value), value)
    assert _Replies(Chunks(data, 7), 1).read() == [[value, -7]]  # type: ignore[arg-type]


def test_a_server_that_closes_mid_reply_is_an_error() -> None:
    cut = Chunks(b"*2\r\n$3\r\nabc\r\n$10\r\nabc", 5)
    with pytest.raises(redis.ConnectionError, match="closed"):
        _Replies(cut, 1).read()  # type: ignore[arg-type]


def test_bytes_that_are_not_resp_are_an_error() -> None:
    with pytest.raises(redis.InvalidResponse):
        _Replies(Chunks(b"?what\r\n", 100), 1).read()  # type: ignore[arg-type]
    with pytest.raises(redis.InvalidResponse, match="after the last reply"):
        _Replies(Chunks(b"+OK\r\n+OK\r\n", 100), 1).read()  # type: ignore[arg-type]


def test_bytes_in_redis_pys_buffer_are_read_by_redis_py(
    conns: tuple[Connection, Connection],
) -> None:
    conn = conns[0]
    conn.send_packed_command(pack(conn, [("PING",)]))
    assert redis_py_buffered(conn)
    assert read_replies(conn, 1) == [b"PONG"]
    assert _ours(conn, [("ECHO", "next")]) == [b"next"]


def redis_py_buffered(conn: Connection) -> bool:
    """Let redis-py's parser pull the waiting reply into its own buffer (as a staleness check
    does), and say whether it did."""
    return any(conn.can_read(timeout=0.05) for _ in range(100))


def test_a_read_that_times_out_closes_the_connection(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, **{**CLIENT_OPTIONS, "socket_timeout": 0.2})
    conn = client.connection_pool.make_connection()
    conn.connect()
    conn.send_packed_command(pack(conn, [("BLPOP", "nothing", 0)]))
    with pytest.raises(redis.TimeoutError):
        read_replies(conn, 1)
    assert conn._sock is None  # out of step: closed, as redis-py closes it
    client.close()
