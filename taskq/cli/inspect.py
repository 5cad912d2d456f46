"""``taskq inspect`` (what the queues and workers are doing) and ``taskq purge``.

Every view reads Redis only (see :mod:`taskq.ops.inspect`), so it answers even when every
worker is hung. ``--json`` prints the views' fields (schemas in docs/operations.md).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from taskq.config import parse_queues
from taskq.errors import BrokerError, ConfigError
from taskq.keys import PRIORITIES
from taskq.ops.inspect import Inspector, to_json
from taskq.ops.pendingview import PendingJob
from taskq.ops.render import (
    render_active,
    render_gathering,
    render_overview,
    render_pending,
    render_ping,
    render_queue_details,
    render_registered,
    render_workers,
)
from taskq.partitions import expand

V = TypeVar("V")

CLEAR = "\x1b[H\x1b[2J"
"""Cursor home + clear screen: how ``--watch`` redraws in place on a terminal."""


def _inspector(
    obj: Any, queues: str | None, keys_cursor: str | None = None
) -> Callable[[], Inspector]:
    """The inspector for ``-Q``, else for the app's queues plus those its workers serve
    (looked up again at each call, so ``--watch`` sees workers that start later)."""
    app = obj.app()
    if queues:
        try:
            names = expand(app.settings.partitions, parse_queues(queues))[0]
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="-Q") from None
        if keys_cursor not in (None, "0") and len(names) != 1:
            raise click.BadParameter(KEYS_CURSOR_ONE_QUEUE, param_hint="--keys-cursor")
        fixed = Inspector(app.reader, names, keys_cursor=keys_cursor)
        return lambda: fixed
    if keys_cursor not in (None, "0"):
        raise click.BadParameter(KEYS_CURSOR_ONE_QUEUE, param_hint="--keys-cursor")
    return lambda: Inspector.for_app(app, keys_cursor=keys_cursor)


KEYS_CURSOR_ONE_QUEUE = (
    "a cursor continues the key list of the queue it came from: name that one queue (a "
    "partition of a partitioned queue) with -Q"
)


def _keys_cursor(given: str | None, as_json: bool) -> str | None:
    """The ZSCAN cursor of the fair keys' page to read: ``--keys-cursor``, else the first
    page with ``--json``; none for the text views, which show the top keys only."""
    if given is not None and not as_json:
        raise click.BadParameter(
            "pages the key list of --json: add --json", param_hint="--keys-cursor"
        )
    if given is not None and not (given.isascii() and given.isdigit() and len(given) <= 20):
        raise click.BadParameter(f"{given!r} is not a cursor", param_hint="--keys-cursor")
    return (given or "0") if as_json else None


def _options(**given: Any) -> dict[str, Any]:
    """This subcommand's options, falling back to the ones given to ``inspect`` itself."""
    ctx = click.get_current_context()
    parent = ctx.parent.params if ctx.parent and ctx.parent.command is inspect else {}
    return {k: v if v not in (None, False) else parent.get(k, v) for k, v in given.items()}


def _print(value: Any, render: Callable[[Any], list[str]], as_json: bool, *, compact: bool) -> None:
    if as_json:
        click.echo(json.dumps(to_json(value), indent=None if compact else 2))
    else:
        click.echo("\n".join(render(value)))


def show(
    obj: Any,
    view: Callable[[Inspector], V],
    render: Callable[[V], list[str]],
    *,
    queues: str | None = None,
    as_json: bool = False,
    watch: float | None = None,
    count: int | None = None,
    keys_cursor: str | None = None,
) -> None:
    """Print one view; with ``watch``, redraw it every ``watch`` seconds until Ctrl-C.

    On a terminal each frame replaces the last; otherwise frames follow each other, one
    compact JSON document per line with ``as_json``. ``count`` bounds the frames (tests).
    """
    make = _inspector(obj, queues, _keys_cursor(keys_cursor, as_json))
    if watch is None:
        _print(view(make()), render, as_json, compact=False)
        return
    redraw = sys.stdout.isatty()
    frames = 0
    try:
        while count is None or frames < count:
            if frames:
                time.sleep(watch)
            if redraw or (frames and not as_json):
                click.echo(CLEAR if redraw else "", nl=not redraw)
            try:
                _print(view(make()), render, as_json, compact=True)
            except BrokerError as exc:  # keep watching through a Redis restart
                click.echo(f"Redis unavailable: {exc}", err=True)
            frames += 1
    except KeyboardInterrupt:
        pass  # the way out of --watch, not an error


_queues = click.option(
    "-Q",
    "--queues",
    help="Comma-separated queues (default: the app's, and those its workers serve).",
)
_json = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_watch = click.option(
    "--watch",
    type=click.FloatRange(min=0.05),
    is_flag=False,
    flag_value=2.0,
    metavar="[SECONDS]",
    help="Redraw every SECONDS (default 2) until Ctrl-C.",
)
_count = click.option("--count", type=click.IntRange(1), hidden=True, help="Stop after N frames.")


_keys_cursor_option = click.option(
    "--keys-cursor",
    metavar="C",
    help="With --json: the next page of each fair queue's keys (its keys_cursor).",
)


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    return _queues(_json(_watch(_count(f))))


