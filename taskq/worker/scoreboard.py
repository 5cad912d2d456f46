"""Shared memory between a worker's master and its children: one fixed-size slot per child.

A child writes what it runs (a few hundred bytes, no system call) and the master reads it to
enforce hard time limits, to hand back the jobs of a child that died, and for the heartbeat
record. The stream a job came from is kept as its index in the worker's stream list, never
as a name, so no queue name is too long for the slot.

A child with adaptive prefetch also lists the batch it holds. When a job of the batch runs
long, the master *revokes* the rest of the batch (the jobs not started yet) and hands them
back for other children, and the child skips them.

Each slot has a lock (a process-shared semaphore made before the child is forked). The child
holds it while it marks a job started or finished, and the master while it acts on what the
slot says (a kill for the hard time limit, a revocation), so neither acts on a state the
other has just left.
"""

from __future__ import annotations

import mmap
import multiprocessing
import struct
import time
from collections.abc import Sequence
from multiprocessing.synchronize import Lock
from typing import NamedTuple

from taskq.worker.outcome import COUNTED, COUNTERS, JobCounts

_JOB = struct.Struct("<qddqd48s160s64s")
"""seq, started (wall s), started (monotonic s), stream index, hard deadline (monotonic s),
entry id, task, job id."""
_COUNTS = struct.Struct("<qqqq")  # processed, failed, retried, dead
_PID = struct.Struct("<q")
_BATCH = struct.Struct("<qqqq")  # batch number, length, next to start, revoked (0/1)
_ENTRY = struct.Struct("<h48s")  # stream index, entry id
MAX_BATCH = 64
"""Jobs of one batch the slot can list (adaptive prefetch never takes more)."""
_COUNTS_AT = _JOB.size
_PID_AT = _COUNTS_AT + _COUNTS.size
_BATCH_AT = _PID_AT + _PID.size
_ENTRIES_AT = _BATCH_AT + _BATCH.size
SLOT_SIZE = 4096
assert _ENTRIES_AT + MAX_BATCH * _ENTRY.size <= SLOT_SIZE
LOCK_TIMEOUT_S = 0.5
"""How long the master waits for a slot's lock; a child holds it for microseconds."""


class SlotView(NamedTuple):
    """A snapshot of one child's slot.

    Attributes:
        seq: how many jobs the child has started; tells one job from the next.
        started: wall-clock start (s), for display; 0 when idle.
        started_mono: monotonic start (s), for durations and limits.
        stream_index: index of the job's stream in the worker's stream list.
        hard_deadline: monotonic time (s) past which the master kills the child; 0: none.
        batch_no, batch_len, batch_next: the listed batch, and the index of its next job.
        revoked: the rest of the batch was handed back (by the master, or the child).
    """

    pid: int
    seq: int
    started: float
    started_mono: float
    stream_index: int
    hard_deadline: float
    entry_id: str
    task: str
    job_id: str
    processed: int
    failed: int
    retried: int
    dead: int
    batch_no: int = 0
    batch_len: int = 0
    batch_next: int = 0
    revoked: bool = False

    @property
    def busy(self) -> bool:
        return self.started > 0

    @property
    def counts(self) -> JobCounts:
        return JobCounts(self.processed, self.failed, self.retried, self.dead)

    @property
    def waiting_in_batch(self) -> int:
        """Jobs of the listed batch not started yet (and not handed back)."""
        return 0 if self.revoked else max(0, self.batch_len - self.batch_next)


