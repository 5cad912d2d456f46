"""The wire format (protocol v2; v1 bytes for plain bodies): one Message value and its codec.

A job is one stream entry with two fields: ``task`` (the task name, plain text so that
``redis-cli XRANGE`` stays readable) and ``body`` (a msgpack map, see docs/protocol.md).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, NamedTuple

import msgpack

from taskq import codec
from taskq.bodycheck import (
    KNOWN_KEYS,
    OPTIONAL,
    PLAIN_SHAPES,
    SCHEMA,
    check_maps,
    check_numbers,
    check_values,
    tell_unknown,
    typed_field,
)
from taskq.config import MAX_TIME_MS
from taskq.errors import DecodeError, EnqueueError, PayloadTooLarge
from taskq.signing import Signer

PROTOCOL_VERSION = 2
"""The highest major version this code reads; a body with a higher ``v`` is dead-lettered,
not run. Version 2 bodies may hold taskq's msgpack extension types (:mod:`taskq.codec`): a
body is written as version 2 only when it holds one, so a worker of version 1, which would
run the job with the extensions' raw bytes for values, dead-letters it instead."""
PLAIN_VERSION = 1
"""The version of a body of plain msgpack types only: its bytes are those of version 1."""


def new_job_id() -> str:
    """A random 128-bit id in hex; unique without coordination."""
    return os.urandom(16).hex()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _MessageFields(NamedTuple):
    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    id: str
    queue: str
    priority: str
    created_ms: int
    retries: int
    eta_ms: int | None
    result_ttl_s: int | None
    wf: dict[str, Any] | None
    tick_ms: int | None
    expires_ms: int | None
    unique: str | None
    headers: dict[str, str] | None
    fair_key: str | None


