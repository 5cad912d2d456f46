"""Browsing the jobs of one queue in one state, and acting on them (``taskq jobs``, the
dashboard's ``/queues/<queue>/<state>`` pages).

Every page is read with cursors straight from Redis: XRANGE / XPENDING with COUNT after an
entry id for the streams, ZRANGE by rank with a LIMIT for the schedule and the retry sets, so
a page costs the entries it reads (at most :data:`SCAN_LIMIT` with a filter), never the
state's size. Every action is one script per batch (``jobs_remove``, ``jobs_retry_now``,
``jobs_move``) or, for a job that keeps a record, ``cancel.lua`` through ``Job.cancel``: no
job is ever in two places or in none, and running an action twice changes nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from taskq.broker.replies import as_int, entries, pending_rows, text
from taskq.keys import GROUP, PRIORITIES, QueueKeys, check_job_id, check_priority
from taskq.ops import gathered
from taskq.ops.deadletters import SCAN_LIMIT
from taskq.ops.jobrows import (
    ACTIONS,
    BATCHING,
    DEBOUNCED,
    HELD,
    PAUSED,
    RETRYING,
    RUNNING,
    SCHEDULED,
    WAITING,
    JobFilter,
    JobRow,
    JobsPage,
    check_action,
    check_entry_cursor,
    check_rank_cursor,
    check_state,
    entry_row,
    error_text,
    later_entry,
    member_ref,
    member_row,
)

if TYPE_CHECKING:
    from taskq.app import App
    from taskq.ops.inspect import ChildState

BATCH = 500
"""Jobs one action script handles at most: Redis is never held long by one call."""
RECORD_TTL_MS = 86_400_000
"""How long the record of a job removed from a queue is kept (it ends as cancelled)."""
Audit = Callable[[str, str, str, int], None]
"""Records an operator action: (action, queue, state, jobs affected)."""


def no_audit(action: str, queue: str, state: str, count: int) -> None:
    """The default audit: nothing is recorded (a queue's audit stream can be wired in here)."""


class Jobs:
    """The jobs of one queue, per state: pages and actions.

    Args:
        audit: called once per action with what it did (see :data:`Audit`).
    """

    def __init__(
        self, app: App, queue: str, *, audit: Audit = no_audit, held_task: str = ""
    ) -> None:
        self.app = app
        self.queue = queue
        self.keys = QueueKeys(queue)
        self.audit = audit
        self.of = held_task
        self.held_task = held_task or next(iter(self.held_tasks()), "")

    def held_tasks(self) -> list[str]:
        """The app's tasks whose jobs can wait for a concurrency slot in one held set (those
        with a ``concurrency_limit`` and no ``limit_key``), by name."""
        registry = self.app.registry
        return sorted(
            name
            for name in registry.names()
            if registry.get(name).options.concurrency_limit is not None
            and registry.get(name).options.limit_key is None
        )

    def pause_field(self) -> str:
        """The pause whose jobs a ``paused`` page lists: the one asked for (``of``) if it is
        one of the queue's, else the first ('' when the queue has none)."""
        fields = gathered.pause_fields(self.app.link, self.queue)
        return self.of if self.of in fields else next(iter(fields), "")

    def _set_key(self, state: str, priority: str) -> str:
        """The sorted set a state's jobs sit in (a debounced job's: the schedule)."""
        if state == HELD:
            return self.keys.held(self.held_task)
        if state == PAUSED:
            return self.keys.aside(self.pause_field())
        return self.keys.retry(priority) if state == RETRYING else self.keys.schedule

    # -- reading ---------------------------------------------------------------------------

    def page(
        self,
        state: str,
        *,
        priority: str = "normal",
        after: str | None = None,
        limit: int = 50,
        where: JobFilter | None = None,
        scan_limit: int = SCAN_LIMIT,
    ) -> JobsPage:
        """Up to ``limit`` jobs in ``state`` that match ``where``, after the cursor ``after``.

        Raises:
            ConfigError: an unknown state or priority, or a malformed cursor.
        """
        check_state(state)
        check_priority(priority)
        where = where or JobFilter()
        rows: list[JobRow] = []
        scanned, cursor = 0, after
        while len(rows) < limit and scanned < scan_limit:
            count = min(limit if not where else 200, scan_limit - scanned)
            got, cursor = self._read(state, priority, cursor, count)
            # A read that did not reach the end read ``count`` entries, whatever rows it gave
            # (a gathering page passes over the other kind's members and stale ones).
            scanned += count if cursor is not None else len(got)
            rows += [r for r in got if where.matches(r)][: limit - len(rows)]
            if cursor is None:
                break
        return JobsPage(tuple(rows), cursor, scanned)

    def each(
        self, state: str, *, priority: str = "normal", where: JobFilter | None = None
    ) -> Iterator[list[JobRow]]:
        """Every matching job of a state, a page at a time (an operator's "all that match").
        Each page is read by rank or entry id from where the last one ended."""
        after: str | None = None
        while True:
            page = self.page(
                state, priority=priority, after=after, limit=BATCH, where=where,
                scan_limit=max(SCAN_LIMIT, BATCH),
            )  # fmt: skip
            if page.rows:
                yield list(page.rows)
            if page.after is None:
                return
            after = page.after

    def _read(
        self, state: str, priority: str, after: str | None, count: int
    ) -> tuple[list[JobRow], str | None]:
        """One read of ``count`` entries from the cursor; the next cursor (None at the end)."""
        if state == WAITING:
            return self._waiting(priority, after, count)
        if state == RUNNING:
            return self._running(priority, after, count)
        if state in (DEBOUNCED, BATCHING):
            read = gathered.debounced if state == DEBOUNCED else gathered.batching
            return read(self.app.link, self.queue, after, count)
        return self._members(state, self._set_key(state, priority), after, count)

    def _waiting(
        self, priority: str, after: str | None, count: int
    ) -> tuple[list[JobRow], str | None]:
        stream = self.keys.stream(priority)
        start = later_entry(self._last_delivered(stream), check_entry_cursor(after))
        found = entries(self.app.link.call("XRANGE", stream, f"({start}", "+", "COUNT", count))
        rows = [entry_row(eid, f, WAITING, priority) for eid, f in found]
        return rows, (found[-1][0] if len(found) == count else None)

    def _running(
        self, priority: str, after: str | None, count: int
    ) -> tuple[list[JobRow], str | None]:
        stream = self.keys.stream(priority)
        start = f"({check_entry_cursor(after)}" if after else "-"
        pending = pending_rows(
            self.app.link.pipeline([("XPENDING", stream, GROUP, start, "+", count)], errors=False)[
                0
            ]
        )
        commands = [("XRANGE", stream, eid, eid) for eid, *_ in pending]
        found = self.app.link.pipeline(commands) if commands else []
        children = self._children()
        rows = []
        for (eid, consumer, idle_ms, deliveries), reply in zip(pending, found, strict=True):
            fields = entries(reply)
            row = entry_row(eid, fields[0][1] if fields else {}, RUNNING, priority)
            child = children.get(eid)
            rows.append(
                replace(
                    row,
                    run_ms=child.running_ms if child and child.running_ms is not None else idle_ms,
                    worker=child.worker if child else consumer,
                    child=child.index if child else None,
                    attempts=max(row.attempts, deliveries),
                )
            )
        return rows, (pending[-1][0] if len(pending) == count else None)

    def _members(
        self, state: str, key: str, after: str | None, count: int
    ) -> tuple[list[JobRow], str | None]:
        start = check_rank_cursor(after)
        reply = self.app.link.call("ZRANGE", key, start, start + count - 1, "WITHSCORES")
        pairs = [(reply[i], as_int(reply[i + 1])) for i in range(0, len(reply), 2)]
        rows = [member_row(m, score, state) for m, score in pairs]
        if state == RETRYING:
            rows = self._with_errors(rows)
        return rows, (str(start + count) if len(pairs) == count else None)

    def _with_errors(self, rows: list[JobRow]) -> list[JobRow]:
        """Retrying rows with the last error their records hold (one pipeline for all)."""
        commands = [
            ("HGET", self.keys.job(r.job_id), f"attempt:{n}")
            for r in rows
            for n in (r.attempts, r.attempts + 1)
        ]
        replies = self.app.link.pipeline(commands) if commands else []
        out = []
        for i, row in enumerate(rows):
            raw = replies[2 * i + 1] or replies[2 * i]
            out.append(replace(row, error=error_text(raw)) if raw else row)
        return out

    def _last_delivered(self, stream: str) -> str:
        reply = self.app.link.pipeline([("XINFO", "GROUPS", stream)], errors=False)[0]
        for group in reply if isinstance(reply, list) else []:
            info = {text(group[i]): group[i + 1] for i in range(0, len(group) - 1, 2)}
            if text(info.get("name", b"")) == GROUP:
                return text(info.get("last-delivered-id", b"0-0"))
        return "0-0"

    def _children(self) -> dict[str, ChildState]:
        """Entry id -> the child that runs it, from the workers' heartbeats."""
        from taskq.ops.inspect import Inspector

        workers = Inspector(self.app.reader, [self.queue]).workers()
        return {c.entry_id: c for w in workers for c in w.children if c.entry_id}

    # -- acting ----------------------------------------------------------------------------

    def cancel(self, state: str, rows: Sequence[JobRow]) -> int:
        """Cancel jobs: a running one that keeps a record through ``cancel.lua`` (its worker
        interrupts it; one without a record cannot be), the others removed from where they
        wait, a batch per script. Returns how many were."""
        check_action("cancel", state)
        if state in (RUNNING, HELD, PAUSED):  # a held job's slot accounting is cancel.lua's
            done = sum(self._cancel_one(row) for row in rows if row.recorded and row.job_id)
        else:
            done = self._remove(state, rows, counted="cancelled")
        self.audit("cancel", self.queue, state, done)
        return done

    def _cancel_one(self, row: JobRow) -> bool:
        outcome = self.app.job(row.job_id, queue=self.queue).cancel(terminate=True)
        return outcome in ("cancelled", "terminating")

    def delete(self, state: str, rows: Sequence[JobRow]) -> int:
        """Remove jobs that no worker has taken from the queue (a recorded one ends as
        cancelled). Returns how many were removed."""
        check_action("delete", state)
        done = self._remove(state, rows, counted="")
        self.audit("delete", self.queue, state, done)
        return done

    def retry_now(self, state: str, rows: Sequence[JobRow]) -> int:
        """Make delayed jobs or retries due now: the workers' housekeeping moves them into
        their streams on its next round (tens of ms). Returns how many were made due."""
        check_action("retry", state)
        done = 0
        for key, batch in self._by_key(state, rows):
            members = [r.member for r in batch]
            done += as_int(
                self.app.link.script(
                    "jobs_retry_now", [key, self.keys.due], [_kind(state), *members]
                )
            )
        self.audit("retry", self.queue, state, done)
        return done

    def move(self, rows: Sequence[JobRow], priority: str) -> int:
        """Move waiting jobs to the stream of another priority. Returns how many moved."""
        check_priority(priority)
        done = 0
        for source, batch in self._by_key(WAITING, rows):
            refs = [r.ref for r in batch]
            done += as_int(
                self.app.link.script(
                    "jobs_move",
                    [source, self.keys.stream(priority)],
                    [GROUP, priority, *refs],
                )
            )
        self.audit("move", self.queue, WAITING, done)
        return done

    def act(self, action: str, state: str, rows: Sequence[JobRow], *, to: str = "") -> int:
        """One of :data:`ACTIONS` by name (``to``: the priority a move goes to)."""
        check_action(action, state)
        if action == "move":
            return self.move(rows, to)
        if action == "retry":
            return self.retry_now(state, rows)
        return self.cancel(state, rows) if action == "cancel" else self.delete(state, rows)

    def find(self, state: str, refs: Sequence[str], *, priority: str = "normal") -> list[JobRow]:
        """The rows of the jobs at ``refs`` (as :attr:`JobRow.ref` gives them) still there."""
        check_state(state)
        check_priority(priority)
        if state in (WAITING, RUNNING):
            stream = self.keys.stream(priority)
            ids = [check_entry_cursor(r) for r in refs]
            found = self.app.link.pipeline([("XRANGE", stream, i, i) for i in ids]) if ids else []
            rows = [entry_row(eid, f, state, priority) for rep in found for eid, f in entries(rep)]
            return rows
        key = self._set_key(state, priority)
        wanted = [member_ref(r) for r in refs]
        commands = [("ZRANGE", key, score, score, "BYSCORE") for score, _ in wanted]
        found = self.app.link.pipeline(commands) if commands else []
        rows = []
        for (score, job_id), members in zip(wanted, found, strict=True):
            rows += [
                r for r in (member_row(m, score, state) for m in members) if r.job_id == job_id
            ]
        return rows

    def locate(self, job_id: str) -> tuple[str, JobRow] | None:
        """Where a job that keeps a record is now (its state and row), from its record; None
        for a job without one, or one no longer in a state that can be browsed."""
        check_job_id(job_id)
        state, priority, entry, due = (
            text(v) if v is not None else ""
            for v in self.app.link.call(
                "HMGET", self.keys.job(job_id), "state", "priority", "entry", "due_ms"
            )
        )
        if state not in ACTIONS["cancel"] or priority not in PRIORITIES:
            return None
        if state == WAITING and entry:
            ref = entry
            running = self.app.link.pipeline(
                [("XPENDING", self.keys.stream(priority), GROUP, entry, entry, 1)], errors=False
            )[0]
            state = RUNNING if pending_rows(running) else WAITING
        elif state == RUNNING and entry:
            ref = entry
        elif state in (RETRYING, SCHEDULED) and due.isdigit():
            ref = f"{due}/{job_id}"
        else:
            return None
        found = self.find(state, [ref], priority=priority)
        return (state, found[0]) if found else None

    def _remove(self, state: str, rows: Sequence[JobRow], *, counted: str) -> int:
        """``jobs_remove`` a batch at a time; the jobs it hands back (later workflow steps,
        a slot kept for them) are cancelled one by one with ``cancel.lua``."""
        done = 0
        for key, batch in self._by_key(state, rows):
            by_ref = {(r.ref if state == WAITING else r.member): r for r in batch}
            removed, *handed = self.app.link.script(
                "jobs_remove",
                [key, self.keys.counts],
                [GROUP, _kind(state), RECORD_TTL_MS, counted, *by_ref],
            )
            done += as_int(removed)
            done += sum(self._cancel_one(by_ref[_ref(state, h)]) for h in handed)
        return done

    def _by_key(self, state: str, rows: Sequence[JobRow]) -> Iterator[tuple[str, list[JobRow]]]:
        """The rows grouped by the key they sit in, in batches of :data:`BATCH`."""
        groups: dict[str, list[JobRow]] = {}
        for row in rows:
            groups.setdefault(self._key_of(state, row), []).append(row)
        for key, group in groups.items():
            for i in range(0, len(group), BATCH):
                yield key, group[i : i + BATCH]

    def _key_of(self, state: str, row: JobRow) -> str:
        if state in (SCHEDULED, DEBOUNCED):
            return self.keys.schedule
        priority = row.priority or "normal"
        check_priority(priority)
        return self.keys.retry(priority) if state == RETRYING else self.keys.stream(priority)


def _ref(state: str, reply: bytes) -> str | bytes:
    """A ref the script handed back, as the batch named it (entry ids as text)."""
    return reply.decode() if state == WAITING else reply


def _kind(state: str) -> str:
    return {WAITING: "stream", RETRYING: "retry", SCHEDULED: "schedule", DEBOUNCED: "schedule"}[
        state
    ]
