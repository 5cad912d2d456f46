"""A consumer's view of its queues' pauses (``taskq pause``): read from Redis at most every
READ_EVERY_S, at a job's turn, so that no job a pause covers starts later than that after
it; a job it covers ends its turn as a PAUSED outcome, which the finisher sets aside (out of
its stream, into the pause's set) instead of running it.
While no queue is paused this costs a job one clock read and a dict look-up."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from taskq.broker.control import read_pauses
from taskq.pauses import Pause, covering
from taskq.worker.limiter import limit_key_of
from taskq.worker.outcome import PAUSED, Outcome

if TYPE_CHECKING:
    from taskq.broker import Broker
    from taskq.worker.executor import Prepared
    from taskq.worker.outage import OutageWaiter


READ_EVERY_S = 0.5
"""A pause stops new starts within this long (plus the read's round trip)."""


class PauseGate:
    """The pauses of a consumer's queues, as last read."""

    def __init__(self, broker: Broker, outages: OutageWaiter) -> None:
        self.broker = broker
        self.outages = outages
        self._pauses: dict[str, tuple[Pause, ...]] = {}
        self._read_at = -math.inf

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at < READ_EVERY_S:
            return
        queues = list(self.broker.keys)
        read = self.outages.call(lambda: read_pauses(self.broker.link, queues))
        self._pauses = {q: tuple(p) for q, p in read.items() if p}
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

    def check(self, p: Prepared | Outcome) -> Prepared | Outcome:
        """``p``, or its PAUSED outcome if a pause covers it (the finisher sets it aside)."""
        if isinstance(p, Outcome):
            return p
        pause = self.covering(p)
        if pause is None:
            return p
        return Outcome(PAUSED, p.delivery, p.msg, p.attempt, pause_field=pause.field)

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
