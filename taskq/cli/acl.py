"""``taskq acl print``: the ``ACL SETUSER`` line of a least-privilege user for one role."""

from __future__ import annotations

import os

import click

from taskq.config import parse_queues
from taskq.ops.acl import ROLES, default_user, setuser_line


@click.group()
def acl() -> None:
    """Redis ACL users for taskq's roles (see docs/security.md)."""


@acl.command("print")
@click.option(
    "-Q",
    "--queue",
    "queues",
    multiple=True,
    required=True,
    help="Queue the user works on (repeatable, or comma-separated).",
)
@click.option("--role", type=click.Choice(list(ROLES)), required=True)
@click.option("--user", help="User name (default: taskq-ROLE).")
@click.option(
    "--password-env",
    metavar="VAR",
    help="Environment variable holding the password; the line carries only its SHA-256. "
    "Without it, nobody can log in as the user until a password is added.",
)
@click.option(
    "--redis-version",
    type=click.Choice(["7", "6.2"]),
    default="7",
    show_default=True,
    help="The server the line is for: 6.2 has no read-only key rules (%R~), so there the "
    "worker may also write the pauses and run-time limits it only reads on 7.",
)
def print_(
    queues: tuple[str, ...],
    role: str,
    user: str | None,
    password_env: str | None,
    redis_version: str,
) -> None:
    """Print the ACL SETUSER line for ROLE on the queues (pipe it to redis-cli).

    The password is read from the environment, never from the command line, where other
    users of the machine could see it (ps, shell history).
    """
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.UsageError(f"--password-env: ${password_env} is unset or empty")
    names = [q for value in queues for q in parse_queues(value)]
    user = user or default_user(role)
    read_only_rules = redis_version != "6.2"
    click.echo(
        setuser_line(role, names, user=user, password=password, read_only_rules=read_only_rules)
    )
    if password is None:
        click.echo(
            f"# nobody can log in as {user} until you add a password (--password-env)", err=True
        )
