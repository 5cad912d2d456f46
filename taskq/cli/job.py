"""``taskq job ID``: one job's status, attempts and result; ``--wait`` for its outcome."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from taskq.broker.steps import run
from taskq.config import check_queue_name
from taskq.errors import ResultTimeout, TaskFailed
from taskq.job import Flow, Job
from taskq.keys import check_job_id
from taskq.ops.jobview import render_event, render_flow, render_job
from taskq.results import CANCELLED, EXPIRED, FAILED, UNKNOWN, JobStatus
from taskq.telemetry import counts_steps

EXIT_FAILED, EXIT_TIMEOUT = 1, 2


@click.command("job")
@click.argument("words", nargs=-1, required=True, metavar="[cancel] JOB_ID")
@click.option("-Q", "--queue", help="The job's queue (default: every queue of the app).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--wait", is_flag=True, help="Wait for the job to end: exit 0 if it succeeded.")
@click.option(
    "--timeout", type=click.FloatRange(min=0), help="With --wait: give up after S seconds (exit 2)."
)
@click.option(
    "--terminate", is_flag=True, help="With cancel: also interrupt the job if it is running."
)
@click.option(
    "--follow", is_flag=True, help="Print its progress, output and logs live until it ends."
)
@click.pass_obj
def job(
    obj: Any,
    words: tuple[str, ...],
    queue: str | None,
    as_json: bool,
    wait: bool,
    timeout: float | None,
    terminate: bool,
    follow: bool,
) -> None:
    """Show a job: status, task, arguments, attempts with each error, worker, times, result.

    With --follow, first print its progress, output chunks and log lines live until it ends.
    With --json, its progress and the counts of its chunks and log records are included.

    With --wait, wait for it to end (exit 0 succeeded, 1 failed, 2 timed out). Only jobs that
    store their results keep a record; others show what their stream entry tells.

    ``taskq job cancel ID [--terminate]`` cancels a job (or every step of a workflow) that has
    not run: exit 0 if it was cancelled (or will be interrupted), 1 if not.
    """
    if len(words) == 2 and words[0] == "cancel":
        sys.exit(_cancel(obj.app(), words[1], queue, terminate=terminate))
    if len(words) != 1:
        raise click.UsageError("give one job id, or: taskq job cancel JOB_ID")
    if follow:  # (then waits: the end entry comes just before the record's end)
        _follow(obj.app(), words[0], queue)
    sys.exit(_show_job(obj.app(), words[0], queue, as_json, wait or follow, timeout))


def _follow(app: Any, job_id: str, queue: str | None) -> None:
    """Print the job's telemetry as it comes, until the job ends (docs/telemetry.md)."""
    _check(job_id, queue)
    follower = app.job(job_id, queue=queue).follower()
    while not follower.done:
        for kind, value in run(app.link, follower.next_steps()):
            click.echo(render_event(kind, value))


def _show_job(
    app: Any, job_id: str, queue: str | None, as_json: bool, wait: bool, timeout: float | None
) -> int:
    """Show a job (or a workflow), waiting first with ``wait``. Returns the exit status."""
    _check(job_id, queue)
    handle = app.job(job_id, queue=queue)
    if not handle.recorded:
        flow = app.flow(job_id, queue=queue)
        if flow is not None:
            return _show_flow(app, flow, as_json, wait, timeout)
    code = 0
    if wait and handle.recorded:
        try:
            handle.wait(timeout)
        except TaskFailed:
            code = EXIT_FAILED
        except ResultTimeout:
            code = EXIT_TIMEOUT
    status = handle.status()
    telemetry = _telemetry(app, handle) if as_json else None
    _show(status, app.reader.now_ms(), as_json, telemetry)
    if status.state == UNKNOWN:
        click.echo(f"no record of job {job_id} (never stored, expired or forgotten)", err=True)
        code = EXIT_FAILED
    elif status.state in (FAILED, CANCELLED, EXPIRED):
        code = EXIT_FAILED
    elif code == EXIT_TIMEOUT:
        click.echo(f"job {job_id} is still {status.state} after {timeout}s", err=True)
    return code


def _check(job_id: str, queue: str | None) -> None:
    check_job_id(job_id)
    if queue is not None:
        check_queue_name(queue)


def _cancel(app: Any, job_id: str, queue: str | None, *, terminate: bool) -> int:
    """Cancel a job or a workflow's steps; prints each outcome. Returns the exit status."""
    _check(job_id, queue)
    handle = app.job(job_id, queue=queue)
    if handle.recorded:
        outcomes = {job_id: handle.cancel(terminate=terminate)}
    else:
        flow = app.flow(job_id, queue=queue)
        if flow is None:  # a job without a record: found by its id, or a tombstone stops it
            outcomes = {job_id: handle.cancel(terminate=terminate)}
        else:
            outcomes = flow.cancel(terminate=terminate)
    for step, outcome in outcomes.items():
        click.echo(f"{step}: {outcome}")
    good = ("cancelled", "terminating", "requested")
    return 0 if any(o in good for o in outcomes.values()) else EXIT_FAILED


def _show_flow(app: Any, flow: Flow, as_json: bool, wait: bool, timeout: float | None) -> int:
    """Show a workflow's steps; with ``wait``, wait for its result first. Returns the exit
    status."""
    code = 0
    if wait:
        try:
            flow.result(timeout)
        except TaskFailed:
            code = EXIT_FAILED
        except ResultTimeout:
            code = EXIT_TIMEOUT
    view = app.records.flow_view(flow.queue, flow.id)
    if as_json:
        click.echo(json.dumps(view.to_json(), indent=2, default=repr))
    else:
        for line in render_flow(view):
            click.echo(line)
    if any(s.state == FAILED for s in view.steps):
        code = EXIT_FAILED
    return code


def _telemetry(app: Any, handle: Job) -> dict[str, Any]:
    """The job's progress and the counts of its chunks and log records, for ``--json``."""
    progress = handle.progress()
    chunks, lines = run(app.link, counts_steps(handle.queue, handle.id))
    return {
        "progress": progress._asdict() if progress is not None else None,
        "output": {"chunks": chunks, "log_records": lines},
    }


def _show(
    status: JobStatus, now_ms: int, as_json: bool, telemetry: dict[str, Any] | None = None
) -> None:
    if as_json:
        click.echo(json.dumps({**status.to_json(), **(telemetry or {})}, indent=2, default=repr))
    else:
        for line in render_job(status, now_ms):
            click.echo(line)
