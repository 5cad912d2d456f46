"""Each periodic schedule of an app with its last and next tick (``taskq periodic list``,
the dashboard), read from the queues' schedule hashes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskq.broker.schedules import Schedules, ScheduleState
from taskq.periodic import Periodic

if TYPE_CHECKING:
    from taskq.app import App


def schedule_rows(app: App) -> list[dict[str, Any]]:
    """What ``taskq periodic list --json`` prints: one dict per schedule.

    The last tick is the one the workers last enqueued (None before the first worker ran the
    schedule); the next one is computed from it, or from now for a schedule that a worker has
    not registered yet or whose definition changed since.
    """
    store, stored, now = Schedules(app.link), {}, 0
    queues = {p.name: p.message(0).queue for p in app.periodics.values()}
    for queue in sorted(set(queues.values())):
        values, now = store.read(queue)
        stored[queue] = values
    rows = []
    for p in app.periodics.values():
        state = ScheduleState.parse(stored[queues[p.name]].get(p.name, ""))
        current = state is not None and state.definition == p.key
        rows.append(_row(p, queues[p.name], state if current else None, now))
    return rows


def _row(p: Periodic, queue: str, state: ScheduleState | None, now_ms: int) -> dict[str, Any]:
    last = state.last_ms if state is not None else None
    return {
        "name": p.name,
        "task": p.task.name,
        "queue": queue,
        "schedule": p.schedule.describe(),
        "catch_up": p.catch_up,
        "last_ms": last,
        "next_ms": p.schedule.next_after(last if last is not None else now_ms),
    }
