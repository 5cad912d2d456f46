"""Shared memory between a worker's master and its children: one fixed-size slot per child.

A child writes what it runs (a few hundred bytes, no system call) and the master reads it to
enforce hard time limits, to hand back the jobs of a child that died, and for the heartbeat
record. The stream a job came from is kept as its index in the worker's stream list, never
as a name, so no queue name is too long for the slot.

A child that runs async jobs runs several at once: its slot has one job entry per coroutine
it may run (``jobs``, its ``--async-concurrency``); a child of sync jobs uses entry 0 only. The
master reads every entry in use: hard time limits and cancellation act on one entry (one
coroutine), and the jobs of a child that died are told apart as running or not started.

A child with adaptive prefetch also lists the batch it holds. When a job of the batch runs
long, the master *revokes* the rest of the batch (the jobs not started yet) and hands them
back for other children, and the child skips them.

Each slot has a lock (a process-shared semaphore made before the child is forked). The child
holds it while it marks a job started or finished, and the master while it acts on what the
slot says (a kill for the hard time limit, a revocation), so neither acts on a state the
other has just left.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
import time
from _multiprocessing import SemLock  # type: ignore[import-not-found]  # (no stub)
from collections.abc import Sequence
from typing import Protocol

from taskq.worker.outcome import COUNTED, COUNTERS, DEAD, OK, RETRY
from taskq.worker.runstats import TABLE_SIZE, RunTable, TaskRuns, take
from taskq.worker.slotview import Running, SlotView

_JOB = struct.Struct("<qddqdq48s160s64s")
"""seq, started (wall s), started (monotonic s), stream index, hard deadline (monotonic s),
flags (CANCEL, RECORDED), entry id, task, job id."""
CANCEL, RECORDED = 1, 2
"""Flags of a job entry: the master asked for the job to be interrupted; the job keeps a
status record (only those can be cancelled, so the master checks only those)."""
_COUNTS = struct.Struct("<qqqq")  # processed, failed, retried, dead
_PID = struct.Struct("<q")
_BATCH = struct.Struct("<qqqq")  # batch number, length, next to start, revoked (0/1)
_ENTRY = struct.Struct("<h48s")  # stream index, entry id
_IN_USE = struct.Struct("<q")  # job entries the child has used (a high-water mark)
MAX_BATCH = 64
"""Jobs of one batch the slot can list (adaptive prefetch never takes more)."""
_COUNTS_AT = 0
_PID_AT = _COUNTS_AT + _COUNTS.size
_BATCH_AT = _PID_AT + _PID.size
_ENTRIES_AT = _BATCH_AT + _BATCH.size
_IN_USE_AT = _ENTRIES_AT + MAX_BATCH * _ENTRY.size
_JOBS_AT = _IN_USE_AT + _IN_USE.size
PAGE = 4096
SLOT_SIZE = PAGE
"""The size of a slot with one job entry (a sync child's)."""
assert _JOBS_AT + _JOB.size <= SLOT_SIZE
LOCK_TIMEOUT_S = 0.5
"""How long the master waits for a slot's lock; a child holds it for microseconds."""
_SEQ = struct.Struct("<q")
_STARTED = struct.Struct("<d")
_BATCH_FIELD = struct.Struct("<q")
_NEXT_AT = _BATCH_AT + 2 * _BATCH_FIELD.size
_REVOKED_AT = _BATCH_AT + 3 * _BATCH_FIELD.size
_IDLE_FIELDS = struct.pack("<ddqdq", 0.0, 0.0, -1, 0.0, 0)
"""A job entry's fields after its seq once its job ended (started 0: idle). Its text fields
keep the last job's: no reader looks past ``started`` of an idle entry."""


_SEMAPHORE = 1  # multiprocessing.synchronize.SEMAPHORE: a lock any process may release
_LOCK_NAMES = itertools.count()


class Lock(Protocol):
    """A slot's lock: a semaphore in shared memory, which forked children share."""

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(self, *exc: object) -> None: ...


def new_lock() -> Lock:
    """A process-shared lock, as ``multiprocessing.Lock()`` makes it for a forked child (the
    same C semaphore, its name unlinked at once), without loading the ``multiprocessing``
    package: with the ``pickle`` it brings, about 13M instructions (some 2.5 ms) of every
    worker's start."""
    while True:
        name = f"/taskq-{os.getpid()}-{next(_LOCK_NAMES)}"
        try:
            return SemLock(_SEMAPHORE, 1, 1, name, True)  # type: ignore[no-any-return]
        except FileExistsError:  # a semaphore of that name is being made by another process
            continue


def slot_size(jobs: int) -> int:
    """Bytes of a slot with ``jobs`` job entries and its run table, whole pages."""
    need = _runs_at(jobs) + TABLE_SIZE
    return -(-need // PAGE) * PAGE


def _runs_at(jobs: int) -> int:
    """Where a slot's run table (:mod:`taskq.worker.runstats`) starts."""
    return _JOBS_AT + max(1, jobs) * _JOB.size


class Scoreboard:
    """``size`` slots of ``jobs`` job entries each, in an anonymous shared mapping, created
    before the children are forked."""

    def __init__(self, size: int, jobs: int = 1) -> None:
        self.size = size
        self.jobs = max(1, jobs)
        self.slot_size = slot_size(self.jobs)
        self._mem = mmap.mmap(-1, self.slot_size * max(1, size))
        self._locks = [new_lock() for _ in range(size)]

    def slot(self, index: int) -> Slot:
        return Slot(self._mem, index * self.slot_size, self._locks[index], self.jobs)

    def take_runs(self, index: int, *, exited: bool = False) -> list[TaskRuns]:
        """The runs a child counted since the last take, per (stream, task), emptied. A child
        that ``exited`` may have died holding the lock: its table is read without it."""
        lock = self._locks[index]
        locked = lock.acquire(timeout=0 if exited else LOCK_TIMEOUT_S)
        if not (locked or exited):
            return []  # next heartbeat
        try:
            return take(self._mem, index * self.slot_size + _runs_at(self.jobs))
        finally:
            if locked:
                lock.release()

    def lock(self, index: int) -> Lock:
        """The slot's lock, for the master to hold while it acts on what it read."""
        return self._locks[index]

    def read(self, index: int) -> SlotView:
        base = index * self.slot_size
        mem = self._mem
        processed, failed, retried, dead = _COUNTS.unpack_from(mem, base + _COUNTS_AT)
        (pid,) = _PID.unpack_from(mem, base + _PID_AT)
        batch_no, length, nxt, revoked = _BATCH.unpack_from(mem, base + _BATCH_AT)
        return SlotView(
            pid,
            processed,
            failed,
            retried,
            dead,
            batch_no=batch_no,
            batch_len=length,
            batch_next=nxt,
            revoked=bool(revoked),
            running=self._running(base),
        )

    def _running(self, base: int) -> tuple[Running, ...]:
        """The jobs running in a slot, in the order they started (by job number)."""
        mem = self._mem
        (in_use,) = _IN_USE.unpack_from(mem, base + _IN_USE_AT)
        found: list[Running] = []
        for at in range(min(max(in_use, 1), self.jobs)):
            where = base + _JOBS_AT + at * _JOB.size
            (started,) = _STARTED.unpack_from(mem, where + _SEQ.size)
            if started <= 0:  # idle entry: skip decoding its text fields
                continue
            seq, started, mono, stream, hard, flags, entry, task, job = _JOB.unpack_from(mem, where)
            text = _text(entry), _text(task), _text(job)
            marks = bool(flags & CANCEL), bool(flags & RECORDED)
            found.append(Running(at, seq, started, mono, stream, hard, *text, *marks))
        found.sort(key=lambda j: j.seq)
        return tuple(found)

    def request_cancel(self, index: int, at: int, seq: int) -> bool:
        """Flag job number ``seq`` (entry ``at``) for the child to interrupt; the caller holds
        the slot's lock. False if the entry no longer runs that job."""
        where = index * self.slot_size + _JOBS_AT + at * _JOB.size
        now = _JOB.unpack_from(self._mem, where)
        if now[0] != seq or now[1] <= 0:
            return False
        _JOB.pack_into(self._mem, where, *now[:5], now[5] | CANCEL, *now[6:])
        return True

    def revoke_rest(self, index: int, seen: SlotView) -> list[tuple[int, str]]:
        """Take the jobs of a child's batch that it has not started, if the slot still shows
        the batch and the job of ``seen``; returns them as (stream index, entry id).

        The child will skip them: it checks the flag under the same lock before each job.
        """
        lock = self._locks[index]
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            return []
        try:
            now = self.read(index)
            if now.revoked or (now.batch_no, _seq(now)) != (seen.batch_no, _seq(seen)):
                return []
            base = index * self.slot_size
            _BATCH.pack_into(
                self._mem, base + _BATCH_AT, now.batch_no, now.batch_len, now.batch_next, 1
            )
            return [_entry(self._mem, base, i) for i in range(now.batch_next, now.batch_len)]
        finally:
            lock.release()

    def prepare(self, index: int) -> None:
        """Zero a slot and give it a fresh lock, before its child is forked.

        Only before the fork: once the child runs it may already be writing its first job.
        A fresh lock, because a child that died while holding the old one never released it.
        """
        base = index * self.slot_size
        self._mem[base : base + self.slot_size] = bytes(self.slot_size)
        self._locks[index] = new_lock()

    def set_pid(self, index: int, pid: int) -> None:
        """Record the child's pid after the fork (a field the child never writes)."""
        _PID.pack_into(self._mem, index * self.slot_size + _PID_AT, pid)


class Slot:
    """The writer's side of one slot (used by a child). ``at`` names a job entry: always 0
    for sync jobs, one per coroutine for async ones."""

    def __init__(self, mem: mmap.mmap, base: int, lock: Lock, jobs: int = 1) -> None:
        self._mem = mem
        self._base = base
        self._lock = lock
        # The semaphore's own methods: ``with lock`` adds two Python calls per use, and a
        # child takes the lock twice per job.
        self._acquire, self._release = lock.acquire, lock.release
        self.jobs = jobs
        self._jobs_at = base + _JOBS_AT
        self._seq = 0
        self._batch_no = 0
        self._batch_len = self._batch_next = 0
        """The listed batch's length and the place of its next job: the child alone writes
        them (the master only sets the revoked flag), so a start reads nothing else."""
        self._in_use = 0
        self.counts = [0, 0, 0, 0]
        self.runs = RunTable(mem, base + _runs_at(jobs))
        self._ran = [_IDLE] * jobs
        """(stream index, task field) of the job each entry runs, for its run's count."""
        self._task_field: dict[str, bytes] = {}
        """Task names as their slot field (clipped UTF-8): a child runs few distinct tasks."""

    def list_batch(self, entries: Sequence[tuple[int, str]]) -> None:
        """List the batch the child now holds (stream index, entry id), at most MAX_BATCH."""
        self._batch_no += 1
        self._batch_len, self._batch_next = min(len(entries), MAX_BATCH), 0
        with self._lock:
            for i, (stream, entry_id) in enumerate(entries[:MAX_BATCH]):
                _ENTRY.pack_into(
                    self._mem, self._base + _ENTRIES_AT + i * _ENTRY.size, stream, entry_id.encode()
                )
            _BATCH.pack_into(
                self._mem, self._base + _BATCH_AT, self._batch_no, self._batch_len, 0, 0
            )

    def claim_next(self) -> bool:
        """Take the next job of the listed batch for a step that does not run it (bad input):
        False if the rest of the batch was revoked (skip it)."""
        with self._lock:
            return self._advance()

    def start(
        self,
        stream_index: int,
        entry_id: str,
        task: str,
        job_id: str,
        hard_s: float | None,
        *,
        at: int = 0,
        recorded: bool = True,
        claimed: bool = False,
    ) -> bool:
        """Mark a job started in entry ``at``, unless the rest of the batch was revoked (then
        False: skip it). ``recorded``: the job keeps a status record. ``claimed``: the job
        took its place in the batch already (:meth:`claim_next`), so no revocation applies.

        A job that is not in a listed batch (fixed prefetch, async, in-process) always starts.
        """
        task_field = self._task_field.get(task)
        if task_field is None:
            task_field = self._task_field[task] = _clip(task, 160)
        # (the struct cuts an ASCII id to its field's 64 bytes itself)
        job_field = job_id.encode() if job_id.isascii() else _clip(job_id, 64)
        mono = time.monotonic()
        self._acquire()
        try:
            if not claimed and not self._advance():
                return False
            self._seq += 1
            self._ran[at] = (stream_index, task_field)
            if at >= self._in_use:
                self._in_use = at + 1
                _IN_USE.pack_into(self._mem, self._base + _IN_USE_AT, self._in_use)
            _JOB.pack_into(
                self._mem,
                self._jobs_at + at * _JOB.size,
                self._seq,
                time.time(),
                mono,
                stream_index,
                mono + hard_s if hard_s else 0.0,
                RECORDED if recorded else 0,
                entry_id.encode(),
                task_field,
                job_field,
            )
        finally:
            self._release()
        return True

    @property
    def seq(self) -> int:
        """The number of the job started last."""
        return self._seq

    def cancel_requested(self, at: int) -> bool:
        """Whether the master flagged the job in entry ``at`` to be interrupted."""
        where = self._base + _JOBS_AT + at * _JOB.size
        return bool(_JOB.unpack_from(self._mem, where)[5] & CANCEL)

    def _advance(self) -> bool:
        """Take the next job of the listed batch (under the lock): False if it was revoked."""
        if _BATCH_FIELD.unpack_from(self._mem, self._base + _REVOKED_AT)[0]:
            return False
        if self._batch_next < self._batch_len:
            self._batch_next += 1
            _BATCH_FIELD.pack_into(self._mem, self._base + _NEXT_AT, self._batch_next)
        return True

    def take_rest(self) -> bool:
        """The child hands back the rest of its batch itself (it is stopping): returns False
        if the master revoked it first (then the master hands them back)."""
        with self._lock:
            batch_no, length, nxt, revoked = _BATCH.unpack_from(self._mem, self._base + _BATCH_AT)
            if revoked:
                return False
            _BATCH.pack_into(self._mem, self._base + _BATCH_AT, batch_no, length, nxt, 1)
            return True

    def finish(self, kind: str, *, at: int = 0, ran_ms: float = 0.0) -> None:
        """Mark entry ``at`` idle and count the outcome (``ok``, ``retry`` or ``dead``), and,
        if the entry ran the job to that end, the run and its duration in the run table (a
        short run at the next :meth:`count_runs`, see :mod:`taskq.worker.runstats`)."""
        counts = self.counts
        for i in _COUNTED_AT[kind]:
            counts[i] += 1
        idle_at = self._jobs_at + at * _JOB.size + _SEQ.size
        ran, self._ran[at] = self._ran[at], _IDLE
        marks = _RUN_MARKS.get(kind)
        due = marks is not None and ran is not _IDLE and self.runs.add(ran, ran_ms, marks)
        self._acquire()
        try:
            if due:
                self.runs.count_waiting()
            self._mem[idle_at : idle_at + len(_IDLE_FIELDS)] = _IDLE_FIELDS
            _COUNTS.pack_into(self._mem, self._base + _COUNTS_AT, *counts)
        finally:
            self._release()

    def count_runs(self) -> None:
        """Count the short runs that wait in the child in the run table the master takes
        (the consumer calls it at each fetch)."""
        if self.runs.waiting:
            with self._lock:
                self.runs.count_waiting()


_IDLE = (-1, b"")
_RUN_MARKS = {OK: (False, False), RETRY: (True, True), DEAD: (True, False)}
"""The outcomes of a run that ended, as (failed, retried); other kinds did not end a run."""
_COUNTED_AT = {kind: tuple(COUNTERS.index(n) for n in names) for kind, names in COUNTED.items()}
"""The slot counters an outcome kind adds one to, by index."""


def _seq(view: SlotView) -> int:
    """The number of a slot's oldest running job (0 when idle)."""
    return view.oldest.seq if view.oldest else 0


def _entry(mem: mmap.mmap, base: int, i: int) -> tuple[int, str]:
    stream, entry_id = _ENTRY.unpack_from(mem, base + _ENTRIES_AT + i * _ENTRY.size)
    return stream, _text(entry_id)


def _clip(text: str, size: int) -> bytes:
    """UTF-8 of ``text``, cut to ``size`` bytes at a character boundary (display fields)."""
    if len(text) <= size and text.isascii():  # job ids and most names: one copy
        return text.encode()
    raw = text.encode(errors="backslashreplace")
    if len(raw) <= size:
        return raw
    return raw[:size].decode(errors="ignore").encode()


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace")
