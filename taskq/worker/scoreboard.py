"""Shared memory between a worker's master and its children: one fixed-size slot per child.

A child writes what it runs (a few hundred bytes, no system call) and the master reads it to
enforce hard time limits, to hand back the jobs of a child that died, and for the heartbeat
record. The stream a job came from is kept as its index in the worker's stream list, never
as a name, so no queue name is too long for the slot.

Each slot has a lock (a process-shared semaphore made before the child is forked). The child
holds it while it marks a job started or finished, and the master while it acts on what the
slot says (a kill for the hard time limit), so the master never acts on a job that has
already given way to the next one.
"""

from __future__ import annotations

import mmap
import multiprocessing
import struct
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Lock

from taskq.worker.outcome import COUNTED, COUNTERS, JobCounts

_JOB = struct.Struct("<qddqd48s160s64s")
"""seq, started (wall s), started (monotonic s), stream index, hard deadline (monotonic s),
entry id, task, job id."""
_COUNTS = struct.Struct("<qqqq")  # processed, failed, retried, dead
_PID = struct.Struct("<q")
SLOT_SIZE = 512
_COUNTS_AT = _JOB.size
_PID_AT = _COUNTS_AT + _COUNTS.size
LOCK_TIMEOUT_S = 0.5
"""How long the master waits for a slot's lock; a child holds it for microseconds."""


@dataclass(frozen=True)
class SlotView:
    """A snapshot of one child's slot.

    Attributes:
        seq: how many jobs the child has started; tells one job from the next.
        started: wall-clock start (s), for display; 0 when idle.
        started_mono: monotonic start (s), for durations and limits.
        stream_index: index of the job's stream in the worker's stream list.
        hard_deadline: monotonic time (s) past which the master kills the child; 0: none.
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

    @property
    def busy(self) -> bool:
        return self.started > 0

    @property
    def counts(self) -> JobCounts:
        return JobCounts(self.processed, self.failed, self.retried, self.dead)


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
        counts = _COUNTS.unpack_from(self._mem, base + _COUNTS_AT)
        (pid,) = _PID.unpack_from(self._mem, base + _PID_AT)
        return SlotView(
            pid, seq, started, mono, stream, hard, _text(entry), _text(task), _text(job), *counts
        )

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
        self.counts = [0, 0, 0, 0]

    def start(
        self, stream_index: int, entry_id: str, task: str, job_id: str, hard_s: float | None
    ) -> None:
        mono = time.monotonic()
        self._seq += 1
        with self._lock:
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

    def finish(self, kind: str) -> None:
        """Mark the child idle and count the outcome (``ok``, ``retry`` or ``dead``)."""
        for name in COUNTED[kind]:
            self.counts[COUNTERS.index(name)] += 1
        with self._lock:
            _JOB.pack_into(self._mem, self._base, self._seq, 0.0, 0.0, -1, 0.0, b"", b"", b"")
            _COUNTS.pack_into(self._mem, self._base + _COUNTS_AT, *self.counts)


def _clip(text: str, size: int) -> bytes:
    """UTF-8 of ``text``, cut to ``size`` bytes at a character boundary (display fields)."""
    raw = text.encode(errors="backslashreplace")
    if len(raw) <= size:
        return raw
    return raw[:size].decode(errors="ignore").encode()


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace")