class Message(_MessageFields):
    """One job as it travels from producer to worker: an immutable value.

    ``retries`` counts the attempts a job used up before this stream entry was written; the
    attempt number of a delivery is ``retries`` plus the entry's delivery count.
    ``result_ttl_s`` is set when the job keeps a status record and stores its result (for
    that many seconds after it ends). ``wf`` is the job's part in a workflow: what to start
    when it succeeds or fails (see :mod:`taskq.flow`). ``tick_ms`` is the tick of a
    periodic job (when its schedule said it was due); ``expires_ms``, when set, is the time
    after which the job is not started any more. ``unique`` is the key of the uniqueness lock
    that the job's end releases (``unique_key``). ``headers`` are strings that middleware
    passes from producer to worker, opaque to taskq (a trace context, say). ``fair_key``,
    set only for a fair queue, steers the enqueue and is not in the body. (A named tuple
    rather than a frozen dataclass: bulk enqueue builds one per job.)
    """

    __slots__ = ()

    def __new__(
        cls,
        task: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        id: str | None = None,
        queue: str = "tasks",
        priority: str = "normal",
        created_ms: int | None = None,
        retries: int = 0,
        eta_ms: int | None = None,
        result_ttl_s: int | None = None,
        wf: dict[str, Any] | None = None,
        tick_ms: int | None = None,
        expires_ms: int | None = None,
        unique: str | None = None,
        headers: dict[str, str] | None = None,
        fair_key: str | None = None,
    ) -> Message:
        return super().__new__(
            cls,
            task,
            args,
            {} if kwargs is None else kwargs,
            new_job_id() if id is None else id,
            queue,
            priority,
            now_ms() if created_ms is None else created_ms,
            retries,
            eta_ms,
            result_ttl_s,
            wf,
            tick_ms,
            expires_ms,
            unique,
            headers,
            fair_key,
        )

    @property
    def recorded(self) -> bool:
        """The job keeps a status record (``result_ttl_s`` is set)."""
        return self.result_ttl_s is not None

    def encode(self, *, max_bytes: int | None = None, signer: Signer | None = None) -> bytes:
        """The msgpack body, signed by ``signer`` if given (see :mod:`taskq.signing`).

        Raises:
            EnqueueError: an argument is not msgpack-serializable (the error names it).
            PayloadTooLarge: the body is larger than ``max_bytes``.
        """
        body_map: dict[str, Any] = {
            "v": PLAIN_VERSION,
            "id": self.id,
            "task": self.task,
            "args": list(self.args),  # (a tuple would pack as the tuple extension)
            "kwargs": self.kwargs,
            "queue": self.queue,
            "priority": self.priority,
            "created_ms": self.created_ms,
            "retries": self.retries,
        }
        for key in OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                body_map[key] = value
        try:
            body, extended = codec.pack(body_map)
        except (TypeError, ValueError, OverflowError) as exc:
            raise EnqueueError(f"{self.task}: {_offending_argument(self)}: {exc}") from None
        if extended:
            body = as_extended(body)
        if signer is not None:
            body = signer.sign(body)
        if max_bytes is not None and len(body) > max_bytes:
            raise PayloadTooLarge(
                f"{self.task}: job {self.id} is {len(body)} bytes encoded, "
                f"over the {max_bytes}-byte limit (max_payload_bytes)"
            )
        return body

    @classmethod
    def decode(cls, body: bytes, signer: Signer | None = None) -> Message:
        """Parse a body; unknown keys are ignored (forward compatibility). With ``signer``,
        only a body it signed is accepted; without, a signature is ignored.

        Raises:
            DecodeError: not msgpack, not a map, a newer major version, or a mistyped field.
            SignatureError: (with ``signer``) unsigned, unknown key, or changed since signed.
        """
        if body.startswith(BATCH_MARK):
            return decode_batch(body, signer)
        data, trailer = _unpack(body, signer)
        if signer is not None:
            signer.verify(body, trailer)
        _check_version(body, data)
        types = PLAIN_SHAPES.get(tuple(data))
        if types is not None and tuple(map(type, data.values())) == types:
            return cls._plain(body, data)
        return cls._checked(body, data, signer)

    @classmethod
    def _checked(cls, body: bytes, data: dict[str, Any], signer: Signer | None) -> Message:
        """Any other body (optional fields set, or keys another producer wrote): every field
        checked."""
        get = data.get
        task: Any = get("task")
        msg_id, args, kwargs = get("id"), get("args", ()), get("kwargs", {})
        queue, priority = get("queue", "tasks"), get("priority", "normal")
        created_ms, retries, eta_ms = get("created_ms", 0), get("retries", 0), get("eta_ms")
        result_ttl_s, wf = get("result_ttl_s"), get("wf")
        tick_ms, expires_ms, unique = get("tick_ms"), get("expires_ms"), get("unique")
        headers = get("headers")
        # The types producers write are checked at once; anything else field by field below,
        # which also names the field that is wrong.
        well_formed = (
            type(task) is str
            and type(msg_id) is str
            and type(args) in (list, tuple)
            and type(kwargs) is dict
            and type(queue) is str
            and type(priority) is str
            and type(created_ms) is int
            and type(retries) is int
            and (eta_ms is None or type(eta_ms) is int)
            and (result_ttl_s is None or type(result_ttl_s) is int)
            and (wf is None or type(wf) is dict)
            and (tick_ms is None or type(tick_ms) is int)
            and (expires_ms is None or type(expires_ms) is int)
            and (unique is None or type(unique) is str)
            and (headers is None or type(headers) is dict)
        )
        if len(data) > len(KNOWN_KEYS) or not KNOWN_KEYS.issuperset(data):
            tell_unknown(data)
        if not well_formed:
            values = [typed_field(data, key, kind, default, body) for key, kind, default in SCHEMA]
            task, msg_id, args, kwargs, queue, priority, created_ms, retries, eta_ms = values[:9]
            result_ttl_s, wf, tick_ms, expires_ms, unique, headers = values[9:]
        check_values(body, str(task), str(msg_id), kwargs, priority, retries, result_ttl_s)
        if not 0 <= created_ms <= MAX_TIME_MS or not (eta_ms is tick_ms is expires_ms is None):
            check_numbers(body, created_ms, eta_ms, tick_ms, expires_ms)
        if headers or wf is not None or unique is not None:
            check_maps(body, headers, wf, unique, queue, digests=signer is not None)
        # Every field is set, so the tuple is built directly, without __new__'s defaults.
        fields = (task, tuple(args), kwargs, msg_id, queue, priority, created_ms, retries)
        optional = (eta_ms, result_ttl_s, wf, tick_ms, expires_ms, unique, headers, None)
        return tuple.__new__(cls, fields + optional)

    @classmethod
    def _plain(cls, body: bytes, data: dict[str, Any]) -> Message:
        """A body of the keys and types :meth:`encode` writes for a job with no optional
        field but, maybe, its result's TTL (most jobs; ``PLAIN_SHAPES``), in that order: its
        values are taken in one step, and only what their types leave open is checked."""
        values = tuple(data.values())
        _, msg_id, task, args, kwargs, queue, priority, created_ms, retries = values[:9]
        result_ttl_s = values[9] if len(values) > 9 else None
        check_values(body, task, msg_id, kwargs, priority, retries, result_ttl_s)
        if not 0 <= created_ms <= MAX_TIME_MS:
            check_numbers(body, created_ms, None, None, None)
        fields = (task, tuple(args), kwargs, msg_id, queue, priority, created_ms, retries)
        # eta_ms, result_ttl_s, wf, tick_ms, expires_ms, unique, headers, fair_key
        return tuple.__new__(cls, (*fields, None, result_ttl_s, None, None, None, None, None, None))


