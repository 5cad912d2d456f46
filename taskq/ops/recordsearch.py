"""Searching a queue's status records (``<queue>:job:<id>``): every job that keeps one, in
any state, finished ones included (``taskq jobs search``, the dashboard's
``/queues/<queue>/search``).

A page is one ``SCAN`` with ``MATCH <queue>:job:*`` and a ``COUNT`` (so Redis walks about
that many keys of the keyspace per call), then one pipeline of ``HMGET`` of the fields a row
needs for the records it found, then, for those that pass every other filter and have
failed at least once, one pipeline of ``HMGET`` of their last attempt. Each command is small
(a SCAN step, one hash's few fields), so none holds Redis for long however many records
there are; the page says how many records it read and hands back SCAN's cursor for the
next one. SCAN returns every record that exists for the whole walk at least once; one
may come back twice (a page lists it once), and records made or gone during the walk may
or may not be seen.

On Redis Cluster a queue's records share its hash tag, so they are all on one node: the SCAN
is sent there (after an EXISTS of one of the queue's keys, which it rides with). A slot that
moves to another node during a walk leaves the cursor pointing into the old one: records may
then be missed; start again.

Records are untrusted: a key of another type, a field missing or malformed, arguments that
do not decode, read as what :meth:`~taskq.results.JobStatus.from_record` makes of them, or
the record is passed over.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from taskq import record
from taskq.broker.replies import as_int, text
from taskq.broker.resp import Command
from taskq.errors import ConfigError
from taskq.keys import QueueKeys, check_job_id
from taskq.ops.jobrows import JobFilter, JobRow, call_text, error_text
from taskq.results import STATES, UNKNOWN, JobStatus

if TYPE_CHECKING:
    from taskq.broker.link import Link

SCAN_COUNT = 500
"""The ``COUNT`` of one page's SCAN: about this many keys walked per page (and per call)."""
RECORD_STATES = tuple(s for s in STATES if s != UNKNOWN)
"""The states a record can say (a scheduled or retrying job past its due time reads as
``waiting``, as on the job page)."""
_FIELDS = (
    record.STATE, record.TASK, record.PRIORITY, record.ARGS, record.ENQUEUED_MS,
    record.DUE_MS, record.STARTED_MS, record.FINISHED_MS, record.ATTEMPTS,
    record.CAUSE, record.CAUSE_TYPE, record.CAUSE_ERROR,
)  # fmt: skip
"""What a row shows of a record (never ``result``: it may be large)."""


@dataclass(frozen=True)
class RecordsPage:
    """One SCAN page of a queue's records.

    Attributes:
        cursor: SCAN's cursor for the next page (None: the walk is complete).
        scanned: the records this page read (each once).
    """

    rows: tuple[JobRow, ...]
    cursor: str | None
    scanned: int


def check_scan_cursor(value: str | None) -> str:
    """A SCAN cursor (``0`` for None: the first page). Raises ConfigError for anything else."""
    if value is None or value == "":
        return "0"
    if not value.isdigit() or len(value) > 20:
        raise ConfigError(f"invalid cursor {value!r}: expected a SCAN cursor (digits)")
    return value


def check_record_state(state: str) -> None:
    """Raises ConfigError for a state no record says ('' is any)."""
    if state and state not in RECORD_STATES:
        raise ConfigError(f"unknown state {state!r}; use one of {', '.join(RECORD_STATES)}")


