"""The rows of a queue's jobs per state as ``taskq jobs`` and the dashboard list them: what
a stream entry or a schedule / retry-set member says of its job, the filters over them, and
the cursors of their pages (checked: they come from URLs and command lines)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from taskq.broker.enqueue import member_body
from taskq.broker.replies import text
from taskq.errors import ConfigError
from taskq.keys import PRIORITIES
from taskq.message import Message

WAITING, RUNNING, RETRYING, SCHEDULED = "waiting", "running", "retrying", "scheduled"
HELD = "held"
"""Jobs of a concurrency-limited task waiting for a slot, out of their stream."""
PAUSED = "paused"
"""Jobs a worker set aside under a pause (``taskq pause``), out of their stream."""
DEBOUNCED, BATCHING = "debounced", "batching"
"""The job of a debounce burst, waiting in the schedule for the burst to end; a batching
task's calls, gathering in their batch until it is full or due (not a job yet)."""
STATES: tuple[str, ...] = (WAITING, RUNNING, RETRYING, SCHEDULED, HELD, PAUSED, DEBOUNCED, BATCHING)
"""The states a queue's jobs can be browsed in."""
PER_PRIORITY = frozenset({WAITING, RUNNING, RETRYING})
"""The states kept apart per priority (``?priority=``)."""

ACTIONS: dict[str, frozenset[str]] = {
    "cancel": frozenset({WAITING, RUNNING, RETRYING, SCHEDULED, HELD, PAUSED, DEBOUNCED}),
    "delete": frozenset({WAITING, RETRYING, SCHEDULED, DEBOUNCED}),
    "retry": frozenset({RETRYING, SCHEDULED, DEBOUNCED}),
    "move": frozenset({WAITING}),
}
"""Each action and the states it applies to. A paused job is only cancelled (through its
record: the pause's count is ``cancel.lua``'s); the control plane has no "run one paused job
now", so it is not offered. A filling batch has no action: its calls are not a job yet."""

MAX_ARGS_CHARS = 300
"""Arguments are rendered up to this long in a row (and searched in that rendering)."""


@dataclass(frozen=True)
class JobFilter:
    """Substrings (case-insensitive) a row must contain, and a time range its due time (else
    its enqueue time) must fall in (``since``/``until``: ISO 8601, UTC unless it says, or
    ms since the epoch); empty matches everything.

    Raises:
        ConfigError: a time that is neither.
    """

    task: str = ""
    args: str = ""
    error: str = ""
    since: str = ""
    until: str = ""

    def __post_init__(self) -> None:
        when_ms(self.since)
        when_ms(self.until)

    def __bool__(self) -> bool:
        return bool(self.task or self.args or self.error or self.since or self.until)

    @classmethod
    def parse(cls, specs: Sequence[str]) -> JobFilter:
        """From ``task=...``, ``args=...``, ``error=...`` specs (the CLI's ``--filter``).

        Raises:
            ConfigError: a spec names another field or has no ``=``.
        """
        found: dict[str, str] = {}
        for spec in specs:
            name, sep, value = spec.partition("=")
            if not sep or name not in ("task", "args", "error", "since", "until"):
                raise ConfigError(
                    f"bad filter {spec!r}: expected task=, args=, error=, since= or until="
                )
            found[name] = value
        return cls(**found)

    def matches(self, row: JobRow) -> bool:
        """The row's time is when it ended (a status record's), else when it is due, else
        when it was enqueued."""
        moment = next((t for t in (row.finished_ms, row.due_ms) if t is not None), None)
        return (
            self.task.lower() in row.task.lower()
            and self.args.lower() in row.args.lower()
            and self.error.lower() in row.error.lower()
            and self._in_range(moment if moment is not None else row.enqueued_ms)
        )

    def _in_range(self, ms: int | None) -> bool:
        since, until = when_ms(self.since), when_ms(self.until)
        if since is None and until is None:
            return True
        return ms is not None and (since or 0) <= ms and (until is None or ms <= until)


def when_ms(value: str) -> int | None:
    """A filter's time as ms since the epoch (None for ""): digits are ms, anything else is
    read as ISO 8601 (UTC unless it names its offset).

    Raises:
        ConfigError: neither.
    """
    value = value.strip()
    if not value:
        return None
    if value.isdigit() and len(value) <= 15:
        return int(value)
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"bad time {value!r}: expected ISO 8601 or ms since the epoch") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class JobRow:
    """One job as a browse page lists it.

    Attributes:
        ref: where it is: its entry id in a stream, or ``<score>/<job id>`` in a sorted set.
        due_ms: when a delayed job or retry is due (Redis clock).
        enqueued_ms: when its entry was added (streams) or it was first enqueued.
        run_ms: how long a running job has run (its entry's idle time in the pending list).
        finished_ms: when it ended (a status record's ``finished_ms``).
        error: the last error of a retrying job that keeps a record.
        calls: the calls a debounce burst or a batch gathered.
        member: the sorted-set member (not shown; what actions on it need).
    """

    job_id: str
    task: str
    state: str
    priority: str | None
    ref: str
    args: str = ""
    attempts: int = 0
    enqueued_ms: int | None = None
    due_ms: int | None = None
    run_ms: int | None = None
    finished_ms: int | None = None
    worker: str = ""
    child: int | None = None
    error: str = ""
    recorded: bool = False
    calls: int | None = None
    member: bytes = field(default=b"", repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "member"}


