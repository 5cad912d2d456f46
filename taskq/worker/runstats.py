"""Per-task run summaries in a child's scoreboard slot, for the dashboard's Tasks page: the
child counts each run that ended in its slot's run table (no system call, no Redis), and the
master takes the table at each heartbeat and merges it into Redis
(:mod:`taskq.worker.taskstats`), the way the slot's job counters reach the per-minute series.

The table has :data:`ENTRIES` entries, one per (stream, task) the child ran since the master
last took it: runs, failures, retries, the longest duration and a histogram of durations in
the buckets of :mod:`taskq.broker.taskstats` (dense, so a run is two in-place updates). The
master zeroes the counts it takes and leaves the names, so a child finds its entry again; an
entry the master emptied may be given to another task once the table is full. Both sides
work under the slot's lock.

A run shorter than :data:`SHORT_RUN_MS` waits in the child until the consumer's next fetch
(:meth:`RunTable.add`, :meth:`RunTable.count_waiting`): counted one by one between jobs, each
count ran cold (the task's own Redis calls let other processes evict the child's caches), about
5 µs a job against 1.5 µs in a loop at the fetch, several per cent of a drain of short jobs
(bench/README.md, "Cold per-job work"). A longer run counts at once, with those
before it, so a long job never holds back the counts of the short ones.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

from taskq.broker.taskstats import Summary, bucket_of

BUCKETS = 256
"""Histogram buckets of an entry: 10 µs to about 90 hours in steps of 10 %; longer runs share
the last one."""
ENTRIES = 64
"""Distinct (stream, task) pairs a child counts between two heartbeats of its master; runs
of further tasks in that interval are not counted."""
SHORT_RUN_MS = 1.0
"""Runs shorter than this wait in the child until the consumer's next fetch."""
MAX_WAITING = 64
"""The most runs that wait in the child (a batch's worth)."""
_HEAD = struct.Struct("<q160s")  # stream index, task (clipped UTF-8; empty: a free entry)
_SUMS = struct.Struct("<qqqd")  # runs, failures, retries, longest duration (ms)
_HIST = struct.Struct(f"<{BUCKETS}I")
_COUNT = struct.Struct("<I")
_SUMS_AT = _HEAD.size
_HIST_AT = _SUMS_AT + _SUMS.size
ENTRY_SIZE = _HIST_AT + _HIST.size
TABLE_SIZE = ENTRIES * ENTRY_SIZE
"""Bytes of a slot's run table."""


class TaskRuns(NamedTuple):
    """What one child ran of one task from one stream since the master last took the table."""

    stream_index: int
    task: str
    summary: Summary


class RunTable:
    """The child's side of its slot's run table (the caller holds the slot's lock)."""

    def __init__(self, mem: mmap.mmap, base: int) -> None:
        self._mem = mem
        self._base = base
        self._at: dict[tuple[int, bytes], int] = {}
        self._owner: dict[int, tuple[int, bytes]] = {}
        self.waiting: list[tuple[tuple[int, bytes], float, tuple[bool, bool]]] = []
        """Short runs not counted in the table yet (see the module's docstring)."""

    def add(self, ran: tuple[int, bytes], ms: float, marks: tuple[bool, bool]) -> bool:
        """Note one run that ended, in the child's own memory; True when the runs that wait
        are to be counted now (:meth:`count_waiting`): this one was not short, or
        :data:`MAX_WAITING` wait."""
        self.waiting.append((ran, ms, marks))
        return ms >= SHORT_RUN_MS or len(self.waiting) >= MAX_WAITING

    def count_waiting(self) -> None:
        """Count the runs that wait (the caller holds the slot's lock)."""
        for ran, ms, marks in self.waiting:
            self.count(ran, ms, marks)
        self.waiting.clear()

    def count(self, ran: tuple[int, bytes], ms: float, marks: tuple[bool, bool]) -> None:
        """Count one run that ended: O(1), two updates in place. ``ran``: its (stream index,
        task field); ``marks``: whether it failed, and whether it is retried."""
        at = self._at.get(ran)
        if at is None:
            at = self._claim(*ran)
            if at is None:
                return
        mem, sums_at = self._mem, at + _SUMS_AT
        runs, failures, retries, longest = _SUMS.unpack_from(mem, sums_at)
        failed, retried = marks
        longest = ms if ms > longest else longest
        _SUMS.pack_into(mem, sums_at, runs + 1, failures + failed, retries + retried, longest)
        where = at + _HIST_AT + _COUNT.size * min(bucket_of(ms), BUCKETS - 1)
        _COUNT.pack_into(mem, where, _COUNT.unpack_from(mem, where)[0] + 1)

    def _claim(self, stream_index: int, task: bytes) -> int | None:
        """A free entry, else one the master emptied (its task claims another when it runs
        again), labelled for (stream, task)."""
        emptied = None
        for i in range(ENTRIES):
            at = self._base + i * ENTRY_SIZE
            if at not in self._owner:
                return self._label(at, stream_index, task)
            if emptied is None and not _SUMS.unpack_from(self._mem, at + _SUMS_AT)[0]:
                emptied = at
        if emptied is None:
            return None
        del self._at[self._owner[emptied]]
        return self._label(emptied, stream_index, task)

    def _label(self, at: int, stream_index: int, task: bytes) -> int:
        _HEAD.pack_into(self._mem, at, stream_index, task)
        self._at[stream_index, task] = at
        self._owner[at] = (stream_index, task)
        return at


def take(mem: mmap.mmap, base: int) -> list[TaskRuns]:
    """The master's side (under the slot's lock): every entry with runs, which it zeroes."""
    found = []
    for i in range(ENTRIES):
        at = base + i * ENTRY_SIZE
        runs, failures, retries, longest = _SUMS.unpack_from(mem, at + _SUMS_AT)
        if runs <= 0:
            continue
        stream_index, label = _HEAD.unpack_from(mem, at)
        counts = _HIST.unpack_from(mem, at + _HIST_AT)
        buckets = {b: n for b, n in enumerate(counts) if n}
        summary = Summary(runs, failures, retries, longest, buckets)
        found.append(TaskRuns(stream_index, label.rstrip(b"\0").decode(errors="replace"), summary))
        mem[at + _SUMS_AT : at + ENTRY_SIZE] = bytes(ENTRY_SIZE - _SUMS_AT)
    return found