def _glob_escaped(text_: str) -> str:
    """``text_`` matched literally by a SCAN ``MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text_)


class Records:
    """The status records of one queue, searched a SCAN page at a time (on Redis Cluster,
    on the node that holds the queue's hash tag, where all of its records are)."""

    def __init__(self, link: Link, queue: str) -> None:
        self.link = link
        self.keys = QueueKeys(queue)
        self.prefix = self.keys.job("")

    def page(
        self,
        where: JobFilter,
        *,
        state: str = "",
        cursor: str | None = None,
        count: int = SCAN_COUNT,
    ) -> RecordsPage:
        """The records of one SCAN step from ``cursor`` that say ``state`` (any for '') and
        match ``where`` (its time range: when the job ended, else when it is due, else when
        it was enqueued).

        Raises:
            ConfigError: an unknown state or a malformed cursor.
        """
        check_record_state(state)
        start = check_scan_cursor(cursor)
        pattern = _glob_escaped(self.prefix) + "*"
        scan = ("SCAN", start, "MATCH", pattern, "COUNT", count, "TYPE", "hash")
        # On a cluster a keyless command rides with the one before it: the EXISTS of one of
        # the queue's keys sends the SCAN to the node that holds the queue's hash tag.
        _, reply = self.link.pipeline([("EXISTS", self.keys.schedule), scan])
        following, found = text(reply[0]), reply[1] if isinstance(reply[1], list) else []
        ids = [i for i in dict.fromkeys(self._job_id(k) for k in found) if i]
        rows = [r for r in self._rows(ids) if not state or r.state == state]
        rows = [r for r in rows if _matches_but_error(where, r)]
        rows = [r for r in self._with_errors(rows) if where.matches(r)]
        return RecordsPage(tuple(rows), None if following == "0" else following, len(ids))

    def _job_id(self, key: Any) -> str:
        """The job id a record key names ('' for one that names none)."""
        name = text(key) if isinstance(key, bytes) else ""
        job_id = name[len(self.prefix) :] if name.startswith(self.prefix) else ""
        try:
            check_job_id(job_id)
        except ConfigError:
            return ""
        return job_id

    def _rows(self, ids: list[str]) -> list[JobRow]:
        commands: list[Command] = [("HMGET", self.keys.job(i), *_FIELDS) for i in ids]
        commands.append(("TIME",))
        *replies, now = self.link.pipeline(commands, errors=False)
        now_ms = as_int(now[0]) * 1000 + as_int(now[1]) // 1000
        rows = []
        for job_id, reply in zip(ids, replies, strict=True):
            if not isinstance(reply, list) or len(reply) != len(_FIELDS):
                continue  # the key is gone or of another type now
            raw = {f.encode(): v for f, v in zip(_FIELDS, reply, strict=True) if v is not None}
            row = _row(JobStatus.from_record(job_id, raw, now_ms), raw)
            if row is not None:
                rows.append(row)
        return rows

    def _with_errors(self, rows: list[JobRow]) -> list[JobRow]:
        """Rows with their last failed attempt (``attempt:<attempts>``; a running job's
        record counts the attempt it is on), read for the rows that failed at least once."""
        failed = [r for r in rows if r.attempts > 0 and not r.error]
        commands = [
            ("HMGET", self.keys.job(r.job_id), f"attempt:{r.attempts}", f"attempt:{r.attempts - 1}")
            for r in failed
        ]
        replies = self.link.pipeline(commands, errors=False) if commands else []
        errors: dict[str, str] = {}
        for row, reply in zip(failed, replies, strict=True):
            raw = next((v for v in reply if v), None) if isinstance(reply, list) else None
            errors[row.job_id] = error_text(raw) if raw else ""
        return [replace(r, error=errors[r.job_id]) if r.job_id in errors else r for r in rows]


def _matches_but_error(where: JobFilter, row: JobRow) -> bool:
    """``where`` without its error text (read only for the rows that pass the rest)."""
    return where.matches(replace(row, error=where.error))


def _row(s: JobStatus, raw: dict[bytes, Any]) -> JobRow | None:
    """A record's row; None for one with no state (a key that is not a record)."""
    if s.state == UNKNOWN or record.STATE.encode() not in raw:
        return None
    cause = f"{s.cause.error_type}: {s.cause.error}" if s.cause is not None else ""
    return JobRow(
        job_id=s.job_id,
        task=s.task,
        state=s.state,
        priority=s.priority or None,
        ref=s.job_id,
        args=call_text(s.args, s.kwargs) if s.kwargs is not None else "(unreadable arguments)",
        attempts=s.attempts,
        enqueued_ms=s.enqueued_ms,
        due_ms=s.due_ms,
        finished_ms=s.finished_ms,
        error=cause,
        recorded=True,
    )
