"""``taskq fair``: fair queues at run time (docs/fairness.md): ``off`` moves a queue's staged
jobs into its streams and clears its fairness, ``weight`` sets a key's weight."""

from __future__ import annotations

from typing import Any

import click

from taskq.app import App
from taskq.broker.fairness import fair_off
from taskq.config import check_queue_name
from taskq.partitions import expand


@click.group("fair")
def fair() -> None:
    """Fair queues: turn fairness off, set weights."""


@fair.command("off")
@click.argument("queue")
@click.pass_obj
def off(obj: Any, queue: str) -> None:
    """Move every job staged on QUEUE (each partition of a partitioned one) into its
    streams, keys taken in turn, and clear its fairness; plain workers then serve it. Name
    it in no worker's fair_queues first (a fair worker marks it fair again at its start)."""
    app: App = obj.app()
    check_queue_name(queue)
    for q in expand(app.settings.partitions, [queue])[0]:
        moved = fair_off(app.link, q)
        click.echo(f"{q}: {moved} staged job(s) moved into the streams; fairness is off")


@fair.command("weight")
@click.argument("queue")
@click.argument("key")
@click.argument("weight", type=int)
@click.pass_obj
def weight(obj: Any, queue: str, key: str, weight: int) -> None:
    """Set fairness KEY's WEIGHT on QUEUE (1 to 1,000; 1 is the default): it gets WEIGHT
    jobs started for every one of a key of weight 1 while both have jobs waiting."""
    app: App = obj.app()
    app.set_fair_weight(queue, key, weight)
    click.echo(f"{queue}: fair key {key} has weight {weight}")
