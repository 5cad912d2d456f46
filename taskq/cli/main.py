"""The ``taskq`` group: the app it works on, its subcommands, loaded only when used, and one
line on stderr for every taskq error."""

from __future__ import annotations

import gc
import importlib
from typing import TYPE_CHECKING, Any

import click

from taskq import __version__
from taskq.errors import TaskqError

if TYPE_CHECKING:
    from taskq.app import App

# A subcommand's name → "module:attribute" of its click command. A subcommand's module is
# imported only when that subcommand runs (or ``taskq --help`` lists them all), so that
# ``taskq --version`` and each command load only what they use. To add a subcommand, add its
# line here.
COMMANDS: dict[str, str] = {
    "acl": "taskq.cli.acl:acl",
    "audit": "taskq.cli.control:audit",
    "dashboard": "taskq.cli.dashboard:dashboard",
    "fair": "taskq.cli.fair:fair",
    "deadletter": "taskq.cli.deadletter:deadletter",
    "inspect": "taskq.cli.inspect:inspect",
    "job": "taskq.cli.job:job",
    "jobs": "taskq.cli.jobs:jobs",
    "limit": "taskq.cli.control:limit",
    "pause": "taskq.cli.control:pause",
    "periodic": "taskq.cli.periodic:periodic",
    "purge": "taskq.cli.inspect:purge",
    "resume": "taskq.cli.control:resume",
    "scale": "taskq.cli.scale:scale",
    "server": "taskq.cli.server:server",
    "worker": "taskq.cli.worker:worker",
}


class NoCollection:
    """The cyclic garbage collector off while a subcommand's modules or the app load: loading
    modules makes objects by the thousand and little garbage, and the collections that set off
    cost ``taskq worker`` about 2 % of the instructions of its start.

    In a process the CLI owns (:func:`run`), what the load made is also moved to the
    collector's oldest generation before it is on again: left young, the collector, once on,
    first walked all of it (56,000 objects for ``taskq worker``: 11 ms, a tenth of its
    start). ``gc.freeze()`` then ``gc.unfreeze()`` moves them without a walk. Not in a
    process that calls :data:`main` itself (a test's ``CliRunner``): there the move would
    take that process's young garbage along, which a full collection then finalizes much
    later (an unclosed socket's warning in another test). A class, not ``contextlib``:
    ``taskq --version`` does not load that."""

    owns_process = False
    """Set by :func:`run`: this process runs the ``taskq`` command and nothing else."""

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *_exc: object) -> None:
        if self.enabled:
            if NoCollection.owns_process:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class Context:
    """Lazily loaded app shared by the subcommands."""

    def __init__(self, app: str | None, redis_url: str | None) -> None:
        self.path = app
        self._redis_url = redis_url
        self._app: App | None = None

    @property
    def app_name(self) -> str:
        from taskq.cli.loader import app_path  # the loader imports the App: only when needed

        return app_path(self.path) or "taskq"

    def app(self, *, required: bool = False) -> App:
        if self._app is None:
            from taskq.app import App
            from taskq.cli.loader import app_path, load_app

            path = app_path(self.path)
            if path is None and required:
                raise click.UsageError(
                    "no app: give -A MODULE[:ATTR], TASKQ_APP or [tool.taskq] app"
                )
            with NoCollection():
                self._app = load_app(path) if path else App()
            if self._redis_url:
                self._app.close()  # a link opened on the old URL must not be reused
                self._app.settings = self._app.settings.replace(redis_url=self._redis_url)
        return self._app


class Main(click.Group):
    """Loads each subcommand of ``COMMANDS`` when it is first asked for, and turns every taskq
    error (a Redis outage included) into one line on stderr, exit 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, _, attr = COMMANDS[cmd_name].partition(":")
            with NoCollection():
                self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TaskqError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=Main)
@click.version_option(__version__, prog_name="taskq")
@click.option("-A", "--app", "app", envvar="TASKQ_APP", help="MODULE[:ATTR] of the App.")
@click.option("--redis-url", envvar="TASKQ_REDIS_URL", help="Overrides the app's Redis URL.")
@click.pass_context
def main(ctx: click.Context, app: str | None, redis_url: str | None) -> None:
    """taskq: background tasks on Redis Streams."""
    ctx.obj = Context(app, redis_url)


def _set_app(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    found = ctx.find_object(Context)
    if value and found is not None:
        found.path = value


app_option = click.option(
    "-A",
    "--app",
    callback=_set_app,
    expose_value=False,
    is_eager=False,
    help="MODULE[:ATTR] of the App (else TASKQ_APP, else [tool.taskq] app in pyproject.toml).",
)


def queues_of(value: str | None, app: App) -> tuple[str, ...]:
    """The ``-Q`` queues, else the app's."""
    from taskq.config import parse_queues  # the settings module loads the signer: only when used

    return tuple(parse_queues(value)) if value else (app.settings.queue,)


def run() -> None:
    """The ``taskq`` command and ``python -m taskq``: :data:`main` in a process of its own."""
    NoCollection.owns_process = True
    main()
