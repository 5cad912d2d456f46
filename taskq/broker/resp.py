"""RESP, the protocol's wire format: what a link writes to Redis and reads back, packed and
parsed here rather than by redis-py because every job's enqueue and fetch goes through it."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from itertools import chain
from typing import Any, Protocol

from redis._parsers import _RESP2Parser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Command = tuple[Any, ...]
"""One Redis command: its name, then its arguments."""


class Connection(Protocol):
    """The part of a redis-py connection taskq uses (redis-py leaves these untyped)."""

    def pack_commands(self, commands: Sequence[Command]) -> list[bytes]: ...

    def send_packed_command(self, command: list[bytes], check_health: bool = True) -> None: ...

    def read_response(self) -> Any: ...

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def can_read(self) -> bool: ...

    _sock: socket.socket | None
    _parser: Any


def pack(conn: Connection, commands: Sequence[Command]) -> list[bytes]:
    """``commands`` in RESP, as redis-py's ``pack_commands`` writes them for taskq's argument
    types (bytes, str as UTF-8 with backslashreplace, as CLIENT_OPTIONS asks, int, float),
    in about half its time: every job's enqueue and fetch goes through here. Anything else
    goes to redis-py's packer, which raises its own DataError for what it cannot send."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            kind = type(arg)
            if kind is bytes:
                data = arg
            elif kind is str:
                data = arg.encode("utf-8", "backslashreplace")
            elif kind is int:
                data = b"%d" % arg
            elif kind is float:
                data = repr(arg).encode()
            else:
                return conn.pack_commands(commands)
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return [b"".join(out)]


READ_SIZE = 65_536
"""Bytes asked of the socket per read (redis-py's own read size)."""
MIN_ENTRIES = 4
"""Stream entries a reply's array holds from which :func:`_entries` reads them."""
_OPEN = object()
"""An array whose elements are not all read yet."""
_BULK_HEAD = b"$%d".__mod__


def read_replies(conn: Connection, count: int) -> list[Any]:
    """The next ``count`` replies on ``conn``, as redis-py's RESP2 parser gives them (bytes,
    ints, lists, None; an error reply as its redis-py exception, returned in its place, or
    raised if it is a ConnectionError, as redis-py does), in about a third of its time for a
    fetch's reply: redis-py reads each element through several method calls, about 6 µs per
    job of a batch. With hiredis, or anything left in redis-py's own buffer, redis-py reads.

    Raises:
        redis.TimeoutError / redis.ConnectionError: the read failed or the server closed the
            connection; the connection is closed (out of step), as redis-py does.
        redis.InvalidResponse: bytes that are not RESP2.
    """
    parser, sock = conn._parser, conn._sock
    buffer = getattr(parser, "_buffer", None)
    if type(parser) is not _RESP2Parser or sock is None or buffer is None or buffer.unread_bytes():
        return [_redis_py_reply(conn) for _ in range(count)]
    try:
        return _Replies(sock, count).read()
    except TimeoutError:  # the socket's timeout (socket.timeout)
        conn.disconnect()
        raise RedisTimeoutError("Timeout reading from Redis") from None
    except OSError as exc:
        conn.disconnect()
        raise RedisConnectionError(f"Error while reading from Redis: {exc}") from exc
    except BaseException:
        conn.disconnect()
        raise


def _redis_py_reply(conn: Connection) -> Any:
    try:
        return conn.read_response()
    except ResponseError as exc:  # the reply was read whole: still in step
        return exc


