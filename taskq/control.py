"""The control plane's Python API, which :class:`~taskq.App` offers: pause and resume (by
queue, task and limit key), limits set at run time, for operators and their scripts
(docs/operations.md, docs/limits.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskq.broker import control, fairness
from taskq.config import Settings, check_queue_name
from taskq.errors import ConfigError, TaskNotFound
from taskq.keys import QueueKeys, check_fair_key
from taskq.partitions import expand
from taskq.pauses import LimitOverride, Pause

if TYPE_CHECKING:
    from taskq.broker.control import Auditor
    from taskq.broker.link import Link
    from taskq.task import Task


class ControlPlane:
    """What an app can change at run time, fleet-wide, through Redis (a base of App)."""

    settings: Settings
    _auditor: Auditor | None = None

    @property
    def link(self) -> Link:
        raise NotImplementedError

    @property
    def auditor(self) -> Auditor:
        """Who this process acts as, for the audit stream (on its current link)."""
        link, auditor = self.link, self._auditor
        if auditor is None or auditor.link is not link:
            auditor = self._auditor = control.Auditor(link, self.settings.audit_max_entries)
        return auditor

    def pause(
        self, queue: str | None = None, *, task: str | None = None, key: str | None = None
    ) -> Pause:
        """Pause ``queue`` (default: the app's queue; a partitioned one in every partition),
        or only its ``task``, or only the jobs whose ``limit_key`` is ``key``. Within a
        second no job it covers starts on any worker; running ones finish; enqueues go on;
        jobs a worker fetched already wait, out of their stream, for :meth:`resume`. The
        pause lives in Redis until resumed (docs/operations.md, "Pause and resume")."""
        p = Pause(task, key)
        for q in self._control_queues(queue):
            control.pause(self.auditor, q, p)
        return p

    def resume(
        self, queue: str | None = None, *, task: str | None = None, key: str | None = None
    ) -> int:
        """End the pause that :meth:`pause` with the same arguments began: the jobs set aside
        under it go back to their streams (in their priority order: each to its priority's
        stream, oldest first). Returns how many went back."""
        p = Pause(task, key)
        return sum(control.resume(self.auditor, q, p) for q in self._control_queues(queue))

    def _control_queues(self, queue: str | None) -> list[str]:
        """The queues a control command acts on: ``queue`` (checked), or its partitions."""
        name = queue or self.settings.queue
        check_queue_name(name)
        return expand(self.settings.partitions, [name])[0]

    def set_limit(
        self,
        task: str,
        *,
        rate: str | None = None,
        concurrency: int | None = None,
        key: str | None = None,
        queue: str | None = None,
    ) -> LimitOverride:
        """Limit ``task`` at run time (only its jobs of limit key ``key``, if given): at most
        ``rate`` starts (``"5/s"``) and/or ``concurrency`` running at once, fleet-wide,
        within 2 s and until :meth:`clear_limit`, over the decorator's limits. A limit given
        here replaces the one stored before; the other is kept. Lowering the concurrency
        below the number running lets those finish and starts no more until under it.

        Raises:
            ConfigError: a bad rate or number, or neither given.
        """
        if rate is None and concurrency is None:
            raise ConfigError("set_limit: give rate= and/or concurrency=")
        limit, which = LimitOverride(rate, concurrency), Pause(task, key)
        for q in self._control_queues(queue or self._queue_of(task)):
            control.set_limit(self.auditor, q, which, limit)
        return limit

    def clear_limit(self, task: str, *, key: str | None = None, queue: str | None = None) -> None:
        """End the limit :meth:`set_limit` set for ``task`` (and ``key``): the decorator's
        limits apply again. If the task (registered in this app) has no concurrency limit
        of its own, the jobs that wait for a slot of the one set at run time go back to
        their streams."""
        which = Pause(task, key)
        for q in self._control_queues(queue or self._queue_of(task)):
            control.set_limit(self.auditor, q, which, None)
            if self._concurrency_of(task) == 0:  # (a task not registered here: left alone)
                k = QueueKeys(q)
                self.link.call("DEL", k.running(task, key))  # no slot to count any more
                control.release_held(self.link, q, k.held(task, key))

    def set_fair_weight(self, queue: str, key: str, weight: int) -> None:
        """Give fairness ``key`` of ``queue`` (every partition of a partitioned one) the
        ``weight`` (1 to 1,000; 1, the default, is not stored): it gets that many jobs
        started for every one of a key of weight 1 while both wait (docs/fairness.md).
        Audited; fetches use it as they admit the key's next jobs.

        Raises:
            ConfigError: a bad key or weight.
        """
        check_fair_key(key)
        for q in self._control_queues(queue):
            fairness.set_weight(self.auditor, q, key, weight)

    def _queue_of(self, task: str) -> str:
        """The queue a task's jobs go to (the app's, for a task not registered here)."""
        try:
            return self.get_task(task).options.queue or self.settings.queue
        except TaskNotFound:
            return self.settings.queue

    def _concurrency_of(self, task: str) -> int | None:
        """The task's own concurrency limit, 0 if it has none, None if it is unknown here."""
        try:
            return self.get_task(task).options.concurrency_limit or 0
        except TaskNotFound:
            return None

    def get_task(self, name: str) -> Task[..., Any]:
        raise NotImplementedError
