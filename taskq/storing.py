"""What a job's end writes into its status record, and the states the record can be in: the
part of :mod:`taskq.results` that the worker and the broker need to write and read records,
apart from the public status types (``JobStatus``, ``FlowView``, ...), which only the readers
of records load. :mod:`taskq.results` re-exports every name here, its public place."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from taskq import codec
from taskq.errors import ResultTooLarge, UnserializableResult

WAITING, SCHEDULED, RUNNING, RETRYING = "waiting", "scheduled", "running", "retrying"
SUCCEEDED, FAILED, UNKNOWN, PENDING = "succeeded", "failed", "unknown", "pending"
CANCELLED, EXPIRED = "cancelled", "expired"
SNOOZED = "snoozed"
"""The job raised (or returned) ``Snooze``: it waits in the schedule until ``due_ms``, on the
same attempt."""
STATES = (
    PENDING, WAITING, SCHEDULED, RUNNING, RETRYING, SNOOZED, SUCCEEDED, FAILED, CANCELLED,
    EXPIRED, UNKNOWN,
)  # fmt: skip
"""What ``job.status().state`` can be."""
MAX_MS = 2**53
"""Above this, a time in ms is not exact in a Lua (double) number: no script writes one."""
FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, EXPIRED})
"""The states a job ends in: its record then holds a result, its failure, or why it never
ran to an end (cancelled; expired before it started)."""


def encode_result(value: Any, *, max_bytes: int) -> bytes:
    """A task's return value as stored (msgpack with taskq's extension types, as arguments
    are: :mod:`taskq.codec`).

    Raises:
        UnserializableResult: msgpack cannot encode it (the message names the type).
        ResultTooLarge: it is over ``max_bytes`` encoded.
    """
    try:
        raw = codec.packb(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnserializableResult(
            f"the return value ({type(value).__name__}) is not msgpack-serializable: {exc}"
        ) from None
    if len(raw) > max_bytes:
        raise ResultTooLarge(
            f"the return value is {len(raw)} bytes encoded, over the {max_bytes}-byte limit "
            "(max_result_bytes)"
        )
    return raw


def decode_value(raw: bytes) -> Any:
    """A stored value (a result, the record's arguments), extension types decoded.

    Raises:
        ExtensionError: it holds an extension type this code does not know.
    """
    return codec.unpackb(raw)


def encode_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The arguments as the record keeps them: msgpack ``[args, kwargs]``."""
    return codec.packb([list(args), kwargs])


class Completion(NamedTuple):
    """What a success writes with its ack (the worker builds it, the fetch script writes it):
    the result in the job's record, if it keeps one, and the workflow ops it starts."""

    job_id: str
    recorded: bool
    ttl_ms: int
    value: bytes | None
    attempts: int
    duration_ms: float
    finished_mono: float
    """``time.monotonic()`` when the run ended: the record's times are placed on the Redis
    clock from it when the ack is sent."""
    ops: list[Any] | None = None
    """The workflow writes (``taskq.flow`` ops), if any."""
    op_keys: tuple[str, ...] = ()
    """The keys they touch."""


class FailedRun(NamedTuple):
    """A failed attempt to record with the retry or dead-letter move."""

    job_id: str
    ttl_ms: int
    attempt: int
    error_type: str
    error: str
    traceback: str


def read_ms(raw: Any) -> int | None:
    """A time in ms as Redis holds it (a due key, a record's ``due_ms``), rounded up to a
    whole ms; None for anything else (not a number, NaN, infinity, negative, absurdly large).
    Such values are untrusted: a script of an older version, or a hand, may have written a
    fraction. Rounded up because a due time read early would start a job before it is due.
    """
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw if 0 <= raw < MAX_MS else None
    if not isinstance(raw, bytes | str) or len(raw) > 32:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return math.ceil(value) if 0 <= value < MAX_MS else None  # False for NaN
