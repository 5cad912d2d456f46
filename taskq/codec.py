"""The values msgpack has no type for, carried exactly as msgpack extension types: the one
codec of job arguments, results and workflow results (docs/protocol.md, "Extension types").

Plain msgpack values (None, bool, 64-bit int, float, str, bytes, list, dict) are packed by
msgpack alone, byte for byte as before: :func:`pack` first runs the plain packer, whose
``default`` hook refuses anything else, and packs a value again with the extension hook only
when it holds something else. ``strict_types`` makes msgpack hand tuples (and subclasses of
the plain types) to the hook instead of flattening them, so a tuple stays a tuple. Unpacking
passes ``ext_hook``, which msgpack calls for extension types only: plain values cost nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import msgpack

from taskq.errors import DecodeError

DATETIME, DATE, TIME, TIMEDELTA, DECIMAL, UUID = 1, 2, 3, 4, 5, 6
TUPLE, SET, FROZENSET, ENUM, BIGINT = 7, 8, 9, 10, 11
"""The extension type codes (docs/protocol.md has each one's byte layout)."""
NAMES = {
    DATETIME: "datetime", DATE: "date", TIME: "time", TIMEDELTA: "timedelta",
    DECIMAL: "Decimal", UUID: "UUID", TUPLE: "tuple", SET: "set", FROZENSET: "frozenset",
    ENUM: "Enum", BIGINT: "big int",
}  # fmt: skip


MAX_NESTING = 32
"""Extension types inside extension types (a tuple in a tuple ...), at most: each level is a
nested msgpack call whose C stack is tens of kB, so a hostile body nesting thousands would
crash the process instead of failing its job."""
_thread = threading.local()
"""This thread's codec state: its plain packer, and how deep extension types nest."""


class ExtensionError(DecodeError):
    """An extension type this code does not know, or one whose payload is not valid."""


class _NotPlain(Exception):
    """Raised by the plain packer's hook: the value needs the extension hook."""


def _plain_only(obj: object) -> Any:
    raise _NotPlain


def _new_plain_packer() -> msgpack.Packer:
    """This thread's plain packer, made once (``msgpack.packb`` makes one a call, which costs
    more than packing a small value); it empties its buffer after each call, even one that
    raises."""
    new = _thread.plain = msgpack.Packer(use_bin_type=True, strict_types=True, default=_plain_only)
    return new


def pack(value: Any) -> tuple[bytes, bool]:
    """``value`` as msgpack, and whether that uses an extension type.

    Raises:
        TypeError, ValueError, OverflowError: as msgpack does, for a value nothing carries.
    """
    try:
        return (getattr(_thread, "plain", None) or _new_plain_packer()).pack(value), False
    except _NotPlain:
        packer = _Extended()
        return packer.pack(value), packer.used


def packb(value: Any) -> bytes:
    """:func:`pack`'s bytes alone (results, the record's arguments)."""
    return pack(value)[0]


def unpackb(raw: bytes) -> Any:
    """One msgpack value with taskq's extension types decoded.

    Raises:
        ExtensionError: an unknown extension code, or a payload that is not valid.
        ValueError, msgpack.UnpackException: not msgpack (as :func:`msgpack.unpackb`).
    """
    return msgpack.unpackb(raw, raw=False, strict_map_key=False, ext_hook=ext_hook)


_NOT_EXT_HEADS = bytes(b for b in range(256) if b not in (0xC7, 0xC8, 0xC9, *range(0xD4, 0xD9)))


def uses_extensions(raw: bytes) -> bool:
    """Whether encoded msgpack holds an extension type (a workflow's result spliced into
    the next step's body decides that body's version). Bytes without an extension header
    anywhere are told apart without decoding."""
    if not raw.translate(None, _NOT_EXT_HEADS):
        return False
    found: list[int] = []

    def note(code: int, data: bytes) -> msgpack.ExtType:
        found.append(code)
        return msgpack.ExtType(code, data)

    try:
        msgpack.unpackb(raw, raw=False, strict_map_key=False, ext_hook=note)
    except Exception:  # (not one msgpack value: the step's own decode will say so)
        return False
    return bool(found)


class _Extended:
    """One packing with the extension hook; ``used`` tells whether it wrote an extension."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = False

    def pack(self, value: Any) -> bytes:
        """Raises ValueError past :data:`MAX_NESTING` levels (an EnqueueError at enqueue)."""
        with _nested(ValueError):
            packed: bytes = msgpack.packb(
                value, use_bin_type=True, strict_types=True, default=self.default
            )
        return packed

    def default(self, obj: Any) -> Any:
        """msgpack's ``default`` hook: an extension, or a plain value standing for ``obj``."""
        encode = _ENCODERS.get(type(obj)) or _encoder_of(obj)
        if encode is None:
            return _plain_form(obj)
        code, payload = encode(self, obj)
        self.used = True
        return msgpack.ExtType(code, payload)


def _datetime(_: _Extended, value: dt.datetime) -> tuple[int, bytes]:
    text = value.isoformat()
    key = getattr(value.tzinfo, "key", None)
    if key and _is_zoneinfo(value.tzinfo):
        text += f"[{key}]"
    return DATETIME, text.encode()


def _is_zoneinfo(tz: object) -> bool:
    zoneinfo = sys.modules.get("zoneinfo")
    return zoneinfo is not None and isinstance(tz, zoneinfo.ZoneInfo)


def _items(p: _Extended, values: Any) -> bytes:
    return p.pack(list(values))


def _sorted_items(p: _Extended, values: Any) -> bytes:
    """A set's members, sorted when they can be (the same set packs to the same bytes in
    every process: uniqueness keys hash them), else in iteration order."""
    try:
        return p.pack(sorted(values))
    except TypeError:
        return p.pack(list(values))


def _enum(p: _Extended, member: enum.Enum) -> tuple[int, bytes]:
    cls = type(member)
    return ENUM, p.pack([f"{cls.__module__}:{cls.__qualname__}", member.value])


def _bigint(_: _Extended, n: int) -> tuple[int, bytes]:
    return BIGINT, int(n).to_bytes(n.bit_length() // 8 + 1, "big", signed=True)


_ENCODERS: dict[type, Callable[[_Extended, Any], tuple[int, bytes]]] = {
    dt.datetime: _datetime,
    dt.date: lambda _, v: (DATE, v.isoformat().encode()),
    dt.time: lambda _, v: (TIME, v.isoformat().encode()),
    dt.timedelta: lambda p, v: (TIMEDELTA, p.pack([v.days, v.seconds, v.microseconds])),
    uuid.UUID: lambda _, v: (UUID, v.bytes),
    tuple: lambda p, v: (TUPLE, _items(p, v)),
    set: lambda p, v: (SET, _sorted_items(p, v)),
    frozenset: lambda p, v: (FROZENSET, _sorted_items(p, v)),
    int: _bigint,  # (only an int past 64 bits reaches the hook)
}


def _encoder_of(obj: Any) -> Callable[[_Extended, Any], tuple[int, bytes]] | None:
    """The encoder of a subclass of an extension type (an Enum member first: IntEnum and
    StrEnum are ints and strs too; a named tuple is a tuple), if any."""
    if isinstance(obj, enum.Enum):
        return _enum
    if _is_decimal(obj):
        return lambda _, v: (DECIMAL, str(v).encode())
    for base, encode in _ENCODERS.items():
        if isinstance(obj, base) and (base is not int or _is_big(obj)):
            return encode
    return None


def _is_decimal(obj: object) -> bool:
    """A Decimal, without importing :mod:`decimal` (about 5M instructions, most of a
    worker's start does not need it): a Decimal exists only once that module is loaded."""
    decimal = sys.modules.get("decimal")
    return decimal is not None and isinstance(obj, decimal.Decimal)


def _is_big(n: Any) -> bool:
    """An int msgpack has no integer format for (past 64 bits)."""
    return not -(2**63) <= n < 2**64


def _plain_form(obj: Any) -> Any:
    """What stands for a value of no extension type: a subclass of a plain type as that
    type (an OrderedDict as a dict), or a dataclass or pydantic model as its fields (the
    task's annotation rebuilds it in the worker).

    Raises:
        TypeError: nothing carries it.
    """
    plain: Any
    for plain in (dict, list, str, bytes, float, int):
        if isinstance(obj, plain):
            return plain(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(obj, pydantic.BaseModel):
        return obj.model_dump(by_alias=True)
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


# -- decoding ---------------------------------------------------------------------------


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack's ``ext_hook``: the value of one extension.

    Raises:
        ExtensionError: an unknown code, or a payload that is not valid for its code.
    """
    decode = _DECODERS.get(code)
    if decode is None:
        raise ExtensionError(
            f"unknown msgpack extension type {code} (this worker knows 1-{len(_DECODERS)}: "
            "the job was written by a newer producer, upgrade the worker)"
        )
    try:
        return decode(data)
    except ExtensionError:
        raise
    except Exception as exc:  # an untrusted payload: whatever its parser raises
        raise ExtensionError(
            f"msgpack extension type {code} ({NAMES[code]}): invalid payload: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _decode_datetime(data: bytes) -> dt.datetime:
    text = data.decode()
    if not text.endswith("]"):
        return dt.datetime.fromisoformat(text)
    text, key = text[:-1].split("[", 1)
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError("a zone without a UTC offset")
    from zoneinfo import ZoneInfo  # (its first use reads the zone database)

    return value.astimezone(ZoneInfo(key))


@contextlib.contextmanager
def _nested(error: type[Exception]) -> Iterator[None]:
    """One more level of extension types in this thread; ``error`` past the limit."""
    depth = getattr(_thread, "depth", 0)
    if depth >= MAX_NESTING:
        raise error(f"extension types nested more than {MAX_NESTING} deep")
    _thread.depth = depth + 1
    try:
        yield
    finally:
        _thread.depth = depth


def _inner(data: bytes) -> Any:
    """The msgpack value inside an extension's payload."""
    with _nested(ExtensionError):
        return unpackb(data)


def _decode_timedelta(data: bytes) -> dt.timedelta:
    days, seconds, microseconds = _inner(data)
    return dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)


def _decode_list(data: bytes) -> list[Any]:
    items = _inner(data)
    if type(items) is not list:
        raise ValueError("the payload is not a msgpack array")
    return items


def _decode_enum(data: bytes) -> enum.Enum:
    """A member of an enum class of a module the worker has loaded already.

    The body is untrusted, so its class name imports nothing: importing a module runs its
    code, and the name would let a body choose which. The class must be an Enum subclass,
    and calling it with a value only looks a member up.
    """
    path, value = _decode_list(data)
    module_name, _, qualname = str(path).partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        raise ExtensionError(
            f"enum {path}: module {module_name!r} is not loaded in this worker (the task's "
            "module must import it)"
        )
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, enum.Enum)):
        raise ExtensionError(f"enum {path}: no Enum class of that name in this worker")
    return obj(value)


