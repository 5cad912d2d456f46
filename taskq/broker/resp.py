"""RESP, the protocol's wire format: what a link writes to Redis, packed here rather than by
redis-py because every job's enqueue and fetch goes through it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

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
