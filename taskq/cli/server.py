"""``taskq server``: a private Redis for development."""

from __future__ import annotations

from pathlib import Path

import click

from taskq.ops.devserver import run_server


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=6379, show_default=True)
@click.option(
    "--dir",
    "data_dir",
    type=click.Path(path_type=Path),
    default=Path(".taskq/redis"),
    show_default=True,
    help="Where the AOF is kept.",
)
def server(port: int, data_dir: Path) -> None:
    """Run a private, persistent Redis for development (loopback only, AOF everysec)."""
    run_server(port, data_dir)