_DECODERS: dict[int, Callable[[bytes], Any]] = {
    DATETIME: _decode_datetime,
    DATE: lambda d: dt.date.fromisoformat(d.decode()),
    TIME: lambda d: dt.time.fromisoformat(d.decode()),
    TIMEDELTA: _decode_timedelta,
    DECIMAL: lambda d: __import__("decimal").Decimal(d.decode()),  # (see _is_decimal)
    UUID: lambda d: uuid.UUID(bytes=d),
    TUPLE: lambda d: tuple(_decode_list(d)),
    SET: lambda d: set(_decode_list(d)),
    FROZENSET: lambda d: frozenset(_decode_list(d)),
    ENUM: _decode_enum,
    BIGINT: lambda d: int.from_bytes(d, "big", signed=True),
}


# -- showing ----------------------------------------------------------------------------


def unpack_shown(raw: bytes) -> Any:
    """:func:`unpackb` for showing a value (``taskq job``, the dashboard): an extension it
    cannot decode stays a :class:`msgpack.ExtType` instead of failing the page.

    Raises:
        ValueError, msgpack.UnpackException: not msgpack.
    """
    return msgpack.unpackb(raw, raw=False, strict_map_key=False, ext_hook=_shown_hook)


def _shown_hook(code: int, data: bytes) -> Any:
    try:
        return ext_hook(code, data)
    except ExtensionError:
        return msgpack.ExtType(code, data)


