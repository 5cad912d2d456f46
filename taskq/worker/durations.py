"""How long a worker's jobs take, per task, measured by its master without any per-job work:
the input the autoscaling signal (:mod:`taskq.worker.scaling`) weighs waiting jobs with.

The master already reads every child's slot at each tick (:mod:`taskq.worker.pool`). Each
running job seen there is credited the ticks it is seen running (counted from the first
sample that sees it to the first that does not: half a tick late at both ends, so a job's
time is right on average); when it leaves its slot, its task gets the job and that time.
Jobs shorter than a tick may start and end between two samples: the slot's finished counter
says how many, and they count as jobs with no time (what their sampled time is on average)
of the child's last task whose job was seen by one sample only (the short one of a mix; the
fleet's bucket :data:`OTHER` before any was). A running job's time is left out until
it ends, so a window that ends with jobs running is not biased upwards.

At each heartbeat the meter keeps its per-task sums, and the record carries the differences
over the window (:class:`Recent`): per task, and in total.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from taskq.worker.slotview import SlotView

WINDOW_S = 300.0
"""The minutes of history the means cover."""

OTHER = "(other)"
"""The bucket of the tasks past :data:`CARRIED_TASKS` (and, in the meter, past
:data:`KEPT_TASKS`): counted in the totals, never taken for one task's duration."""

CARRIED_TASKS = 32
"""Tasks a heartbeat record carries, the busiest first."""

KEPT_TASKS = 256
"""Task names the meter keeps sums for (a slot shows whatever a job names)."""


class TaskTime(NamedTuple):
    """Jobs of one task finished over the window, and the time they ran (ms)."""

    jobs: int = 0
    busy_ms: int = 0


class Recent(NamedTuple):
    """Jobs finished and the time jobs ran (ms, all children summed) over the window, and
    the same per task (at most :data:`CARRIED_TASKS` of them, plus :data:`OTHER`)."""

    jobs: int = 0
    busy_ms: int = 0
    tasks: dict[str, TaskTime] = {}  # noqa: RUF012 (a NamedTuple default is never mutated)


Child = tuple[int, int]
"""A child by its slot index and pid (a respawned child starts its counters again)."""


class _Sums:
    """Jobs and busy seconds per task, since the meter started."""

    def __init__(self) -> None:
        self.jobs: dict[str, int] = {}
        self.busy_s: dict[str, float] = {}

    def add(self, task: str, jobs: int, busy_s: float) -> None:
        if task not in self.jobs and len(self.jobs) >= KEPT_TASKS:
            task = OTHER
        self.jobs[task] = self.jobs.get(task, 0) + jobs
        self.busy_s[task] = self.busy_s.get(task, 0.0) + busy_s

    def copy(self) -> _Sums:
        out = _Sums()
        out.jobs, out.busy_s = dict(self.jobs), dict(self.busy_s)
        return out


class DurationMeter:
    """Per-task busy time and finished jobs sampled at each tick; window sums at each
    heartbeat."""

    def __init__(self, *, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._last = clock()
        self._sums = _Sums()
        self._running: dict[tuple[Child, int], tuple[str, float]] = {}  # job → task, time
        self._finished: dict[Child, int] = {}  # counter at the last sample
        self._owed: dict[Child, int] = {}  # jobs that left the slot before the counter moved
        self._short: dict[Child, str] = {}  # the last task of a job seen by one sample only
        self._marks: deque[tuple[float, _Sums]] = deque([(self._last, _Sums())])

    def sample(self, slots: Iterable[tuple[Child, SlotView]]) -> None:
        """What every child's slot shows now: its running jobs, its finished counter."""
        now = self._clock()
        tick_s, self._last = now - self._last, now
        before, self._running = self._running, {}
        finished: dict[Child, int] = {}
        for child, view in slots:
            for job in view.running:
                task, ran_s = before.pop((child, job.seq), (job.task, -tick_s))
                self._running[(child, job.seq)] = (task, ran_s + tick_s)
            finished[child] = view.processed + view.failed
        ended: dict[Child, int] = {}
        for (child, _), (task, ran_s) in before.items():  # ended, or their child is gone
            self._sums.add(task, 1, ran_s + tick_s)
            ended[child] = ended.get(child, 0) + 1
            if ran_s == 0.0:  # seen by one sample: shorter than two ticks
                self._short[child] = task
        for child, count in finished.items():
            unseen = self._unseen(child, count, ended.get(child, 0))
            if unseen:
                self._sums.add(self._short.get(child, OTHER), unseen, 0.0)
        self._short = {c: t for c, t in self._short.items() if c in finished}
        self._owed = {c: n for c, n in self._owed.items() if c in finished}
        self._finished = finished

    def _unseen(self, child: Child, finished: int, left: int) -> int:
        """Jobs the child's counter says ended that no sample saw running (shorter than a
        tick): counted, with no time, for the last task of the child whose job was that
        short (:data:`OTHER` before one was seen)."""
        ended = max(0, finished - self._finished.get(child, finished))
        owed = self._owed.pop(child, 0) + ended - left
        if owed < 0:  # a job left its slot before the counter moved: it is counted already
            self._owed[child] = owed
        return max(0, owed)

    def recent(self) -> Recent:
        """The window's sums, per task (the busiest :data:`CARRIED_TASKS`, the rest as
        :data:`OTHER`) and in total."""
        now = self._clock()
        self._marks.append((now, self._sums.copy()))
        while len(self._marks) > 1 and now - self._marks[1][0] >= self.window_s:
            self._marks.popleft()
        then, latest = self._marks[0][1], self._marks[-1][1]
        window = {
            task: TaskTime(
                max(0, jobs - then.jobs.get(task, 0)),
                max(0, round((latest.busy_s[task] - then.busy_s.get(task, 0.0)) * 1000)),
            )
            for task, jobs in latest.jobs.items()
        }
        tasks = fold({t: w for t, w in window.items() if w.jobs})
        return Recent(
            sum(t.jobs for t in tasks.values()), sum(t.busy_ms for t in tasks.values()), tasks
        )


def fold(tasks: dict[str, TaskTime], keep: int = CARRIED_TASKS) -> dict[str, TaskTime]:
    """The ``keep`` busiest tasks, and the others summed as :data:`OTHER`."""
    ranked = sorted(tasks.items(), key=lambda kv: (kv[0] == OTHER, -kv[1].busy_ms, kv[0]))
    out = dict(ranked[:keep])
    rest = ranked[keep:]
    if rest:
        out[OTHER] = TaskTime(sum(t.jobs for _, t in rest), sum(t.busy_ms for _, t in rest))
    return out
