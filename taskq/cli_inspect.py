"""``taskq inspect`` and ``taskq purge`` (placeholder until the inspect views land)."""

from __future__ import annotations

import click


@click.group(invoke_without_command=True)
def inspect() -> None:
    """Show what the queues and workers are doing."""


@click.command()
def purge() -> None:
    """Remove waiting jobs from a queue."""
