"""The dead-letter entry: one job that failed for good, as the worker writes it and every
reader (``taskq deadletter``, metrics, the dashboard) parses it.

An entry of ``<queue>:deadletter`` has the fields of :class:`Deadletter` but ``dead_id`` (the
entry id, which is the time of death on the Redis clock) and the two failure times, which the
script that moves the job writes from the Redis clock. ``fetch.lua`` writes the same fields
for a malformed schedule member; docs/protocol.md lists them for other languages.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from taskq import codec
from taskq.errors import DecodeError
from taskq.message import Message


@dataclass(frozen=True)
class Deadletter:
    """One dead-lettered job: the original job plus why and when it failed.

    Attributes:
        dead_id: its entry id in the dead-letter stream ("" before it is written).
        body: the job's body as it was delivered (msgpack), for a retry.
        attempts: runs used, counting the last.
        worker: the consumer that moved it.
        stream, entry_id: where it was when it failed.
        first_failure_ms, last_failure_ms: Redis clock; set by the script.
    """

    dead_id: str
    task: str
    job_id: str
    body: bytes
    error_type: str
    error: str
    traceback: str
    attempts: int
    first_failure_ms: int
    last_failure_ms: int
    worker: str
    stream: str
    entry_id: str

    def to_fields(self) -> list[Any]:
        """Field/value pairs the writer sends (the script adds the failure times)."""
        out: list[Any] = []
        for name in WRITTEN:
            out += (name, getattr(self, name))
        return out

    @classmethod
    def from_entry(cls, dead_id: bytes | str, raw: dict[bytes, bytes]) -> Deadletter:
        """Parse a stream entry (missing or mistyped fields become empty or 0)."""

        def text(name: str) -> str:
            return raw.get(name.encode(), b"").decode(errors="replace")

        def number(name: str) -> int:
            value = text(name)
            return int(value) if value.lstrip("-").isdigit() else 0

        return cls(
            dead_id.decode() if isinstance(dead_id, bytes) else dead_id,
            text("task"),
            text("job_id"),
            raw.get(b"body", b""),
            text("error_type"),
            text("error"),
            text("traceback"),
            number("attempts"),
            number("first_failure_ms"),
            number("last_failure_ms"),
            text("worker"),
            text("stream"),
            text("entry_id"),
        )

    def message(self) -> Message | None:
        """The job it holds, or None if the body is not a valid job."""
        try:
            return Message.decode(self.body)
        except DecodeError:
            return None

    def summary(self) -> dict[str, Any]:
        """JSON-ready, without the body and the traceback."""
        out = asdict(self)
        del out["body"], out["traceback"]
        return out

    def detail(self) -> dict[str, Any]:
        """JSON-ready, everything; the body decoded when it is a valid job, else in hex."""
        out = asdict(self)
        msg = self.message()
        out["body"] = (
            {
                "args": codec.jsonable(list(msg.args)),
                "kwargs": codec.jsonable(msg.kwargs),
                "priority": msg.priority,
                "created_ms": msg.created_ms,
            }
            if msg
            else self.body.hex()
        )
        return out


WRITTEN = tuple(
    f.name
    for f in fields(Deadletter)
    if f.name not in ("dead_id", "first_failure_ms", "last_failure_ms")
)
"""The fields a writer sends, in order."""
