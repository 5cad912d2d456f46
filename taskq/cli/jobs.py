"""``taskq jobs``: list a queue's jobs in one state, and cancel, delete, retry or move them,
singly or all that match a filter (what the dashboard's queue pages do)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from taskq.config import check_queue_name
from taskq.ops.browse import Jobs
from taskq.ops.jobrows import STATES, JobFilter, JobRow, check_action
from taskq.ops.recordsearch import RECORD_STATES, Records
from taskq.ops.render import fmt_ms

_state = click.option("--state", type=click.Choice(STATES), help="The state the jobs are in.")
_priority = click.option(
    "--priority",
    type=click.Choice(("high", "normal", "low")),
    default="normal",
    show_default=True,
    help="The priority stream (waiting, running) or retry set (retrying).",
)
_filter = click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="task=...|args=...|error=...|since=...|until=...",
    help="A substring the job's task, rendered arguments or last error must contain, or the "
    "earliest / latest due (else enqueue) time: ISO 8601 (UTC) or ms since the epoch.",
)


@click.group()
def jobs() -> None:
    """A queue's jobs per state: list them, act on them."""


def _jobs(obj: Any, queue: str, held_task: str = "") -> Jobs:
    check_queue_name(queue)
    return Jobs(obj.app(), queue, held_task=held_task)


def _line(row: JobRow) -> str:
    when = f"due={row.due_ms}" if row.due_ms is not None else f"enqueued={row.enqueued_ms}"
    extra = f"  ran={fmt_ms(row.run_ms)} on {row.worker}" if row.run_ms is not None else ""
    error = f"  {row.error}" if row.error else ""
    return f"{row.ref}  {row.job_id or '-'}  {row.task}({row.args})  {when}{extra}{error}"


