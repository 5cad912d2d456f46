"""``taskq periodic list``: each schedule of the app, its last and next tick."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from taskq.app import App
from taskq.ops.schedules import schedule_rows


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


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
