"""Shared memory between a worker's master and its children: one fixed-size slot per child.

A child writes what it runs (a few hundred bytes, no system call) and the master reads it to
enforce time limits, to hand back the jobs of a child that died, and for the heartbeat record.
"""

from __future__ import annotations

import mmap
import struct
import time
from dataclasses import dataclass

from taskq.executor import COUNTED, COUNTERS

_JOB = struct.Struct("<ddd64s48s160s40s")  # started, soft deadline, hard deadline, ids
_COUNTS = struct.Struct("<qqqq")  # processed, failed, retried, dead
_PID = struct.Struct("<q")
SLOT_SIZE = 512
_COUNTS_AT = _JOB.size
_PID_AT = _COUNTS_AT + _COUNTS.size


@dataclass(frozen=True)
class SlotView:
    """A snapshot of one child's slot."""

    pid: int
    started: float
    soft_deadline: float
    hard_deadline: float
    stream: str
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


class Scoreboard:
    """``size`` slots in an anonymous shared mapping, created before the children are forked."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._mem = mmap.mmap(-1, SLOT_SIZE * max(1, size))

    def slot(self, index: int) -> Slot:
        return Slot(self._mem, index * SLOT_SIZE)

    def read(self, index: int) -> SlotView:
        base = index * SLOT_SIZE
        started, soft, hard, stream, entry, task, job = _JOB.unpack_from(self._mem, base)
        counts = _COUNTS.unpack_from(self._mem, base + _COUNTS_AT)
        (pid,) = _PID.unpack_from(self._mem, base + _PID_AT)
        return SlotView(
            pid,
            started,
            soft,
            hard,
            _text(stream),
            _text(entry),
            _text(task),
            _text(job),
            *counts,
        )

    def reset(self, index: int, pid: int) -> None:
        base = index * SLOT_SIZE
        self._mem[base : base + SLOT_SIZE] = bytes(SLOT_SIZE)
        _PID.pack_into(self._mem, base + _PID_AT, pid)


class Slot:
    """The writer's side of one slot (used by a child)."""

    def __init__(self, mem: mmap.mmap, base: int) -> None:
        self._mem = mem
        self._base = base
        self.counts = [0, 0, 0, 0]

    def start(
        self,
        stream: str,
        entry_id: str,
        task: str,
        job_id: str,
        soft_s: float | None,
        hard_s: float | None,
    ) -> None:
        now = time.time()
        _JOB.pack_into(
            self._mem,
            self._base,
            now,
            now + soft_s if soft_s else 0.0,
            now + hard_s if hard_s else 0.0,
            stream.encode(),
            entry_id.encode(),
            task.encode()[:160],
            job_id.encode()[:40],
        )

    def finish(self, kind: str) -> None:
        """Mark the child idle and count the outcome (``ok``, ``retry`` or ``dead``)."""
        for name in COUNTED[kind]:
            self.counts[COUNTERS.index(name)] += 1
        _JOB.pack_into(self._mem, self._base, 0.0, 0.0, 0.0, b"", b"", b"", b"")
        _COUNTS.pack_into(self._mem, self._base + _COUNTS_AT, *self.counts)


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace")