class _Replies:
    """Reads ``count`` replies off a socket: one ``recv`` per 64 KiB, the elements found in the
    bytes with ``find`` and slices. Arrays being filled wait on a stack, so a reply cut
    anywhere by the socket is taken up again where it stopped."""

    __slots__ = ("buf", "count", "need", "out", "pos", "sock", "stack")

    def __init__(self, sock: socket.socket, count: int) -> None:
        self.sock = sock
        self.count = count
        self.buf = b""
        self.pos = 0
        self.need = 0
        """Bytes the buffer must hold before parsing can go on (a bulk string's end)."""
        self.stack: list[list[Any]] = []
        """Arrays being filled: [their elements, how many are still to come]."""
        self.out: list[Any] = []

    def read(self) -> list[Any]:
        while True:
            self._parse()
            if len(self.out) == self.count:
                if self.pos != len(self.buf):
                    raise InvalidResponse("Protocol Error: bytes after the last reply")
                return self.out
            self._receive()

    def _receive(self) -> None:
        rest = self.buf[self.pos :]
        chunks, have = [rest], len(rest)
        want = max(self.need - self.pos, have + 1)
        while have < want:  # a long bulk string: every chunk first, joined once
            chunk = self.sock.recv(READ_SIZE)
            if not chunk:
                raise RedisConnectionError("Connection closed by server.")
            chunks.append(chunk)
            have += len(chunk)
        self.buf, self.pos, self.need = b"".join(chunks), 0, 0

    def _parse(self) -> None:
        buf, pos, stack, out = self.buf, self.pos, self.stack, self.out
        value: Any
        while len(out) < self.count:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            kind = buf[pos]
            if kind == 36:  # $ bulk string (or nil: $-1)
                one: list[Any] = []
                pos = self._bulks(pos, 1, one)
                if not one:  # not all of it yet
                    break
                value = one[0]
            elif kind == 42:  # * array (or nil)
                value, pos = self._array(int(buf[pos + 1 : end]), end + 2)
                if value is _OPEN:
                    continue
            else:
                value, pos = _line(kind, buf[pos + 1 : end]), end + 2
            while stack:  # the value completes the innermost open array, maybe more
                top = stack[-1]
                top[0].append(value)
                top[1] -= 1
                if top[1]:
                    break
                value = top[0]
                stack.pop()
            else:
                out.append(value)
        self.pos = pos

    def _array(self, n: int, pos: int) -> tuple[Any, int]:
        """An array of ``n`` elements from ``pos``, and where it ends; or ``_OPEN`` and where
        its bulk strings end, when its other elements are still to come (it waits on the
        stack for them)."""
        if n >= MIN_ENTRIES and (entries := _entries(self.buf, pos, n)) is not None:
            return entries
        if n <= 0:
            return (None if n < 0 else []), pos
        items: list[Any] = []
        pos = self._bulks(pos, n, items)
        if len(items) < n:
            self.stack.append([items, n - len(items)])
            return _OPEN, pos
        return items, pos

    def _bulks(self, pos: int, n: int, items: list[Any]) -> int:
        """Append up to ``n`` bulk strings from ``pos`` to ``items`` (an array of a stream
        entry's fields is nothing else), stopping at anything else or where the buffer ends
        (then ``need`` says how far a cut value goes); returns where it stopped."""
        buf, size = self.buf, len(self.buf)
        while n and pos < size and buf[pos] == 36:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            stop = end + 2 + int(buf[pos + 1 : end])
            if stop < end + 2:  # $-1: nil
                items.append(None)
                pos, n = end + 2, n - 1
                continue
            if stop + 2 > size:
                self.need = stop + 2
                break
            items.append(buf[end + 2 : stop])
            pos, n = stop + 2, n - 1
        return pos


def _entries(buf: bytes, pos: int, n: int) -> tuple[list[Any], int] | None:
    """``n`` stream entries from ``pos`` (the elements of an XREADGROUP or XRANGE reply), as
    the element-by-element parse gives them, found in C rather than one element at a time
    (about 50 bytecodes a bulk string): when every entry has the first one's number of
    fields, the entries' pieces lie at one stride from each other in the buffer cut at each
    CRLF. Returns them and where they end, or None for anything else (entries of different
    shapes, a nil, a reply not all in the buffer yet), which is then parsed element by
    element.

    It is exact, whatever bytes the fields hold (a client writes them): every bulk string's
    header must be the one its value's length gives. A value that holds a CRLF is cut by
    the split, so its first piece is shorter than its header says; an entry of another shape
    moves an array header to where a bulk string's stands."""
    if buf[pos : pos + 5] != b"*2\r\n$":
        return None
    id_at = buf.find(b"\r\n", pos + 4) + 2
    fields_at = buf.find(b"\r\n", id_at) + 2 if id_at > 1 else 0
    end = buf.find(b"\r\n", fields_at) if fields_at > 1 else -1
    if end < 0 or buf[fields_at] != 42 or buf[end + 2 : end + 3] != b"$":
        return None
    stride = 4 + 2 * int(buf[fields_at + 1 : end])  # *2, the id's header and id, *k, k bulks
    stop = n * stride
    pieces = buf[pos:].split(b"\r\n", stop)
    if len(pieces) <= stop or pieces[0:stop:stride].count(b"*2") != n:
        return None
    if pieces[3:stop:stride].count(pieces[3]) != n:
        return None
    value_at = (2, *range(5, stride, 2))  # the id, then each field's name and value
    values = [pieces[at:stop:stride] for at in value_at]
    heads = chain.from_iterable(pieces[at - 1 : stop : stride] for at in value_at)
    if list(heads) != list(map(_BULK_HEAD, map(len, chain.from_iterable(values)))):
        return None
    rows = zip(values[0], map(list, zip(*values[1:], strict=True)), strict=True)
    return list(map(list, rows)), len(buf) - len(pieces[-1])


def _line(kind: int, text: bytes) -> Any:
    """A one-line reply: an integer, a simple string, or an error (redis-py's exception for
    it, raised at once if it is a ConnectionError, as redis-py does)."""
    if kind == 58:  # :
        return int(text)
    if kind == 43:  # +
        return text
    if kind == 45:  # -
        error = _RESP2Parser.parse_error(text.decode("utf-8", "replace"))  # type: ignore[no-untyped-call]
        if isinstance(error, RedisConnectionError):
            raise error
        return error
    raise InvalidResponse(f"Protocol Error: {bytes([kind]) + text!r}")