@dataclass(frozen=True)
class JobsPage:
    """One page of a state's jobs, oldest (or soonest due) first.

    Attributes:
        after: the cursor of the next page (None: this was the last), for :meth:`Jobs.page`.
        scanned: entries read to fill it (with a filter, at most the scan limit).
    """

    rows: tuple[JobRow, ...]
    after: str | None
    scanned: int


def check_state(state: str) -> None:
    """Raises ConfigError for a state that is not one of :data:`STATES`."""
    if state not in STATES:
        raise ConfigError(f"unknown state {state!r}; use one of {', '.join(STATES)}")


def check_action(action: str, state: str) -> None:
    """Raises ConfigError unless ``action`` applies to jobs in ``state``."""
    check_state(state)
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    if state not in ACTIONS[action]:
        raise ConfigError(f"{action} does not apply to {state} jobs")


def check_entry_cursor(value: str | None) -> str:
    """A stream entry id (``0-0`` for None). Raises ConfigError for anything else."""
    if value is None:
        return "0-0"
    ms, sep, seq = value.partition("-")
    if not (sep and ms.isdigit() and seq.isdigit() and len(value) <= 41):
        raise ConfigError(f"invalid cursor {value!r}: expected a stream entry id")
    return value


def check_rank_cursor(value: str | None) -> int:
    """A rank in a sorted set (0 for None). Raises ConfigError for anything else."""
    if value is None:
        return 0
    if not value.isdigit() or len(value) > 12:
        raise ConfigError(f"invalid cursor {value!r}: expected a rank")
    return int(value)


def member_ref(ref: str) -> tuple[int, str]:
    score, sep, job_id = ref.partition("/")
    if not (sep and score.isdigit() and job_id and len(ref) < 260):
        raise ConfigError(f"invalid job reference {ref!r}: expected <due ms>/<job id>")
    return int(score), job_id


def later_entry(a: str, b: str) -> str:
    """The later of two entry ids."""
    return max(a, b, key=lambda e: tuple(int(x) for x in e.split("-", 1)))


def _decoded(body: Any) -> Message | None:
    """The job a body holds (signature not checked: it is only shown), or None."""
    if not isinstance(body, bytes):
        return None
    try:
        return Message.decode(body)
    except Exception:
        return None


def _call_text(msg: Message | None) -> str:
    return "(unreadable body)" if msg is None else call_text(msg.args, msg.kwargs)


def call_text(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A call's arguments as a row shows them (and a filter's ``args=`` searches them)."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    rendered = ", ".join(parts)
    return rendered if len(rendered) <= MAX_ARGS_CHARS else rendered[:MAX_ARGS_CHARS] + "..."


def entry_row(entry_id: str, fields: dict[bytes, Any], state: str, priority: str) -> JobRow:
    msg = _decoded(fields.get(b"body"))
    return JobRow(
        job_id=msg.id if msg else text(fields.get(b"job", b"")),
        task=text(fields.get(b"task", b"")),
        state=state,
        priority=priority,
        ref=entry_id,
        args=_call_text(msg),
        attempts=msg.retries if msg else 0,
        enqueued_ms=int(entry_id.split("-", 1)[0]),
        recorded=b"job" in fields or bool(msg and msg.recorded),
    )


def member_row(member: bytes, score: int, state: str) -> JobRow:
    """A schedule member ``<p>\\n<task>\\n<body>`` (a retry member after a first line)."""
    rest = member.split(b"\n", 1)[1] if state == RETRYING and b"\n" in member else member
    head, _, body = rest.partition(b"\n")
    task, _, body = body.partition(b"\n")
    body = member_body(body)
    p = int(head) if head in (b"0", b"1", b"2") else 1
    msg = _decoded(body)
    job_id = msg.id if msg else ""
    return JobRow(
        job_id=job_id,
        task=text(task),
        state=state,
        priority=PRIORITIES[p],
        ref=f"{score}/{job_id}",
        args=_call_text(msg),
        attempts=msg.retries if msg else 0,
        enqueued_ms=msg.created_ms if msg else None,
        due_ms=None if state in (HELD, PAUSED) else score,
        recorded=bool(msg and msg.recorded),
        member=member,
    )


def error_text(raw: Any) -> str:
    try:
        attempt = msgpack.unpackb(raw, raw=False)
    except Exception:
        return ""
    if not isinstance(attempt, dict):
        return ""
    return f"{attempt.get('error_type', '')}: {attempt.get('error', '')}"[:MAX_ARGS_CHARS]


def batch_row(call: bytes, due_ms: int, calls: int) -> JobRow | None:
    """A filling batch, from its first call (``<call id>\n<body>``: the batch job's id and
    its arguments) and its gathering index's due time; None if the call is malformed."""
    call_id, sep, body = call.partition(b"\n")
    msg = _decoded(body)
    if not (sep and call_id and msg is not None):
        return None
    job_id = text(call_id)
    return JobRow(
        job_id=job_id,
        task=msg.task,
        state=BATCHING,
        priority=None,
        ref=f"{due_ms}/{job_id}",
        args=_call_text(msg),
        enqueued_ms=msg.created_ms,
        due_ms=due_ms,
        recorded=msg.recorded,
        calls=calls,
    )
