"""Reading and re-driving the dead-letter stream of a queue (``taskq deadletter``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from taskq.bodypatch import is_signed, with_retries
from taskq.broker.operators import Operators
from taskq.broker.reads import Reader
from taskq.deadletter import Deadletter
from taskq.keys import QueueKeys
from taskq.message import Message
from taskq.signing import SignatureError, Signer
from taskq.unique import DEFAULT_UNIQUE_FOR_S

if TYPE_CHECKING:
    from taskq.app import App

DEAD_ID = re.compile(r"\d+-\d+")
"""A stream entry id, as dead-letter ids are."""


UNIQUE_RETRY_HOLD_MS = int(DEFAULT_UNIQUE_FOR_S * 1000)
"""How long a retried unique job holds its key at most (its enqueue's ``unique_for`` is not
kept with the job); its end releases the key before that."""
SCAN_LIMIT = 500
"""Entries one filtered page reads at most: a search never scans the whole stream at once
(the page offers to go on from where it stopped)."""


@dataclass(frozen=True)
class Page:
    """Dead letters newest first, from a cursor.

    Attributes:
        rows: the matching entries.
        next_before: the cursor of the next (older) page: entries older than this id; None
            when the stream has no older entry.
        scanned: entries read to fill this page.
    """

    rows: tuple[Deadletter, ...]
    next_before: str | None
    scanned: int


def matches(job: Deadletter, *, task: str = "", error: str = "") -> bool:
    """Whether ``task`` is in the job's task name and ``error`` in its error type or message
    (both case-insensitive; an empty filter matches everything)."""
    found_error = f"{job.error_type}: {job.error}".lower()
    return task.lower() in job.task.lower() and error.lower() in found_error


class Deadletters:
    """The dead-letter stream of one queue: list, look up, retry, purge.

    Args:
        operators: the operator moves (retry, purge) on the queue's Redis.
        reader: reads on the same Redis.
        signer: the app's signer, when jobs are signed: a retried job's body is signed
            again (its attempt count is reset), and only if its signature held.
    """

    def __init__(
        self, operators: Operators, reader: Reader, queue: str, signer: Signer | None = None
    ) -> None:
        self.operators = operators
        self.reader = reader
        self.queue = queue
        self.signer = signer
        self.key = QueueKeys(queue).deadletter

    @classmethod
    def for_app(cls, app: App, queue: str | None = None) -> Deadletters:
        """The dead letters of ``queue`` (default: the app's queue)."""
        name = queue or app.settings.queue
        return cls(app.operators, app.reader, name, app.settings.signer)

    def now_ms(self) -> int:
        """The Redis clock (ms): the clock dead-letter ids and failure times are on."""
        return self.reader.now_ms()

    def newest(self, *, limit: int = 50) -> list[Deadletter]:
        """Newest first."""
        return self.reader.deadletters(self.queue, count=limit, newest_first=True)

    def page(
        self,
        *,
        before: str | None = None,
        limit: int = 50,
        task: str = "",
        error: str = "",
        scan_limit: int = SCAN_LIMIT,
    ) -> Page:
        """Up to ``limit`` matching entries older than ``before`` (all if None), newest first.

        XREVRANGE with COUNT from the cursor: the cost is the entries read (``limit`` without
        a filter, at most ``scan_limit`` with one), never the stream's length.
        """
        end = f"({before}" if before else "+"
        rows: list[Deadletter] = []
        scanned, last = 0, None
        while len(rows) < limit and scanned < scan_limit:
            count = min(limit if not (task or error) else 200, scan_limit - scanned)
            got = self.reader.deadletters(self.queue, end=end, count=count, newest_first=True)
            scanned += len(got)
            for job in got:
                last = job.dead_id
                if matches(job, task=task, error=error):
                    rows.append(job)
                    if len(rows) == limit:
                        break
            if len(got) < count:
                return Page(tuple(rows), None if len(rows) < limit else last, scanned)
            end = f"({last}"
        return Page(tuple(rows), last, scanned)

    def matching(self, *, task: str = "", error: str = "") -> list[str]:
        """The ids of every entry that matches (an operator's "retry all matching")."""
        return [j.dead_id for j in self._scan() if matches(j, task=task, error=error)]

    def get(self, dead_id: str) -> Deadletter | None:
        if not DEAD_ID.fullmatch(dead_id):
            return None
        found = self.reader.deadletters(self.queue, start=dead_id, end=dead_id, count=1)
        return found[0] if found else None

    def count(self, *, older_than_ms: int | None = None) -> int:
        if older_than_ms is None:
            return self.reader.deadletter_count(self.queue)
        return len(self._scan(end=f"{older_than_ms}-0"))

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
        if self.signer is not None:
            try:
                Message.decode(job.body, self.signer)
            except SignatureError as exc:  # retrying would vouch for a job no producer signed
                return f"{exc.reason}: not retried (purge it)"
        elif is_signed(job.body):
            return "a signed job: retrying it needs the signing keys (TASKQ_SIGNING_KEYS)"
        body = with_retries(job.body, 0, self.signer)
        lock = msg.unique
        if lock is not None and not lock.startswith(k.unique("")):
            return f"its uniqueness lock {lock!r} is not a key of queue {self.queue!r}"
        ttl_ms = msg.result_ttl_s * 1000 if msg.result_ttl_s is not None else None
        moved, holder = self.operators.deadletter_retry(
            self.queue, dead_id, stream=stream, task=msg.task, body=body, job_id=msg.id,
            record_ttl_ms=ttl_ms, lock=(lock, UNIQUE_RETRY_HOLD_MS) if lock else None,
        )  # fmt: skip
        if holder:
            return f"its unique key is held by job {holder}: retry it once that job has ended"
        return "" if moved else "no such dead-lettered job"

    def purge(self, *, older_than_ms: int | None = None) -> int:
        return self.operators.purge_deadletters(self.queue, older_than_ms=older_than_ms)

    def _scan(self, *, end: str = "+", page: int = 500) -> list[Deadletter]:
        out: list[Deadletter] = []
        start = "-"
        while True:
            rows = self.reader.deadletters(self.queue, start=start, end=end, count=page)
            out += rows
            if len(rows) < page:
                return out
            start = "(" + rows[-1].dead_id
