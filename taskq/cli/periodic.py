"""``taskq periodic list``: each schedule of the app, its last and next tick."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from taskq.app import App
from taskq.broker.schedules import Schedules, ScheduleState
from taskq.periodic import Periodic


@click.group("periodic")
def periodic() -> None:
    """Periodic schedules (declared with @app.periodic, run by every worker)."""


@periodic.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_schedules(obj: Any, as_json: bool) -> None:
    """Each schedule: task, queue, definition, last tick enqueued and next tick.

    The last tick is the one the workers last enqueued (none before the first worker ran
    the schedule); the next one is computed from it, or from now for a schedule that a
    worker has not registered yet or whose definition changed since.
    """
    app: App = obj.app(required=True)
    rows = schedule_rows(app)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no periodic schedules in this app")
        return
    for r in rows:
        last = _when(r["last_ms"]) if r["last_ms"] is not None else "never"
        click.echo(f"{r['name']}  ({r['task']} on {r['queue']}, {r['schedule']})")
        click.echo(f"  last {last}   next {_when(r['next_ms'])}   catch_up {r['catch_up']}")


def schedule_rows(app: App) -> list[dict[str, Any]]:
    """What ``taskq periodic list --json`` prints: one dict per schedule."""
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


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