class Scoreboard:
    """``size`` slots in an anonymous shared mapping, created before the children are forked."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._mem = mmap.mmap(-1, SLOT_SIZE * max(1, size))
        self._locks = [multiprocessing.Lock() for _ in range(size)]

    def slot(self, index: int) -> Slot:
        return Slot(self._mem, index * SLOT_SIZE, self._locks[index])

    def lock(self, index: int) -> Lock:
        """The slot's lock, for the master to hold while it acts on what it read."""
        return self._locks[index]

    def read(self, index: int) -> SlotView:
        base = index * SLOT_SIZE
        seq, started, mono, stream, hard, entry, task, job = _JOB.unpack_from(self._mem, base)
        processed, failed, retried, dead = _COUNTS.unpack_from(self._mem, base + _COUNTS_AT)
        (pid,) = _PID.unpack_from(self._mem, base + _PID_AT)
        batch_no, length, nxt, revoked = _BATCH.unpack_from(self._mem, base + _BATCH_AT)
        return SlotView(
            pid,
            seq,
            started,
            mono,
            stream,
            hard,
            _text(entry),
            _text(task),
            _text(job),
            processed,
            failed,
            retried,
            dead,
            batch_no=batch_no,
            batch_len=length,
            batch_next=nxt,
            revoked=bool(revoked),
        )

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
            if (now.batch_no, now.seq) != (seen.batch_no, seen.seq) or now.revoked:
                return []
            base = index * SLOT_SIZE
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
        base = index * SLOT_SIZE
        self._mem[base : base + SLOT_SIZE] = bytes(SLOT_SIZE)
        self._locks[index] = multiprocessing.Lock()

    def set_pid(self, index: int, pid: int) -> None:
        """Record the child's pid after the fork (a field the child never writes)."""
        _PID.pack_into(self._mem, index * SLOT_SIZE + _PID_AT, pid)


class Slot:
    """The writer's side of one slot (used by a child)."""

    def __init__(self, mem: mmap.mmap, base: int, lock: Lock) -> None:
        self._mem = mem
        self._base = base
        self._lock = lock
        self._seq = 0
        self._batch_no = 0
        self.counts = [0, 0, 0, 0]

    def list_batch(self, entries: Sequence[tuple[int, str]]) -> None:
        """List the batch the child now holds (stream index, entry id), at most MAX_BATCH."""
        self._batch_no += 1
        with self._lock:
            for i, (stream, entry_id) in enumerate(entries[:MAX_BATCH]):
                _ENTRY.pack_into(
                    self._mem, self._base + _ENTRIES_AT + i * _ENTRY.size, stream, entry_id.encode()
                )
            _BATCH.pack_into(
                self._mem,
                self._base + _BATCH_AT,
                self._batch_no,
                min(len(entries), MAX_BATCH),
                0,
                0,
            )

    def claim_next(self) -> bool:
        """Take the next job of the listed batch for a step that does not run it (bad input):
        False if the rest of the batch was revoked (skip it)."""
        with self._lock:
            return self._advance()

    def start(
        self, stream_index: int, entry_id: str, task: str, job_id: str, hard_s: float | None
    ) -> bool:
        """Mark a job started, unless the rest of the batch was revoked (then False: skip it).

        A job that is not in a listed batch (fixed prefetch, or in-process) always starts.
        """
        mono = time.monotonic()
        with self._lock:
            if not self._advance():
                return False
            self._seq += 1
            _JOB.pack_into(
                self._mem,
                self._base,
                self._seq,
                time.time(),
                mono,
                stream_index,
                mono + hard_s if hard_s else 0.0,
                entry_id.encode(),
                _clip(task, 160),
                _clip(job_id, 64),
            )
        return True

    def _advance(self) -> bool:
        batch_no, length, nxt, revoked = _BATCH.unpack_from(self._mem, self._base + _BATCH_AT)
        if revoked:
            return False
        if nxt < length:
            _BATCH.pack_into(self._mem, self._base + _BATCH_AT, batch_no, length, nxt + 1, 0)
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

    def finish(self, kind: str) -> None:
        """Mark the child idle and count the outcome (``ok``, ``retry`` or ``dead``)."""
        for name in COUNTED[kind]:
            self.counts[COUNTERS.index(name)] += 1
        with self._lock:
            _JOB.pack_into(self._mem, self._base, self._seq, 0.0, 0.0, -1, 0.0, b"", b"", b"")
            _COUNTS.pack_into(self._mem, self._base + _COUNTS_AT, *self.counts)


def _entry(mem: mmap.mmap, base: int, i: int) -> tuple[int, str]:
    stream, entry_id = _ENTRY.unpack_from(mem, base + _ENTRIES_AT + i * _ENTRY.size)
    return stream, _text(entry_id)


def _clip(text: str, size: int) -> bytes:
    """UTF-8 of ``text``, cut to ``size`` bytes at a character boundary (display fields)."""
    raw = text.encode(errors="backslashreplace")
    if len(raw) <= size:
        return raw
    return raw[:size].decode(errors="ignore").encode()


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace")
