"""The control plane's Python API, which :class:`~taskq.App` offers: pause and resume
(by queue, task and limit key), for operators and their scripts (docs/operations.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskq.broker import control
from taskq.config import Settings, check_queue_name
from taskq.partitions import expand
from taskq.pauses import Pause

if TYPE_CHECKING:
    from taskq.broker.control import Auditor
    from taskq.broker.link import Link


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
