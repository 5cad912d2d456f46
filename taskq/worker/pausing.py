"""A consumer's view of its queues' control state: their pauses (``taskq pause``) and the
limits set at run time (``taskq limit set``), read from Redis together at most every
READ_EVERY_S, at a job's turn. So no job a pause covers starts later than that after it (it
ends its turn as a PAUSED outcome, which the finisher sets aside, out of its stream, into
the pause's set), and a limit set at run time applies to the jobs that start after that (the
job's task is run with the overriding options). While nothing is paused or limited at run
time this costs a job a clock read and two dict look-ups."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskq.broker.control import read_control
from taskq.pauses import LimitOverride, Pause, covering
from taskq.worker.limiter import limit_key_of
from taskq.worker.outage import OutageWaiter
from taskq.worker.outcome import PAUSED, Outcome

if TYPE_CHECKING:
    from taskq.broker import Broker
    from taskq.message import Message
    from taskq.options import TaskOptions
    from taskq.worker.executor import Prepared


READ_EVERY_S = 0.5
"""A pause stops new starts, and a limit set at run time applies, within this long (plus the
read's round trip)."""


class PauseGate:
    """The pauses and run-time limits of a consumer's queues, as last read."""

    def __init__(self, broker: Broker, outages: OutageWaiter) -> None:
        self.broker = broker
        self.outages = outages
        self._pauses: dict[str, tuple[Pause, ...]] = {}
        self._limits: dict[str, dict[Pause, LimitOverride]] = {}
        self._read_at = -math.inf
        self._tasks: dict[tuple[int, TaskOptions], Any] = {}
        """Tasks run with overriding options, by (id of the task, its options)."""

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at < READ_EVERY_S:
            return
        queues = list(self.broker.keys)
        pauses, limits = self.outages.call(lambda: read_control(self.broker.link, queues))
        self._pauses = {q: tuple(p) for q, p in pauses.items() if p}
        self._limits = {q: x for q, x in limits.items() if x}
        self._read_at = now

    def covering(self, p: Prepared) -> Pause | None:
        """The pause that covers this job now, if any."""
        self._refresh()
        pauses = self._pauses.get(p.delivery.queue)
        if not pauses:
            return None
        options, msg = p.task.options, p.msg
        keyed = options.limit_key is not None and any(x.key is not None for x in pauses)
        key = limit_key_of(options.limit_key, msg.args, msg.kwargs, msg.task) if keyed else None
        return covering(pauses, msg.task, key)

    def options_for(self, queue: str, msg: Message, options: TaskOptions) -> TaskOptions:
        """The options a job runs under: its task's, with the limits set at run time for
        its task (or its limit key: that one first) in their place."""
        self._refresh()
        limits = self._limits.get(queue)
        if not limits:
            return options
        found = None
        if options.limit_key is not None and any(w.key for w in limits if w.task == msg.task):
            key = limit_key_of(options.limit_key, msg.args, msg.kwargs, msg.task)
            found = limits.get(Pause(msg.task, key))
        found = found or limits.get(Pause(msg.task))
        if found is None:
            return options
        rate = found.rate or options.rate_limit
        concurrency = found.concurrency or options.concurrency_limit
        return dataclasses.replace(options, rate_limit=rate, concurrency_limit=concurrency)

    def check(self, p: Prepared | Outcome) -> Prepared | Outcome:
        """``p`` (run under the limits set at run time, if any), or its PAUSED outcome if a
        pause covers it (the finisher sets it aside)."""
        if isinstance(p, Outcome):
            return p
        self._refresh()
        if not self._pauses and not self._limits:  # the rule: nothing paused or limited now
            return p
        pause = self.covering(p)
        if pause is not None:
            return Outcome(PAUSED, p.delivery, p.msg, p.attempt, pause_field=pause.field)
        options = self.options_for(p.delivery.queue, p.msg, p.task.options)
        if options is p.task.options:
            return p
        key = (id(p.task), options)
        task = self._tasks.get(key)
        if task is None:
            task = self._tasks[key] = copy.copy(p.task)
            task.options = options
        return p._replace(task=task)

    def wait_if_all_paused(self, burst: bool) -> bool:
        """If every queue of the consumer is paused as a whole, wait READ_EVERY_S (no
        fetch meanwhile: none of their jobs may start) and return True; in burst mode
        (``drain``) return False at once, so the burst fetches and sets aside."""
        if burst:
            return False
        self._refresh()
        whole = Pause()
        if not all(whole in self._pauses.get(q, ()) for q in self.broker.keys):
            return False
        time.sleep(READ_EVERY_S)  # (a stop signal is seen at the next turn of the loop)
        return True


def run_time_limits(broker: Broker) -> Callable[[str, Message, TaskOptions], TaskOptions]:
    """What :meth:`PauseGate.options_for` tells, for a master that settles its children's
    jobs (or the sweep): a slot taken under a limit set at run time is released under it.
    Read when first asked (only a job's end does), and not waited out if Redis fails: the
    master's step that asks is tried again."""
    return PauseGate(broker, OutageWaiter(should_give_up=lambda: True)).options_for
