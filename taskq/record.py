"""The job status record ``<queue>:job:<id>``: the name of every field, in one place.

A job that keeps a record (the one word for it across the code is *recorded*: its body has
``result_ttl_s``, its stream entry a ``job`` field, ``Delivery.record_id`` is set) has this
hash from its enqueue to its record's TTL. The Lua scripts in ``taskq/broker/lua/`` write it
in the same step as the move they make, and Python reads it (``JobStatus.from_record``,
``Records``). Both spell the fields as below; ``tests/unit/test_record_fields.py`` reads every
script and fails on a record field that is not in :data:`FIELDS` or not in
docs/protocol.md's table ("Status records"), so a new field is added here, there, and in
the script that writes it, or the suite says which one is missing.

Per-job data from a running task (the pattern the next feature of that kind follows): the
child never writes Redis for it. It writes its scoreboard entry (``taskq.worker.scoreboard``:
shared memory, a fixed size per job, no system call), and its master flushes what changed
(``taskq.worker.marks``: every :data:`taskq.worker.marks.MARK_EVERY_S`, one pipelined script
per queue, ``start.lua`` today). The flush script declares every record in ``KEYS``, writes
only a record in the state the data belongs to (``start.lua`` changes a record only while it
says ``waiting``), so a late flush never overwrites an end or brings back a record that
expired, and adds no command to a job that keeps no record. What a job leaves at its end
(its result, its attempts) goes with the script that ends it, never with a flush. A master
that dies loses at most one interval of such data; the job's own end is unaffected.
"""

from __future__ import annotations

STATE = "state"
"""``pending``, ``waiting``, ``scheduled``, ``running``, ``retrying``, ``snoozed`` or a final state
(``taskq.results.STATES``)."""
TASK, QUEUE, PRIORITY = "task", "queue", "priority"
"""As in the body."""
ARGS = "args"
"""msgpack ``[args, kwargs]``."""
ENQUEUED_MS = "enqueued_ms"
ENTRY = "entry"
"""The job's current stream entry id."""
DUE_MS = "due_ms"
"""When a ``scheduled``, ``retrying`` or ``snoozed`` job is due (Redis clock)."""
WORKER = "worker"
"""The consumer running it (while ``running``)."""
STARTED_MS = "started_ms"
ATTEMPTS = "attempts"
"""Attempts used; a running job is on ``attempts + 1``."""
ATTEMPT_PREFIX = "attempt:"
"""``attempt:<n>``: failed attempt ``n``, a msgpack map (see :func:`attempt_number`)."""
FINISHED_MS = "finished_ms"
RESULT = "result"
"""The return value, msgpack (a succeeded job)."""
WAITED = "waited"
"""``1``: a waiter registered, so the job's end pushes onto its done list."""
HELD = "held"
"""The ``held`` set a job waits in for a concurrency slot."""
UNIQUE = "unique"
"""The uniqueness lock key the job's end (or cancel) releases."""
SLOT_FOR = "slot_for"
"""``<n>|<held key>``: a slot's release moved the job back from that held set with a slot
kept free for it; a cancel before it takes the slot passes it on."""
LATER = "later"
"""msgpack ``[[record key, done key, ttl ms], ...]``: later workflow steps that end with the
job if it is cancelled before it runs."""
CAUSE, CAUSE_TASK, CAUSE_TYPE, CAUSE_ERROR = "cause", "cause_task", "cause_type", "cause_error"
"""A workflow step failed without running: the id, task, error type and error of the
earlier step that failed."""
BATCH = "batch"
"""A batch job (``taskq.batching``): how many calls it holds (so far, while it fills)."""
FAIR_KEY = "fair_key"
"""A job on a fair queue: its fairness key (its ``entry`` is '' while it is staged)."""

FIELDS = (
    STATE, TASK, QUEUE, PRIORITY, ARGS, ENQUEUED_MS, ENTRY, DUE_MS, WORKER, STARTED_MS,
    ATTEMPTS, ATTEMPT_PREFIX + "<n>", FINISHED_MS, RESULT, WAITED, HELD, SLOT_FOR, UNIQUE, LATER,
    CAUSE, CAUSE_TASK, CAUSE_TYPE, CAUSE_ERROR, BATCH, FAIR_KEY,
)  # fmt: skip
"""Every field of the record, as docs/protocol.md lists them (``attempt:<n>`` for each
failed attempt)."""


def attempt_number(name: bytes) -> int | None:
    """``n`` if ``name`` is the field ``attempt:<n>``, else None."""
    prefix = ATTEMPT_PREFIX.encode()
    if name.startswith(prefix) and name[len(prefix) :].isdigit():
        return int(name[len(prefix) :])
    return None
