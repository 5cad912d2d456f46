"""``taskq deadletter``: list, show, retry and purge dead-lettered jobs."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import click

from taskq.config import check_queue_name
from taskq.ops.deadletters import Deadletters

_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _store(obj: Any, queue: str | None) -> Deadletters:
    if queue is not None:
        check_queue_name(queue)
    return Deadletters.for_app(obj.app(), queue)


def parse_duration_ms(text: str) -> int:
    """``90s``, ``15m``, ``2h``, ``7d`` → milliseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if not m:
        raise click.BadParameter(f"{text!r}: use a number with s, m, h or d (e.g. 7d)")
    return int(float(m.group(1)) * _UNITS_MS[m.group(2)])


@click.group()
def deadletter() -> None:
    """Jobs that failed for good, kept in <queue>:deadletter."""


_queue = click.option("-Q", "--queue", help="Queue name (default: the app's).")
_json = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@deadletter.command("list")
@_queue
@_json
@click.option("-n", "--limit", type=click.IntRange(1), default=50, show_default=True)
@click.pass_obj
def list_(obj: Any, queue: str | None, as_json: bool, limit: int) -> None:
    """List the newest dead-lettered jobs."""
    store = _store(obj, queue)
    jobs = store.newest(limit=limit)
    if as_json:
        click.echo(json.dumps([j.summary() for j in jobs], indent=2))
        return
    if not jobs:
        click.echo("no dead-lettered jobs")
    now = store.now_ms() if jobs else 0
    for j in jobs:
        age_s = (now - j.last_failure_ms) / 1000
        click.echo(
            f"{j.dead_id}  {j.task}  attempts={j.attempts}  {j.error_type}: "
            f"{j.error[:80]}  ({age_s:.0f}s ago)"
        )


@deadletter.command()
@_queue
@_json
@click.argument("dead_id")
@click.pass_obj
def show(obj: Any, queue: str | None, as_json: bool, dead_id: str) -> None:
    """Show one dead-lettered job in full, traceback included."""
    job = _store(obj, queue).get(dead_id)
    if job is None:
        raise click.ClickException(f"no dead-lettered job {dead_id}")
    if as_json:
        click.echo(json.dumps(job.detail(), indent=2))
        return
    for key, value in job.detail().items():
        click.echo(f"{key}: {value}" if key != "traceback" else f"traceback:\n{value}")


@deadletter.command()
@_queue
@click.argument("dead_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Retry every dead-lettered job.")
@click.pass_obj
def retry(obj: Any, queue: str | None, dead_ids: tuple[str, ...], all_: bool) -> None:
    """Re-enqueue dead-lettered jobs with their attempt count reset."""
    if bool(dead_ids) == all_:
        raise click.UsageError("give DEAD_ID... or --all (not both)")
    store = _store(obj, queue)
    moved, skipped = store.retry(None if all_ else list(dead_ids))
    click.echo(f"re-enqueued {moved} job(s)")
    for dead_id, reason in skipped:
        click.echo(f"not re-enqueued {dead_id}: {reason}", err=True)
    if skipped:
        sys.exit(1)


@deadletter.command("purge")
@_queue
@click.option("--older-than", help="Only jobs dead for longer than this (e.g. 7d, 12h).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def purge_(obj: Any, queue: str | None, older_than: str | None, yes: bool) -> None:
    """Delete dead-lettered jobs for good."""
    store = _store(obj, queue)
    cutoff = store.now_ms() - parse_duration_ms(older_than) if older_than else None
    count = store.count(older_than_ms=cutoff)
    if not count:
        click.echo("nothing to purge")
        return
    if not yes:
        click.confirm(f"delete {count} dead-lettered job(s) from {store.key}?", abort=True)
    click.echo(f"deleted {store.purge(older_than_ms=cutoff)} job(s)")


__all__ = ["deadletter", "parse_duration_ms"]
