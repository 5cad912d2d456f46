"""Live job telemetry as readers see it: progress, the output stream and the kept logs of a
job, their one wire format (docs/telemetry.md), and the exchanges that read them.

The worker's child writes them (``taskq/worker/telemetry.py``);
everything here reads. What is read is untrusted (any process with write access to the keys
may have put anything there), so each value is checked and a malformed one is skipped or
shown as it is, never raised.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import msgpack

from taskq.broker.replies import as_int, entries, flat_pairs, text
from taskq.broker.steps import Steps
from taskq.errors import BrokerRefused, ResultTimeout
from taskq.keys import QueueKeys
from taskq.storing import FINAL, UNKNOWN

if TYPE_CHECKING:
    from taskq.results import JobStatus  # (loaded by the readers of statuses, not here)

# -- the wire format -------------------------------------------------------------------

ATTEMPT_FIELD, CHUNK_FIELD, END_FIELD = b"a", b"c", b"end"
"""Fields of an output stream entry: the attempt that wrote it, and either its chunk
(msgpack) or, in the last entry of a job that ended, ``end`` with its final state."""

MAX_MESSAGE_CHARS = 1_000
"""A progress message is cut to this length."""


class Progress(NamedTuple):
    """A job's latest progress: ``done`` of ``total`` (None: unknown), a message, and when
    the task reported it (ms since the epoch, the worker's clock)."""

    done: float
    total: float | None
    message: str | None
    updated_ms: int


class Chunk(NamedTuple):
    """One ``emit`` of a job: ``id`` is its stream entry id (``after=`` resumes there),
    ``attempt`` the run that wrote it, ``value`` what was emitted (the raw bytes of a chunk
    that does not decode)."""

    id: str
    attempt: int
    value: Any


class LogRecord(NamedTuple):
    """A log record kept for a job."""

    level: str
    time_ms: int
    message: str
    attempt: int


class Logs(NamedTuple):
    """A job's kept log records, oldest first, and how many older ones were dropped."""

    records: tuple[LogRecord, ...]
    dropped: int


def progress_fields(
    done: float, total: float | None, message: str | None, at_ms: int, attempt: int
) -> list[Any]:
    """The progress hash as written (field, value, ...): every field, so that one ``HSET``
    replaces the last value whole (``total`` and ``message`` empty when there is none)."""
    return [
        "done", repr(done), "total", "" if total is None else repr(total),
        "message", (message or "")[:MAX_MESSAGE_CHARS], "updated_ms", at_ms, "attempt", attempt,
    ]  # fmt: skip


def check_number(name: str, value: object) -> float:
    """``value`` if it is a finite int or float, else TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"progress {name} must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"progress {name} must be finite, not {value!r}")
    return value


def encode_log(level: str, time_ms: int, message: str, attempt: int) -> bytes:
    packed: bytes = msgpack.packb([level, time_ms, message, attempt], use_bin_type=True)
    return packed


def parse_progress(raw: Any) -> Progress | None:
    """The progress hash (HGETALL), or None if there is none or it is malformed."""
    fields = flat_pairs(raw)
    done = _number(fields.get(b"done"))
    if done is None or b"updated_ms" not in fields:
        return None
    total = _number(fields.get(b"total"))
    message = text(fields.get(b"message") or b"")[:MAX_MESSAGE_CHARS]
    return Progress(done, total, message or None, as_int(fields.get(b"updated_ms")))


def parse_chunk(entry_id: str, fields: dict[bytes, Any]) -> Chunk | None:
    """An output entry as a chunk; None for the end entry."""
    if END_FIELD in fields:
        return None
    raw = fields.get(CHUNK_FIELD, b"")
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        value = raw
    return Chunk(entry_id, as_int(fields.get(ATTEMPT_FIELD)), value)


def parse_logs(items: Any, counters: Any) -> Logs:
    """The log list (LRANGE) and its counters (HGETALL); malformed records are skipped."""
    records = []
    for item in items if isinstance(items, list) else []:
        try:
            level, time_ms, message, attempt = msgpack.unpackb(item, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            continue
        if isinstance(level, str) and isinstance(message, str):
            records.append(LogRecord(level, as_int(time_ms), message, as_int(attempt)))
    dropped = max(0, as_int(flat_pairs(counters).get(b"dropped")))
    return Logs(tuple(records), dropped)


def _number(raw: Any) -> float | None:
    if raw is None:
        return None
    value = text(raw)
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return int(value) if value.lstrip("-").isdigit() else number


# -- reading ------------------------------------------------------------------------------


def progress_steps(queue: str, job_id: str) -> Steps[Progress | None]:
    """The job's latest progress, or None."""
    [raw] = yield [("HGETALL", QueueKeys(queue).progress(job_id))]
    return parse_progress(raw)


def logs_steps(queue: str, job_id: str) -> Steps[Logs]:
    """The job's kept log records and the dropped count."""
    k = QueueKeys(queue)
    items, counters = yield [("LRANGE", k.logs(job_id), 0, -1), ("HGETALL", k.logsize(job_id))]
    return parse_logs(items, counters)


def counts_steps(queue: str, job_id: str) -> Steps[tuple[int, int]]:
    """How many chunks the job's output stream holds (its end entry aside) and how many log
    records it keeps."""
    k = QueueKeys(queue)
    length, last, lines = yield [
        ("XLEN", k.output(job_id)),
        ("XREVRANGE", k.output(job_id), "+", "-", "COUNT", 1),
        ("LLEN", k.logs(job_id)),
    ]
    ended = any(END_FIELD in fields for _, fields in entries(last))
    return as_int(length) - int(ended), as_int(lines)


READ_SLICE_S = 1.0
"""Longest single blocking read of a stream reader; after an empty one it checks whether
the job ended without an end entry (one that never wrote telemetry, or died for good)."""
READ_COUNT = 500
"""Most chunks read in one round trip."""

StatusSteps: TypeAlias = "Steps[JobStatus]"


class OutputReader:
    """Reads one job's output stream in order, blocking in Redis (``XREAD BLOCK``), and
    knows when it has ended: at its end entry, or when the job's status is final (or
    unknown, with no stream to read) after a read that found nothing.

    Args:
        status: makes the steps that read the job's status (the handle's own).
        after: the entry id to resume after (None: from the start).
        timeout_s: the longest the whole read may last (None: until the job ends).
    """

    def __init__(
        self,
        queue: str,
        job_id: str,
        status: Any,
        *,
        after: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.key = QueueKeys(queue).output(job_id)
        self.job_id = job_id
        self.status = status
        self.after = after or "0-0"
        self.deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        self.ended = False
        self.end_state: str | None = None
        """The state its end entry names (None: it ended without one)."""

    def next_steps(self) -> Steps[list[Chunk]]:
        """The next chunks, in order; an empty list once the stream has ended.

        Raises:
            ResultTimeout: the reader's timeout passed before the job ended.
        """
        while not self.ended:
            chunks = yield from self.poll_steps(READ_SLICE_S)
            if chunks:
                return chunks
        return []

    def poll_steps(self, slice_s: float) -> Steps[list[Chunk]]:
        """One blocking read of at most ``slice_s``: the chunks that came (maybe none)."""
        left_s = self.deadline - time.monotonic()
        if left_s <= 0:
            raise ResultTimeout(f"job {self.job_id}: its output had not ended in time")
        chunks = yield from self._read_steps(max(1, int(min(left_s, slice_s) * 1000)))
        if not chunks and not self.ended and (yield from self._job_over_steps()):
            self.ended = True
            return (yield from self._read_steps(None))  # (what came meanwhile)
        return chunks

    def _read_steps(self, block_ms: int | None) -> Steps[list[Chunk]]:
        block = () if block_ms is None else ("BLOCK", block_ms)
        [reply] = yield [("XREAD", "COUNT", READ_COUNT, *block, "STREAMS", self.key, self.after)]
        rows = entries(reply[0][1]) if isinstance(reply, list) and reply else []
        chunks = []
        for entry_id, fields in rows:
            self.after = entry_id
            chunk = parse_chunk(entry_id, fields)
            if chunk is None:
                self.ended = True
                self.end_state = text(fields[END_FIELD])
                break
            chunks.append(chunk)
        return chunks

    def _job_over_steps(self) -> Steps[bool]:
        status = yield from self.status()
        if status.state in FINAL:
            return True
        if status.state != UNKNOWN:
            return False
        try:
            [exists] = yield [("EXISTS", self.key)]
        except BrokerRefused:
            return False
        return not exists


class Follower:
    """A job's telemetry as a live sequence of events, for ``taskq job ID --follow`` and the
    dashboard's live view: each call of :meth:`next_steps` blocks on the output stream for at
    most ``slice_s``, then returns the progress if it changed, the new log records and the
    new chunks; after the job's end, one last ``("end", state)``.

    Events: ``("progress", Progress)``, ``("log", LogRecord)``, ``("chunk", Chunk)``,
    ``("end", str)``.
    """

    def __init__(
        self,
        queue: str,
        job_id: str,
        status: Any,
        *,
        slice_s: float = 0.2,
        after: str | None = None,
    ) -> None:
        self.queue, self.job_id, self.status = queue, job_id, status
        self.reader = OutputReader(queue, job_id, status, after=after)
        self.slice_s = slice_s
        self.progress: Progress | None = None
        self.logs_seen = 0
        """Log records seen so far, dropped ones included (the list is trimmed at its head)."""
        self.done = False

    def next_steps(self) -> Steps[list[tuple[str, Any]]]:
        """The next events (maybe none); an empty list and :attr:`done` once it ended."""
        if self.done:
            return []
        chunks = yield from self.reader.poll_steps(self.slice_s)
        events: list[tuple[str, Any]] = []
        progress = yield from progress_steps(self.queue, self.job_id)
        if progress is not None and progress != self.progress:
            self.progress = progress
            events.append(("progress", progress))
        events += [("log", r) for r in (yield from self._new_logs_steps())]
        events += [("chunk", c) for c in chunks]
        if self.reader.ended:
            self.done = True
            state = self.reader.end_state
            if state is None:
                state = (yield from self.status()).state
            events.append(("end", state))
        return events

    def _new_logs_steps(self) -> Steps[list[LogRecord]]:
        k = QueueKeys(self.queue)
        length, counters = yield [
            ("LLEN", k.logs(self.job_id)),
            ("HGETALL", k.logsize(self.job_id)),
        ]
        total = as_int(length) + max(0, as_int(flat_pairs(counters).get(b"dropped")))
        new = min(total - self.logs_seen, as_int(length))
        if new <= 0:
            return []
        self.logs_seen = total
        [items] = yield [("LRANGE", k.logs(self.job_id), -new, -1)]
        return list(parse_logs(items, []).records)