@jobs.command("list")
@click.argument("queue")
@_state
@_priority
@click.option("--task", default="", help="Only jobs whose task name contains this.")
@_filter
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--after", help="The cursor a previous page printed.")
@click.option(
    "--of", "held_task", default="", help="--state held: the limited task; paused: the pause."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_(
    obj: Any,
    queue: str,
    state: str | None,
    priority: str,
    task: str,
    filters: Sequence[str],
    limit: int,
    after: str | None,
    held_task: str,
    as_json: bool,
) -> None:
    """List the jobs of QUEUE in one state, oldest (or soonest due) first.

    The first column is each job's place (an entry id, or <due ms>/<job id>), which the
    actions accept as an ID with --state."""
    where = JobFilter.parse([*filters, *([f"task={task}"] if task else [])])
    page = _jobs(obj, queue, held_task).page(
        state or "waiting", priority=priority, after=after, limit=limit, where=where
    )
    if as_json:
        doc = {
            "queue": queue,
            "state": state or "waiting",
            "priority": priority,
            "rows": [r.to_json() for r in page.rows],
            "after": page.after,
            "scanned": page.scanned,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    for row in page.rows:
        click.echo(_line(row))
    if not page.rows:
        click.echo("no jobs")
    if page.after is not None:
        click.echo(f"more: --after {page.after}  ({page.scanned} entries read)")


def _targets(
    browse: Jobs, state: str | None, priority: str, ids: Sequence[str], where: JobFilter
) -> tuple[str, list[JobRow]]:
    """The state and rows the action is for: the IDs (places with --state, or job ids that
    keep a record), else every job of --state that matches the filter."""
    if not ids:
        if state is None:
            raise click.UsageError("give job IDs, or --state (and --filter) for all that match")
        return state, [row for batch in browse.each(state, priority=priority, where=where)
                       for row in batch]  # fmt: skip
    if state is not None:
        return state, browse.find(state, ids, priority=priority)
    located = [found for i in ids if (found := browse.locate(i)) is not None]
    states = {s for s, _ in located}
    if len(states) > 1:
        raise click.UsageError(f"the jobs are in different states ({', '.join(sorted(states))})")
    return (states.pop() if states else "waiting"), [row for _, row in located]


def _act(
    obj: Any,
    action: str,
    queue: str,
    ids: Sequence[str],
    state: str | None,
    priority: str,
    filters: Sequence[str],
    yes: bool,
    to: str = "",
) -> None:
    browse = _jobs(obj, queue)
    where = JobFilter.parse(filters)
    found_state, rows = _targets(browse, state, priority, ids, where)
    check_action(action, found_state)
    if not rows:
        click.echo(f"no {found_state} job found")
        return
    if not yes:
        click.confirm(f"{action} {len(rows)} {found_state} job(s) of {queue}?", abort=True)
    done = browse.act(action, found_state, rows, to=to)
    click.echo(f"{action}: {done} of {len(rows)} job(s)")


def _action(name: str, help_text: str) -> click.Command:
    @click.argument("queue")
    @click.argument("ids", nargs=-1)
    @_state
    @_priority
    @_filter
    @click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.pass_obj
    def command(
        obj: Any,
        queue: str,
        ids: tuple[str, ...],
        state: str | None,
        priority: str,
        filters: tuple[str, ...],
        yes: bool,
    ) -> None:
        _act(obj, name, queue, ids, state, priority, filters, yes)

    command.__doc__ = help_text
    return jobs.command(name)(command)


_action(
    "cancel",
    "Cancel jobs of QUEUE: IDs, or all of --state that match. A running job with a record "
    "is interrupted.",
)
_action("delete", "Remove jobs that no worker has taken from QUEUE: IDs, or all that match.")
_action("retry", "Run retrying or scheduled jobs of QUEUE now: IDs, or all that match.")


@jobs.command()
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--to", type=click.Choice(("high", "normal", "low")), required=True)
@_priority
@_filter
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def move(
    obj: Any,
    queue: str,
    ids: tuple[str, ...],
    to: str,
    priority: str,
    filters: tuple[str, ...],
    yes: bool,
) -> None:
    """Move waiting jobs of QUEUE to another priority: IDs, or all that match."""
    _act(obj, "move", queue, ids, "waiting", priority, filters, yes, to=to)


@jobs.command()
@click.argument("queue")
@click.option("--task", default="", help="Only jobs whose task name contains this.")
@click.option("--state", type=click.Choice(RECORD_STATES), help="The state the record says.")
@click.option("--since", default="", help="Ended (else due, else enqueued) at or after this.")
@click.option("--until", default="", help="... at or before this (ISO 8601 UTC, or ms).")
@_filter
@click.option("--cursor", help="The cursor a previous page printed (SCAN's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def search(
    obj: Any,
    queue: str,
    task: str,
    state: str | None,
    since: str,
    until: str,
    filters: Sequence[str],
    cursor: str | None,
    as_json: bool,
) -> None:
    """Search the status records of QUEUE (jobs that keep one, in any state, ended ones too),
    one SCAN page of about 500 records at a time."""
    check_queue_name(queue)
    named = [f"{k}={v}" for k, v in (("task", task), ("since", since), ("until", until)) if v]
    where = JobFilter.parse([*filters, *named])
    page = Records(obj.app().link, queue).page(where, state=state or "", cursor=cursor)
    if as_json:
        rows = [r.to_json() for r in page.rows]
        doc = {"queue": queue, "rows": rows, "cursor": page.cursor, "scanned": page.scanned}
        click.echo(json.dumps(doc, indent=2))
        return
    for row in page.rows:
        click.echo(_record_line(row))
    more = f"; next page: --cursor {page.cursor}" if page.cursor else "; the search is complete"
    click.echo(f"read {page.scanned} records, {len(page.rows)} matched{more}")


def _record_line(row: JobRow) -> str:
    times = (("enqueued", row.enqueued_ms), ("due", row.due_ms), ("ended", row.finished_ms))
    when = "".join(f"  {name}={ms}" for name, ms in times if ms is not None)
    error = f"  {row.error}" if row.error else ""
    return f"{row.job_id}  {row.state}  {row.task}({row.args}){when}{error}"