def jsonable(value: Any) -> Any:
    """A decoded value as JSON can hold it: bytes as text (with escapes), times in ISO
    8601, a Decimal or UUID as its string, an Enum member as its value, tuples and sets
    as arrays, an int past 64 bits as its decimal text."""
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, int) and not isinstance(value, bool) and _is_big(value):
        return readable(value)  # (a JSON reader's numbers stop at 64 bits, or at 53)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, msgpack.ExtType):
        return readable(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return readable(value)


def readable(value: Any) -> str:
    """A decoded value as ``taskq job`` and the dashboard show it: as Python code would
    write it, but a time as its ISO 8601 text, a Decimal or UUID as its string."""
    if isinstance(value, msgpack.ExtType):  # (one this code cannot decode: a named tuple)
        return f"<msgpack extension type {value.code}: {len(value.data)} bytes>"
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    if isinstance(value, uuid.UUID | dt.timedelta) or _is_decimal(value):
        return str(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, int) and _is_big(value):
        return _int_text(value)
    if isinstance(value, list):
        return "[" + ", ".join(readable(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(readable(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, set | frozenset):
        inner = ", ".join(readable(v) for v in value)
        return f"{{{inner}}}" if value else f"{type(value).__name__}()"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{readable(k)}: {readable(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _int_text(n: int) -> str:
    """Its digits, or its size past Python's limit on int-to-text conversion."""
    try:
        return str(n)
    except ValueError:
        return f"<int of {n.bit_length()} bits>"


def _iso(value: dt.datetime | dt.date | dt.time) -> str:
    if isinstance(value, dt.datetime):
        return _datetime(_Extended(), value)[1].decode()
    return value.isoformat()
