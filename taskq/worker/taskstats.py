"""The master's side of the per-task run summaries (:mod:`taskq.broker.taskstats`), for the
dashboard's Tasks page: at each heartbeat the master takes what its children counted in their
scoreboard slots (:mod:`taskq.worker.runstats`) and merges it into the queues' minute and
hour buckets, one script call per queue, never a write per job.

Runs of a child that exited are taken when it is reaped, before its slot is reused. A write
that fails keeps its runs for the next heartbeat (a Redis outage loses none; a reply lost
after the write succeeded counts one heartbeat's runs twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from taskq.broker import taskstats
from taskq.broker.link import Link
from taskq.broker.replies import redis_ms
from taskq.worker.runstats import TaskRuns
from taskq.worker.scoreboard import Scoreboard

Take = Callable[[], Iterable[tuple[str, TaskRuns]]]
"""Takes the runs the live children counted, each with its queue."""


class TaskStatsWriter:
    """Runs counted by one worker's children and not yet in Redis, per queue and task."""

    def __init__(self, take: Take | None = None) -> None:
        self.take = take
        self._pending: dict[str, dict[str, taskstats.Summary]] = {}

    def add(self, found: Iterable[tuple[str, TaskRuns]]) -> None:
        for queue, runs in found:
            tasks = self._pending.setdefault(queue, {})
            tasks.setdefault(runs.task, taskstats.Summary()).merge(runs.summary)

    def write(self, link: Link) -> None:
        """Take the live children's runs and write every queue's (nothing without runs)."""
        if self.take is not None:
            self.add(self.take())
        if not self._pending:
            return
        now_ms = redis_ms(link.call("TIME"))
        for queue in list(self._pending):
            taskstats.write(link, [queue], now_ms, self._pending[queue])
            del self._pending[queue]


def taken(
    board: Scoreboard, streams: Sequence[str], indexes: Iterable[int], exited: bool = False
) -> list[tuple[str, TaskRuns]]:
    """Take the runs the children in slots ``indexes`` counted, each with its queue (a
    partitioned queue's partition: the job's stream without its priority)."""
    found = [r for i in indexes for r in board.take_runs(i, exited=exited)]
    return [
        (streams[r.stream_index].rsplit(":", 1)[0], r)
        for r in found
        if r.stream_index < len(streams)
    ]
