"""``taskq dashboard``: serve the web dashboard (the ``taskq[dashboard]`` extra).

Its secrets (the token, the basic-auth pair, the Redis password) come from the environment or
from files: a process's arguments are readable by every user of the host. Given on the
command line they still work, with a warning, and the process replaces its title at once, so
``ps`` and ``/proc/<pid>/cmdline`` stop showing them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click
import setproctitle
from click.core import ParameterSource

from taskq.cli import logs
from taskq.config import redact
from taskq.dashboard import require_extra

logger = logging.getLogger(__name__)

SECRETS = {"token": "TASKQ_DASHBOARD_TOKEN", "basic_auth": "TASKQ_DASHBOARD_BASIC_AUTH"}
"""The options that carry a secret, and the variable to pass it in instead."""


def _read_secret(path: Path | None) -> str | None:
    """A secret file's text, less the line end an editor or ``echo`` leaves."""
    return None if path is None else path.read_text().rstrip("\r\n")


def _pick(ctx: click.Context, name: str, value: str | None, path: Path | None) -> str | None:
    """The secret of option ``name``: from its file, else its variable, else the command line
    (with a warning: the command line is public until the title is replaced)."""
    flag = "--" + name.replace("_", "-")
    if path is not None and value is not None:
        raise click.UsageError(f"give {flag} or {flag}-file, not both")
    if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
        logger.warning(
            "%s on the command line is deprecated: other users of the host may see it before "
            "the process hides it; use %s or %s-file",
            flag,
            SECRETS[name],
            flag,
        )
    return _read_secret(path) if path is not None else value


def _warn_redis_password(ctx: click.Context) -> None:
    parent = ctx.parent
    if parent is None or parent.get_parameter_source("redis_url") != ParameterSource.COMMANDLINE:
        return
    url = str(parent.params.get("redis_url") or "")
    if redact(url) != url:
        logger.warning("--redis-url holds a password: use TASKQ_REDIS_URL instead")


secret_file = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=5555, show_default=True)
@click.option("--prefix", default="", help="Serve the pages under this path (e.g. /taskq).")
@click.option("--read-only", is_flag=True, help="No actions: hide them and refuse their POSTs.")
@click.option(
    "--token",
    envvar="TASKQ_DASHBOARD_TOKEN",
    help="Require this secret (bearer header, or ?token= once for a login cookie). Pass it "
    "in TASKQ_DASHBOARD_TOKEN or --token-file: on the command line it is deprecated.",
)
@click.option("--token-file", type=secret_file, help="Read the token from this file.")
@click.option(
    "--basic-auth",
    envvar="TASKQ_DASHBOARD_BASIC_AUTH",
    metavar="USER:PASSWORD",
    help="Require HTTP basic auth with these credentials. Pass them in "
    "TASKQ_DASHBOARD_BASIC_AUTH or --basic-auth-file: on the command line it is deprecated.",
)
@click.option("--basic-auth-file", type=secret_file, help="Read USER:PASSWORD from this file.")
@click.pass_context
def dashboard(
    ctx: click.Context,
    host: str,
    port: int,
    prefix: str,
    read_only: bool,
    token: str | None,
    token_file: Path | None,
    basic_auth: str | None,
    basic_auth_file: Path | None,
) -> None:
    """Serve the web dashboard: queues, workers, jobs, dead letters, periodic schedules.

    It binds to 127.0.0.1 unless --host says otherwise; anyone who can reach it can act
    (retry, purge, cancel) unless a token, basic auth or --read-only is given.
    """
    setproctitle.setproctitle(f"taskq: dashboard {host}:{port}")  # hides the arguments
    require_extra()
    logs.configure()
    _warn_redis_password(ctx)
    token = _pick(ctx, "token", token, token_file)
    basic_auth = _pick(ctx, "basic_auth", basic_auth, basic_auth_file)
    from taskq.dashboard.security import check_basic_auth
    from taskq.dashboard.serve import serve

    if basic_auth is not None:
        check_basic_auth(basic_auth)
    obj: Any = ctx.obj

    serve(
        obj.app(),
        host=host,
        port=port,
        prefix=prefix,
        read_only=read_only,
        token=token,
        basic_auth=basic_auth,
    )
