"""The fields of a job's body and the checks a decoded body passes (docs/protocol.md): a body
is untrusted input (any client with XADD on a stream writes one), so every value is checked
for its type, its range and, where it names keys, their ownership, before a worker acts on
it. :mod:`taskq.message` decodes with these."""

from __future__ import annotations

import logging
from typing import Any

from taskq.config import MAX_RESULT_TTL_S as MAX_TTL_S
from taskq.config import MAX_RETRIES, MAX_TIME_MS
from taskq.errors import ConfigError, DecodeError
from taskq.keys import PRIORITIES, check_job_id, is_plain_job_id

logger = logging.getLogger(__name__)

REQUIRED = object()
SCHEMA: tuple[tuple[str, type, Any], ...] = (
    ("task", str, REQUIRED),
    ("id", str, REQUIRED),
    ("args", list, ()),
    ("kwargs", dict, {}),
    ("queue", str, "tasks"),
    ("priority", str, "normal"),
    ("created_ms", int, 0),
    ("retries", int, 0),
    ("eta_ms", int, None),
    ("result_ttl_s", int, None),
    ("wf", dict, None),
    ("tick_ms", int, None),
    ("expires_ms", int, None),
    ("unique", str, None),
    ("headers", dict, None),
)
"""Body fields in Message order: name, type, default (absent optional fields take it)."""


OPTIONAL = ("eta_ms", "result_ttl_s", "wf", "tick_ms", "expires_ms", "unique", "headers")
"""Body fields written only when set."""
PLAIN_KEYS = ("v", "id", "task", "args", "kwargs", "queue", "priority", "created_ms", "retries")
"""The keys, in order, of a body that ``Message.encode`` writes when no optional field is set
(most jobs: ``Message.decode`` reads such a body in one step)."""
PLAIN_TYPES = (int, str, str, list, dict, str, str, int, int)
"""Their values' types (``bool`` is not ``int`` here, as the field checks have it)."""
PLAIN_SHAPES = {PLAIN_KEYS: PLAIN_TYPES, (*PLAIN_KEYS, "result_ttl_s"): (*PLAIN_TYPES, int)}
"""Plain bodies, by their keys: those of a job with no optional field, and of one whose only
optional field is its result's TTL (a job that stores its result); their values' types."""
KNOWN_KEYS = frozenset({"v", "snoozes", *(key for key, _, _ in SCHEMA)})
"""``snoozes`` (how often the job snoozed) is read only when it snoozes again:
:func:`taskq.message.snoozes_of`."""
_told: set[str] = set()


def tell_unknown(data: dict[Any, Any]) -> None:
    """Log, once per key and process, body keys this version does not know: a newer producer
    asked for something (a workflow step, say) that this worker will not do."""
    new = {str(k) for k in data if k not in KNOWN_KEYS} - _told
    if new:
        _told.update(new)
        logger.warning(
            "job %s has body key(s) %s that this worker does not know: it runs without them "
            "(upgrade the worker)",
            data.get("id"),
            ", ".join(sorted(new)),
        )


def check_values(
    body: bytes,
    task: str,
    msg_id: str,
    kwargs: dict[Any, Any],
    priority: str,
    retries: int,
    result_ttl_s: int | None,
) -> None:
    """The checks on well-typed fields' values: every number in range (a negative
    ``retries`` would buy runs past max_retries; a TTL past Lua's exact integers breaks the
    scripts that store the result), the id one that names keys safely."""
    if priority not in PRIORITIES:
        raise DecodeError(f"unknown priority {priority!r}", body)
    if not 0 <= retries <= MAX_RETRIES:
        raise DecodeError(f"body field 'retries' must be in [0, {MAX_RETRIES}]", body)
    if not task:
        raise DecodeError("body field 'task' is empty", body)
    if not is_plain_job_id(msg_id):
        try:
            check_job_id(msg_id)
        except ConfigError as exc:
            raise DecodeError(f"body field 'id': {exc}", body) from None
    if any(type(k) is not str for k in kwargs):
        raise DecodeError("body field 'kwargs' must have string keys", body)
    if result_ttl_s is not None and not 0 < result_ttl_s <= MAX_TTL_S:
        raise DecodeError(f"body field 'result_ttl_s' must be in [1, {MAX_TTL_S}]", body)


def check_maps(
    body: bytes,
    headers: dict[Any, Any] | None,
    wf: dict[Any, Any] | None,
    unique: str | None,
    queue: str,
    *,
    digests: bool,
) -> None:
    """The checks on the fields that carry maps or name keys (see :mod:`taskq.flowcheck`)."""
    if headers and not all(type(k) is str and type(v) is str for k, v in headers.items()):
        raise DecodeError("body field 'headers' must map strings to strings", body)
    from taskq.flowcheck import check_unique, check_wf  # (only bodies that name keys need it)

    if wf is not None:
        check_wf(wf, body, digests=digests)
    if unique is not None:
        check_unique(unique, queue, body)


def check_numbers(body: bytes, *times_ms: int | None) -> None:
    """Times a body carries are ms since the epoch, within what Lua holds exactly."""
    names = ("created_ms", "eta_ms", "tick_ms", "expires_ms")
    for name, value in zip(names, times_ms, strict=True):
        if value is not None and not 0 <= value <= MAX_TIME_MS:
            raise DecodeError(f"body field {name!r} must be in [0, {MAX_TIME_MS}]", body)


def typed_field(data: dict[Any, Any], key: str, kind: type, default: Any, body: bytes) -> Any:
    """Field ``key`` of a body, of type ``kind`` or absent (then ``default``); a DecodeError
    that names the field otherwise, so a bad body's dead letter says what was wrong."""
    value = data.get(key, default)
    if type(value) is kind or (value is default and default is not REQUIRED):
        return value
    if value is REQUIRED:
        raise DecodeError(f"body has no {key!r}", body)
    raise DecodeError(f"body field {key!r} must be {kind.__name__}", body)
