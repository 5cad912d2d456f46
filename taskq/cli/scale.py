"""``taskq scale``: the worker processes each queue wants now, for autoscalers and people
(see :mod:`taskq.worker.scaling` and docs/scaling.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from taskq.config import parse_queues
from taskq.errors import ConfigError
from taskq.partitions import expand
from taskq.worker.scaling import Scaler, ScaleSignal, document


@click.command()
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def scale(obj: Any, queues: tuple[str, ...], as_json: bool) -> None:
    """Print the worker processes each QUEUE wants now (default: the app's queue), and why.

    The total is what a worker serving all of them should have in all; divide by its -c
    for the number of workers.
    """
    app = obj.app()
    try:
        names = parse_queues(",".join(queues)) if queues else [app.settings.queue]
        physical = expand(app.settings.partitions, names)[0]
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="QUEUE") from None
    signals = Scaler(app.reader, physical, app.settings).signals()
    if as_json:
        click.echo(json.dumps(document(signals), indent=2))
        return
    for s in signals:
        click.echo(_line(s))
    click.echo(f"total: {sum(s.desired_processes for s in signals)} process(es)")


def _line(s: ScaleSignal) -> str:
    duration = f"{s.job_duration_s * 1000:.0f}ms" if s.job_duration_s is not None else "unknown"
    return (
        f"{s.queue}: {s.desired_processes} process(es) "
        f"(waiting {s.waiting}, fetched {s.fetched}, due within {s.horizon_s:g}s {s.due}, "
        f"running {s.running}, held {s.held}; job {duration}, work {s.work_s:.1f}s, "
        f"target {s.target_time_to_start_s:g}s; {s.workers} worker(s), "
        f"{s.processes} process(es))"
    )
