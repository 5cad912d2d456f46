"""``taskq pause`` and ``taskq resume``: stop and restart a queue, a task of it or a limit
key's jobs, fleet-wide, without a deploy; ``taskq limit set/show/clear``: limits at run
time (operator role); ``taskq audit``: who did what."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from taskq.app import App
from taskq.broker.control import read_audit, read_control
from taskq.config import parse_queues
from taskq.partitions import expand
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


@click.command("audit")
@click.option("--since", help="Only entries from this time on (ISO 8601; no zone: UTC).")
@click.option("-Q", "--queues", help="Comma-separated queues (default: the app's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def audit(obj: Any, since: str | None, queues: str | None, as_json: bool) -> None:
    """The control plane's audit trail: every pause, resume, limit change and cancel, with
    its time, the Redis user, the host and what changed, oldest first."""
    app: App = obj.app()
    names = expand(app.settings.partitions, parse_queues(queues))[0] if queues else app.queues()
    found = read_audit(app.link, names, _ms(since) if since else 0)
    if as_json:
        click.echo(json.dumps([e.to_json() for e in found], indent=2))
        return
    for e in found:
        when = datetime.fromtimestamp(e.at_ms / 1000, timezone.utc).isoformat(
            timespec="milliseconds"
        )
        what = " ".join(f"{k}={v}" for k, v in sorted(e.detail.items()) if v is not None)
        click.echo(f"{when}  {e.action:<11} {e.queue}  {what}  (user {e.user} on {e.host})")


def _ms(iso: str) -> int:
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 time: {iso!r}", param_hint="--since") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


@click.group("limit")
def limit() -> None:
    """Limits set at run time: they override a task's decorator limits, fleet-wide, within
    2 s and until cleared (operator role)."""


_queue = click.option("-Q", "--queue", help="The task's queue (default: as the app says).")


@limit.command("set")
@click.argument("task")
@click.option("--rate", help="At most this many starts per window, e.g. 5/s, 100/m, 5/10s.")
@click.option("--concurrency", type=int, help="At most this many running at once.")
@_key
@_queue
@click.pass_obj
def limit_set(obj: Any, /, task: str, **given: Any) -> None:
    """Limit TASK (or only its jobs of limit key --key)."""
    app: App = obj.app()
    app.set_limit(task, **given)
    shown = ", ".join(f"{name} {given[name]}" for name in ("rate", "concurrency") if given[name])
    click.echo(f"limited {_what(task, Pause(None, given['key']))}: {shown}")


@limit.command("clear")
@click.argument("task")
@_key
@_queue
@click.pass_obj
def limit_clear(obj: Any, task: str, key: str | None, queue: str | None) -> None:
    """End the limit set at run time for TASK (and --key): its decorator's apply again."""
    app: App = obj.app()
    app.clear_limit(task, key=key, queue=queue)
    click.echo(f"cleared the run-time limit of {_what(task, Pause(None, key))}")


@limit.command("show")
@click.option("-Q", "--queues", help="Comma-separated queues (default: the app's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def limit_show(obj: Any, queues: str | None, as_json: bool) -> None:
    """Every limit set at run time, and the decorator limits of the app's tasks."""
    app: App = obj.app()
    names = expand(app.settings.partitions, parse_queues(queues))[0] if queues else app.queues()
    _, limits = read_control(app.link, names)
    rows = [
        {"queue": q, "task": w.task, "key": w.key, "rate": x.rate, "concurrency": x.concurrency}
        for q in names
        for w, x in sorted(limits[q].items(), key=lambda i: i[0].field)
    ]
    declared = [
        {"task": n, "rate": o.rate_limit, "concurrency": o.concurrency_limit}
        for n in app.registered()
        for o in [app.get_task(n).options]
        if o.rate_limit or o.concurrency_limit
    ]
    if as_json:
        click.echo(json.dumps({"runtime": rows, "declared": declared}, indent=2))
        return
    for r in rows:
        what = " ".join(f"{k} {r[k]}" for k in ("rate", "concurrency", "key") if r[k])
        click.echo(f"{r['queue']}  {r['task']}  {what}  (set at run time)")
    for d in declared:
        what = " ".join(f"{k} {d[k]}" for k in ("rate", "concurrency") if d[k])
        click.echo(f"{d['task']}  {what}  (declared)")
    if not rows and not declared:
        click.echo("no limits")