def _check_version(body: bytes, data: Any) -> None:
    """Raise DecodeError unless ``data`` is a map of a protocol version this code reads."""
    if not isinstance(data, dict):
        raise DecodeError(f"body is a msgpack {type(data).__name__}, not a map", body)
    version = data.get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise DecodeError("body has no integer protocol version 'v'", body)
    if version > PROTOCOL_VERSION:
        raise DecodeError(
            f"protocol version {version} is newer than this worker's {PROTOCOL_VERSION}", body
        )


_PLAIN_V = b"\xa1v" + bytes([PLAIN_VERSION])
_EXTENDED_V = b"\xa1v" + bytes([PROTOCOL_VERSION])


def as_extended(body: bytes) -> bytes:
    """An unsigned body written as version 1, marked version 2 (it holds extension types);
    any other body as it is. ``v`` is the map's first key, right after the map's header
    (1 byte, or 3 for a map of 16 keys)."""
    at = body.find(_PLAIN_V, 0, 6)
    return body if at < 0 else body[:at] + _EXTENDED_V + body[at + len(_PLAIN_V) :]


def lua_pack(value: Any) -> bytes:
    """msgpack for taskq's scripts: Redis's Lua msgpack reads no ``bin`` type, so bytes
    travel as (raw) strings, which Lua keeps byte for byte."""
    return bytes(msgpack.packb(value, use_bin_type=False))


def _unpack(body: bytes, signer: Signer | None) -> tuple[Any, bytes | None]:
    """The body's first value, and the bytes after it (a signature trailer) if any.

    With a signer, a body that ends the way its plain trailers do is split there first, so
    the map decodes without msgpack raising ExtraData for the trailer (the common case of a
    signing worker); anything else is decoded the general way.

    Raises:
        DecodeError: not msgpack.
    """
    if signer is not None:
        trailer = signer.plain_trailer(body)
        if trailer is not None:
            with contextlib.suppress(Exception):  # not one whole value before it
                return codec.unpackb(body[: len(body) - len(trailer)]), trailer
    try:
        return codec.unpackb(body), None
    except msgpack.ExtraData as extra:  # a signed body: the map, then its trailer
        return extra.unpacked, extra.extra
    except codec.ExtensionError as exc:
        raise DecodeError(exc.reason, body) from None
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise DecodeError(f"body is not valid msgpack ({type(exc).__name__})", body) from None


BATCH_MARK = b"\xc1"
"""The first byte of a batch job's body (a byte msgpack never uses): then a msgpack array of
the batched calls' bodies, each as its producer wrote (and signed) it (``batch.lua``)."""


def decode_batch(body: bytes, signer: Signer | None = None) -> Message:
    """A batch job: its first call's message, its one argument the calls in enqueue order
    (``{"args", "kwargs", "id"}`` each), every call's body decoded (and, with ``signer``,
    verified) on its own. Raises DecodeError for anything else (one task and queue only)."""
    try:
        bodies = msgpack.unpackb(body[1:], raw=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise DecodeError(f"batch body is not a msgpack array: {exc}", body) from None
    if not isinstance(bodies, list) or not bodies or not all(type(b) is bytes for b in bodies):
        raise DecodeError("batch body must be a non-empty array of job bodies", body)
    if any(b.startswith(BATCH_MARK) for b in bodies):
        raise DecodeError("a batch may not hold a batch", body)
    calls = [Message.decode(b, signer) for b in bodies]
    first = calls[0]
    if any(c.task != first.task or c.queue != first.queue for c in calls):
        raise DecodeError("a batch holds calls of one task and queue", body)
    batch = [{"args": list(c.args), "kwargs": c.kwargs, "id": c.id} for c in calls]
    return first._replace(args=(batch,), kwargs={})


def _offending_argument(msg: Message) -> str:
    """Name the first argument msgpack refuses, for the enqueue error."""
    named: list[tuple[str, Any]] = [(f"argument {i}", a) for i, a in enumerate(msg.args)]
    named += [(f"keyword argument {k!r}", v) for k, v in msg.kwargs.items()]
    for label, value in named:
        try:
            codec.pack(value)
        except (TypeError, ValueError, OverflowError):
            return f"{label} ({type(value).__name__}) is not msgpack-serializable"
    if any(not isinstance(k, str) for k in msg.kwargs):
        return "keyword names must be strings"
    return "the job is not msgpack-serializable"
