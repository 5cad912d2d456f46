"""Reading and re-driving the dead-letter stream (``taskq deadletter``)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import redis

from taskq.app import App
from taskq.broker import Broker
from taskq.errors import DecodeError
from taskq.keys import QueueKeys
from taskq.message import Message, with_retries

DEAD_ID = re.compile(r"\d+-\d+")
"""A stream entry id, as dead-letter ids are."""


@dataclass(frozen=True)
class DeadJob:
    """One dead-letter entry: the original job plus why and when it failed."""

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

    @classmethod
    def from_entry(cls, dead_id: bytes, fields: dict[bytes, bytes]) -> DeadJob:
        def text(name: str) -> str:
            return fields.get(name.encode(), b"").decode(errors="replace")

        def number(name: str) -> int:
            raw = text(name)
            return int(raw) if raw.lstrip("-").isdigit() else 0

        return cls(
            dead_id.decode(),
            text("task"),
            text("job_id"),
            fields.get(b"body", b""),
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
        try:
            return Message.decode(self.body)
        except DecodeError:
            return None

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        del out["body"], out["traceback"]
        return out

    def detail(self) -> dict[str, Any]:
        out = asdict(self)
        msg = self.message()
        out["body"] = (
            {
                "args": list(msg.args),
                "kwargs": msg.kwargs,
                "priority": msg.priority,
                "created_ms": msg.created_ms,
            }
            if msg
            else self.body.hex()
        )
        return out


class DeadLetters:
    """The dead-letter stream of one queue."""

    def __init__(self, client: redis.Redis, queue: str, broker: Broker) -> None:
        self.client = client
        self.queue = queue
        self.key = QueueKeys(queue).deadletter
        self.broker = broker if queue in broker.keys else Broker(client, [queue])

    @classmethod
    def for_app(cls, app: App, queue: str | None = None) -> DeadLetters:
        """The dead letters of ``queue`` (default: the app's queue)."""
        return cls(app.broker.client, queue or app.settings.queue, app.broker)

    def now_ms(self) -> int:
        """The Redis clock (ms): the clock dead-letter ids and failure times are on."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def newest(self, *, limit: int = 50) -> list[DeadJob]:
        """Newest first."""
        return [DeadJob.from_entry(i, f) for i, f in self.client.xrevrange(self.key, count=limit)]

    def get(self, dead_id: str) -> DeadJob | None:
        if not DEAD_ID.fullmatch(dead_id):
            return None
        found = self.client.xrange(self.key, dead_id, dead_id)
        return DeadJob.from_entry(*found[0]) if found else None

    def count(self, *, older_than_ms: int | None = None) -> int:
        if older_than_ms is None:
            return int(self.client.xlen(self.key))
        return sum(1 for _ in self._scan(end=f"{older_than_ms}-0"))

    def retry(self, dead_ids: list[str] | None) -> tuple[int, list[tuple[str, str]]]:
        """Re-enqueue jobs (all if ``dead_ids`` is None).

        Returns:
            How many moved, and each id that did not with the reason.
        """
        ids = (
            [j.dead_id for j in self._scan()] if dead_ids is None else list(dict.fromkeys(dead_ids))
        )
        moved, skipped = 0, []
        for dead_id in ids:
            reason = self._retry_one(dead_id)
            if reason:
                skipped.append((dead_id, reason))
            else:
                moved += 1
        return moved, skipped

    def _retry_one(self, dead_id: str) -> str:
        """Back to the stream it died in (its queue's, by priority, if that is unknown).

        Returns why it could not be moved, or "" if it was.
        """
        job = self.get(dead_id)
        msg = job.message() if job else None
        if job is None:
            return "no such dead-lettered job"
        if msg is None:
            return "its body is not a valid job, so it cannot run (purge it instead)"
        k = QueueKeys(self.queue)
        stream = job.stream if job.stream in k.streams else k.stream(msg.priority)
        body = with_retries(job.body, 0)
        moved = self.broker.dead_retry(self.queue, dead_id, stream=stream, task=msg.task, body=body)
        return "" if moved else "no such dead-lettered job"

    def purge(self, *, older_than_ms: int | None = None) -> int:
        return self.broker.purge_dead(self.queue, older_than_ms=older_than_ms)

    def _scan(self, *, end: str = "+", page: int = 500) -> list[DeadJob]:
        out: list[DeadJob] = []
        start = "-"
        while True:
            rows = self.client.xrange(self.key, start, end, count=page)
            out += [DeadJob.from_entry(i, f) for i, f in rows]
            if len(rows) < page:
                return out
            start = "(" + rows[-1][0].decode()
