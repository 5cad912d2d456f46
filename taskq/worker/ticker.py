"""The master's periodic schedules: enqueue each due tick's job through the claim script.

Every master of a queue runs every schedule of it. Each keeps the value it last saw for a
schedule (its last tick and definition) and, when the next tick is due by the Redis clock,
asks ``periodic.lua`` to move that value forward and enqueue the job in the same step. Only
the first master to ask succeeds; the others learn the new value from the refusal. So no
tick is enqueued twice, none is lost while any master lives, and there is no lock to outlive
its holder: a master that dies mid-claim either moved the value with the job, or did neither.

Two definitions of one schedule can be alive at once (a rolling deploy that changes ``every=``).
The stored value carries its definition and when it was registered (the Redis time its master
started); a master registers its own definition only over an older one, and ticks a newer one
as stored. So the newest deploy's definition wins and older masters help tick it.

Between ticks this costs nothing in Redis: the next due time is computed locally, against
an offset to the Redis clock refreshed by every read and claim.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from taskq.app import App
from taskq.broker.control import read_pauses
from taskq.broker.schedules import Claim, Schedules, ScheduleState
from taskq.flow import Ops, enqueue_ops
from taskq.pauses import Pause, covering
from taskq.worker.limiter import limit_key_of
from taskq.worker.pausing import READ_EVERY_S

if TYPE_CHECKING:
    from taskq.periodic import Periodic

logger = logging.getLogger(__name__)


class Ticker:
    """The schedules of ``queues`` in one master."""

    def __init__(self, app: App, queues: Sequence[str]) -> None:
        self.app = app
        self.periodics = [p for p in app.periodics.values() if p.message(0).queue in queues]
        self._queue = {p.name: p.message(0).queue for p in self.periodics}
        self._raw: dict[str, str] = {}
        self._next_ms: dict[str, int] = {}
        self._offset_ms = 0
        self._stale = True
        self._born_ms = 0  # Redis time of this master's first read: its definitions' date
        self._adopted: dict[str, str] = {}
        self._pauses: dict[str, dict[Pause, int]] = {}
        self._pauses_at = -math.inf
        self._held: set[str] = set()
        """Schedules whose ticks came due while paused: on resume, one job (docs/periodic.md's
        rule after downtime, whatever their catch_up)."""

    def step(self, schedules: Schedules) -> None:
        """Enqueue whatever tick is due (one claim per due schedule)."""
        if not self.periodics:
            return
        if self._stale:
            self._read(schedules)
        for p in self.periodics:
            now = self._now_ms()
            if now >= self._next_ms[p.name]:
                if self._paused(p, schedules):
                    self._held.add(p.name)  # its tick stays due, unclaimed, until the resume
                    continue
                self._stale = True  # until the claim's reply says where the schedule is
                self._learn(p, self._claim(schedules, p, now))
                self._stale = False
                self._held.discard(p.name)

    def _paused(self, p: Periodic, schedules: Schedules) -> bool:
        """Whether a pause covers ``p``'s job (pauses read at most every READ_EVERY_S, and
        only while some tick is due)."""
        mono = time.monotonic()
        if mono - self._pauses_at >= READ_EVERY_S:
            self._pauses = read_pauses(schedules.link, sorted(set(self._queue.values())))
            self._pauses_at = mono
        pauses = self._pauses.get(self._queue[p.name])
        if not pauses:
            return False
        msg = p.message(0)
        key = limit_key_of(p.task.options.limit_key, msg.args, msg.kwargs, msg.task)
        return covering(pauses, msg.task, key) is not None

    def _read(self, schedules: Schedules) -> None:
        for queue in sorted(set(self._queue.values())):
            values, redis_now = schedules.read(queue)
            self._offset_ms = redis_now - _local_ms()
            self._born_ms = self._born_ms or redis_now
            for p in self.periodics:
                if self._queue[p.name] == queue:
                    self._remember(p, values.get(p.name, ""))
        self._stale = False

    def _claim(self, schedules: Schedules, p: Periodic, now: int) -> Claim:
        state = ScheduleState.parse(self._raw[p.name])
        queue = self._queue[p.name]
        ticking = self._ticking(p, state, now)
        if state is None or ticking is None:
            # First start (or a definition newer than the stored one): from now on, no job
            # for past ticks.
            new = ScheduleState.value(now, p.key, self._born_ms)
            claim = schedules.claim(queue, p.name, self._raw[p.name], new, (Ops().packed(), []))
            if claim.claimed:
                logger.info("periodic %s: %s, first tick after now", p.name, p.schedule.describe())
            return claim
        if p.name in self._held and ticking.catch_up == "all":
            ticking = replace(ticking, catch_up="one")
        ticks, last_ms = ticking.due(state.last_ms, now)
        ops = Ops()
        for tick in ticks:
            msg = ticking.message(tick)
            ops.extend(enqueue_ops(msg, self.app.encode(msg)))
        new = ScheduleState.value(last_ms, state.definition, state.registered_ms)
        claim = schedules.claim(queue, p.name, state.raw, new, (ops.packed(), ops.keys))
        if claim.claimed and len(ticks) > 1:
            logger.info("periodic %s: caught up %d missed ticks", p.name, len(ticks))
        elif claim.claimed and not ticks:
            logger.info("periodic %s: skipped missed ticks (catch_up='none')", p.name)
        return claim

    def _ticking(self, p: Periodic, state: ScheduleState | None, now: int) -> Periodic | None:
        """The schedule this master ticks ``p`` by: its own while it is the one stored; the
        stored one if that was registered after this master started (a newer deploy's: this
        master must not overwrite it); None if its own is to be registered (none stored, an
        unreadable one, or one older than this master)."""
        if state is None:
            return None
        if state.definition == p.key:
            return p
        from taskq.periodic import schedule_of_key  # loaded with the app's first schedule

        newer = (state.registered_ms, state.definition) > (self._born_ms, p.key)
        stored = schedule_of_key(state.definition)
        if not newer or stored is None or state.registered_ms > now:
            return None
        if self._adopted.get(p.name) != state.definition:
            self._adopted[p.name] = state.definition
            logger.info(
                "periodic %s: ticking %s, registered after this worker started (its own: %s)",
                p.name,
                stored.describe(),
                p.schedule.describe(),
            )
        return replace(p, schedule=stored)

    def _learn(self, p: Periodic, claim: Claim) -> None:
        self._offset_ms = claim.now_ms - _local_ms()
        self._remember(p, claim.raw)

    def _remember(self, p: Periodic, raw: str) -> None:
        """Keep a schedule's stored value and work out when its next tick is due."""
        self._raw[p.name] = raw
        state = ScheduleState.parse(raw)
        ticking = self._ticking(p, state, self._now_ms())
        if state is None or ticking is None:
            self._next_ms[p.name] = 0  # register it at once
        else:
            self._next_ms[p.name] = ticking.schedule.next_after(state.last_ms)

    def _now_ms(self) -> int:
        return _local_ms() + self._offset_ms


def _local_ms() -> int:
    return time.time_ns() // 1_000_000
