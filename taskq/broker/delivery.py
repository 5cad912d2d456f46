"""The Delivery: one stream entry handed to a consumer, as the broker reads it.

A stream entry's fields are untrusted input (any client with ``XADD`` on the stream writes
them), so they are parsed here, once, by :func:`delivery`, which never raises: an entry
whose fields are not what workers write comes back *malformed*, with the reason, and is
dead-lettered alone (the rest of the fetch or claim goes on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from taskq.errors import ConfigError
from taskq.keys import check_job_id, is_plain_job_id


class Delivery(NamedTuple):
    """One stream entry handed to a consumer: where it lives and its raw body.

    Attributes:
        deliveries: the entry's delivery count (1 for a fresh read; more once the sweep
            recovered it from a dead worker).
        first_failure_ms: when the job first failed (Redis clock), for a retried job.
        record_id: the job's id when it keeps a status record (the entry's ``job`` field);
            :attr:`recorded` says whether it does.
        malformed: why the entry's fields are not a job's (then it is dead-lettered, never
            run), or None.
    """

    stream: str
    queue: str
    priority: str
    entry_id: str
    deliveries: int
    body: bytes | None
    first_failure_ms: int | None = None
    record_id: str | None = None
    malformed: str | None = None

    @property
    def recorded(self) -> bool:
        """The job keeps a status record (taskq.record)."""
        return self.record_id is not None


MAX_FIRST_FAILURE_DIGITS = 15
"""An ``ff`` field is a time in ms (Redis clock): 13 digits until the year 2286."""
SHOWN_BYTES = 40
"""How much of a bad field value a reason quotes."""


def delivery(where: tuple[str, str, str], entry_id: str, fields: Mapping[Any, Any]) -> Delivery:
    """A fresh delivery of a stream entry (its fields as XREADGROUP returns them).

    Never raises: a bad field makes the delivery malformed (see :func:`entry_fields`).
    """
    stream, queue, priority = where
    body = fields.get(b"body")
    if type(body) is bytes and b"ff" not in fields:  # what producers write: checked at once
        job = fields.get(b"job")
        if job is None:
            return Delivery(stream, queue, priority, entry_id, 1, body)
        if type(job) is bytes and is_plain_job_id(plain := job.decode("latin-1")):
            return Delivery(stream, queue, priority, entry_id, 1, body, None, plain)
    body, ff, job_id, malformed = entry_fields(fields)
    return Delivery(stream, queue, priority, entry_id, 1, body, ff, job_id, malformed)


def entry_fields(
    fields: Mapping[Any, Any],
) -> tuple[bytes | None, int | None, str | None, str | None]:
    """The fields workers read, checked: ``body`` (bytes, required), ``ff`` (the first
    failure, ms: up to 15 decimal digits, or empty), ``job`` (a job id, UTF-8, as
    :func:`check_job_id` allows), and the first reason one of them is bad (or None). A field
    that parses is kept even when another is bad, so that the dead letter still ends the
    job's status record. Other fields (``task``, anything a producer adds) are never read,
    so no value of theirs can harm.
    """
    body, bad_body = _body(fields.get(b"body"))
    ff, bad_ff = _first_failure_ms(fields.get(b"ff"))
    job, bad_job = _record_id(fields.get(b"job"))
    return body, ff, job, bad_body or bad_ff or bad_job


def _body(value: Any) -> tuple[bytes | None, str | None]:
    """The ``body`` field, or why there is none (its bytes are the decoder's to judge)."""
    if value is None:
        return None, "entry has no 'body' field"
    if not isinstance(value, bytes):
        return None, "entry field 'body' is not a string"
    return value, None


def _first_failure_ms(value: Any) -> tuple[int | None, str | None]:
    """The ``ff`` field as ms (absent or empty: none), or why it is not a time in ms."""
    if value is None or value == b"":
        return None, None
    if isinstance(value, bytes) and len(value) <= MAX_FIRST_FAILURE_DIGITS and value.isdigit():
        return int(value), None
    return None, f"entry field 'ff' is not a time in ms: {_shown(value)}"


def _record_id(value: Any) -> tuple[str | None, str | None]:
    """The ``job`` field as a job id, or why it is not one."""
    if value is None:
        return None, None
    if not isinstance(value, bytes):
        return None, "entry field 'job' is not a string"
    try:
        job = value.decode()
        check_job_id(job)
    except (UnicodeDecodeError, ConfigError):
        return None, f"entry field 'job' is not a job id: {_shown(value)}"
    return job, None


def _shown(value: Any) -> str:
    """A bad field value as a reason quotes it: its repr, cut to ``SHOWN_BYTES``."""
    if isinstance(value, bytes) and len(value) > SHOWN_BYTES:
        return f"{value[:SHOWN_BYTES]!r}... ({len(value)} bytes)"
    return repr(value)[: SHOWN_BYTES * 4]


class Fetched(NamedTuple):
    """What one fetch returned: deliveries, and how long until the earliest delayed job or
    retry of the fetched queues is due (ms, Redis clock; 0: due now, -1: none)."""

    deliveries: list[Delivery]
    due_in_ms: int