@click.group(invoke_without_command=True)
@_common
@_keys_cursor_option
@click.pass_context
def inspect(
    ctx: click.Context,
    queues: str | None,
    as_json: bool,
    watch: float | None,
    count: int | None,
    keys_cursor: str | None,
) -> None:
    """Show what the queues and workers are doing (read from Redis; never waits on workers).

    With no subcommand: for each queue and priority, jobs waiting and pending and the age of
    the oldest of each, scheduled and dead-lettered jobs; each fair queue's active keys and
    top keys; then the live workers.
    """
    if ctx.invoked_subcommand is None:
        show(ctx.obj, Inspector.overview, render_overview, **ctx.params)


@inspect.command("queues")
@_common
@_keys_cursor_option
@click.pass_obj
def queues_(obj: Any, /, **opts: Any) -> None:
    """Per stream: length, waiting, pending, consumers, group cursor."""
    show(obj, Inspector.queue_stats, render_queue_details, **_options(**opts))


@inspect.command("workers")
@_common
@click.pass_obj
def workers_(obj: Any, /, **opts: Any) -> None:
    """Live workers: their counters and each child's current job."""
    show(obj, Inspector.workers, render_workers, **_options(**opts))


@inspect.command("gathering")
@_common
@click.pass_obj
def gathering_(obj: Any, /, **opts: Any) -> None:
    """Debounce bursts and batches waiting to run: key, job, calls gathered, due."""

    def render(rows: list[Any]) -> list[str]:
        return render_gathering(rows, int(time.time() * 1000))

    show(obj, Inspector.gathering, render, **_options(**opts))


@inspect.command("active")
@_common
@click.pass_obj
def active_(obj: Any, /, **opts: Any) -> None:
    """Jobs running now, and for how long."""
    show(obj, Inspector.active, render_active, **_options(**opts))


@inspect.command("pending")
@_common
@click.option(
    "--idle",
    "idle_ms",
    type=click.IntRange(0),
    default=0,
    metavar="MS",
    help="Only entries idle for at least MS milliseconds.",
)
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Read at most N entries per stream and show at most N.",
)
@click.pass_obj
def pending_(obj: Any, /, idle_ms: int, limit: int, **opts: Any) -> None:
    """Delivered, unacked jobs: holder, state, idle time, deliveries."""

    def view(i: Inspector) -> list[PendingJob]:
        return i.pending(min_idle_ms=idle_ms, limit=limit)

    show(obj, view, render_pending, **_options(**opts))


@inspect.command("registered")
@_queues
@_json
@click.pass_obj
def registered_(obj: Any, /, **opts: Any) -> None:
    """The tasks each live worker has registered."""
    show(obj, Inspector.workers, render_registered, **_options(**opts))


@inspect.command("ping")
@_queues
@_json
@click.pass_obj
def ping_(obj: Any, /, **opts: Any) -> None:
    """Which workers answer (keep their heartbeat fresh); exit 1 if none.

    Nothing is sent to the workers: a worker answers while its record is younger than its
    remaining TTL.
    """
    o = _options(**opts)
    result = _inspector(obj, o["queues"])().ping()
    _print(result, render_ping, o["as_json"], compact=False)
    if not any(w.answered for w in result.workers):
        raise click.exceptions.Exit(1)


@click.command()
@click.argument("queue")
@click.option(
    "-p",
    "--priority",
    "priorities",
    type=click.Choice(PRIORITIES),
    multiple=True,
    help="Only this priority (repeatable; default: all).",
)
@click.option(
    "--include-pending",
    is_flag=True,
    help="Also remove delivered, unacked jobs, including those live workers are running.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@_json
@click.pass_obj
def purge(
    obj: Any,
    queue: str,
    priorities: tuple[str, ...],
    include_pending: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Remove the jobs of QUEUE that no worker has taken yet.

    Running and retrying jobs stay unless --include-pending; delayed and dead-lettered jobs
    always stay.
    """
    app = obj.app()
    app.settings.replace(queue=queue)  # validates the name
    chosen = priorities or PRIORITIES
    [stats] = Inspector(app.reader, [queue]).queue_stats()
    streams = [s for s in stats.streams if s.priority in chosen]
    waiting = sum(s.waiting for s in streams)
    pending = sum(s.pending for s in streams) if include_pending else 0
    removed = {p: (0, 0) for p in chosen}
    if waiting or pending:
        if not yes:
            what = f"{waiting} waiting" + (
                f" and {pending} pending (some may be running)" if include_pending else ""
            )
            click.confirm(f"remove {what} job(s) from {queue} ({', '.join(chosen)})?", abort=True)
        removed = app.operators.purge_waiting(queue, chosen, include_pending=include_pending)
    _report_purge(queue, removed, as_json)


def _report_purge(queue: str, removed: dict[str, tuple[int, int]], as_json: bool) -> None:
    waiting = sum(w for w, _ in removed.values())
    pending = sum(p for _, p in removed.values())
    if as_json:
        per = {p: {"waiting": w, "pending": n} for p, (w, n) in removed.items()}
        report = {"queue": queue, "waiting": waiting, "pending": pending, "priorities": per}
        click.echo(json.dumps(report, indent=2))
    elif not waiting and not pending:
        click.echo("nothing to purge")
    else:
        detail = ", ".join(f"{p} {w + n}" for p, (w, n) in removed.items())
        extra = f" and {pending} pending job(s)" if pending else ""
        click.echo(f"removed {waiting} waiting job(s){extra} from {queue} ({detail})")
