"""The master marks the jobs its children run as ``running`` in their status records.

The fetch does not: that would be a write for every job taken, for a state most jobs leave
within milliseconds. Until the master's look, a job that was taken reads as running from its
pending entry (:func:`taskq.broker.records.status_steps`). The master looks every
:data:`MARK_EVERY_S` and marks each job that keeps a record once, with its worker and the
time its run started, so a long job shows its true start even after its lease renewals have
reset the entry's idle time.

This is the one path for per-job data written from inside a running task (the child's
scoreboard entry, this master's guarded flush): see :mod:`taskq.record`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from taskq.keys import consumer_name
from taskq.worker.cancels import Busy
from taskq.worker.maintenance import Maintenance
from taskq.worker.slotview import Running

MARK_EVERY_S = 0.25


class RunningMarks:
    """The running marks of one master's children."""

    def __init__(self, maintenance: Maintenance, worker_id: str) -> None:
        self.maintenance = maintenance
        self.worker_id = worker_id
        self._next_look = 0.0
        self._marked: set[tuple[int, int]] = set()
        """(child index, job number) of the jobs marked, while they run."""

    def tick(self, busy: list[Busy], queue_of: Callable[[Running], str]) -> None:
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + MARK_EVERY_S
        running: set[tuple[int, int]] = set()
        new: list[tuple[tuple[int, int], tuple[str, str, str, int]]] = []
        for index, pid, view in busy:
            for job in view.running:
                if not (job.recorded and job.job_id):
                    continue
                key = (index, job.seq)
                running.add(key)
                if key not in self._marked:
                    ran_ms = max(0, int((time.time() - job.started) * 1000))
                    consumer = consumer_name(self.worker_id, index, pid)
                    new.append((key, (queue_of(job), job.job_id, consumer, ran_ms)))
        self._marked &= running
        if new and self.maintenance.step(lambda b: b.mark_running([job for _, job in new])):
            self._marked.update(key for key, _ in new)
