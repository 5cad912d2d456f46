"""``taskq dashboard``: serve the web dashboard (the ``taskq[dashboard]`` extra)."""

from __future__ import annotations

from typing import Any

import click

from taskq.cli import logs
from taskq.dashboard import require_extra


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=5555, show_default=True)
@click.option("--prefix", default="", help="Serve the pages under this path (e.g. /taskq).")
@click.option("--read-only", is_flag=True, help="No actions: hide them and refuse their POSTs.")
@click.option(
    "--token",
    envvar="TASKQ_DASHBOARD_TOKEN",
    help="Require this secret (bearer header, or ?token= once for a login cookie).",
)
@click.option(
    "--basic-auth",
    envvar="TASKQ_DASHBOARD_BASIC_AUTH",
    metavar="USER:PASSWORD",
    help="Require HTTP basic auth with these credentials.",
)
@click.pass_obj
def dashboard(
    obj: Any,
    host: str,
    port: int,
    prefix: str,
    read_only: bool,
    token: str | None,
    basic_auth: str | None,
) -> None:
    """Serve the web dashboard: queues, workers, jobs, dead letters, periodic schedules.

    It binds to 127.0.0.1 unless --host says otherwise; anyone who can reach it can act
    (retry, purge, cancel) unless --token, --basic-auth or --read-only is given.
    """
    require_extra()
    if basic_auth is not None and ":" not in basic_auth:
        raise click.BadParameter("expected USER:PASSWORD", param_hint="--basic-auth")
    from taskq.dashboard.serve import serve

    logs.configure()
    serve(
        obj.app(),
        host=host,
        port=port,
        prefix=prefix,
        read_only=read_only,
        token=token,
        basic_auth=basic_auth,
    )
