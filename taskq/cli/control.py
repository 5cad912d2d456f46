"""``taskq pause`` and ``taskq resume``: stop and restart a queue, a task of it or a limit
key's jobs, fleet-wide, without a deploy (operator role)."""

from __future__ import annotations

from typing import Any

import click

from taskq.app import App
from taskq.pauses import Pause

_task = click.option("--task", "task", help="Only this task's jobs (its registered name).")
_key = click.option("--key", "key", help="Only the jobs whose limit_key is this value.")


@click.command("pause")
@click.argument("queue")
@_task
@_key
@click.pass_obj
def pause(obj: Any, queue: str, task: str | None, key: str | None) -> None:
    """Pause QUEUE (every partition of a partitioned one), or only --task/--key: within a
    second no job it covers starts; running jobs finish; enqueues are still accepted."""
    app: App = obj.app()
    done = app.pause(queue, task=task, key=key)
    click.echo(f"paused {_what(queue, done)}")


@click.command("resume")
@click.argument("queue")
@_task
@_key
@click.pass_obj
def resume(obj: Any, queue: str, task: str | None, key: str | None) -> None:
    """End the pause given by the same QUEUE, --task and --key; the jobs set aside under it
    go back to their streams."""
    app: App = obj.app()
    moved = app.resume(queue, task=task, key=key)
    click.echo(f"resumed {_what(queue, Pause(task, key))}: {moved} job(s) set aside went back")


def _what(queue: str, p: Pause) -> str:
    return f"{queue}" if p == Pause() else f"{queue} ({p.describe()})"
