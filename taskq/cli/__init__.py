"""The ``taskq`` command: it parses options, builds values and calls one function each."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import redis

from taskq import __version__, log
from taskq.app import App, redact, unreachable
from taskq.config import parse_queues
from taskq.errors import TaskqError
from taskq.loader import app_path, load_app
from taskq.pool import PoolOptions, run_pool
from taskq.server import run_server


class Context:
    """Lazily loaded app shared by the subcommands."""

    def __init__(self, app: str | None, redis_url: str | None) -> None:
        self._path = app
        self._redis_url = redis_url
        self._app: App | None = None

    @property
    def app_name(self) -> str:
        return app_path(self._path) or "taskq"

    def app(self, *, required: bool = False) -> App:
        if self._app is None:
            path = app_path(self._path)
            if path is None and required:
                raise click.UsageError(
                    "no app: give -A MODULE[:ATTR], TASKQ_APP or [tool.taskq] app"
                )
            self._app = load_app(path) if path else App()
            if self._redis_url:
                self._app.settings = self._app.settings.replace(redis_url=self._redis_url)
        return self._app


class Main(click.Group):
    """Turns every taskq error and Redis outage into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TaskqError as exc:
            raise click.ClickException(str(exc)) from None
        except redis.RedisError as exc:
            url = ctx.obj.app().settings.redis_url if ctx.obj else "?"
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
                raise click.ClickException(unreachable(url, exc)) from None
            raise click.ClickException(f"Redis at {redact(url)} refused: {exc}") from None


@click.group(cls=Main)
@click.version_option(__version__, prog_name="taskq")
@click.option("-A", "--app", "app", envvar="TASKQ_APP", help="MODULE[:ATTR] of the App.")
@click.option("--redis-url", envvar="TASKQ_REDIS_URL", help="Overrides the app's Redis URL.")
@click.pass_context
def main(ctx: click.Context, app: str | None, redis_url: str | None) -> None:
    """taskq: background tasks on Redis Streams."""
    ctx.obj = Context(app, redis_url)


def _set_app(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.find_object(Context)._path = value  # type: ignore[union-attr]


app_option = click.option(
    "-A",
    "--app",
    callback=_set_app,
    expose_value=False,
    is_eager=False,
    help="MODULE[:ATTR] of the App (else TASKQ_APP, else [tool.taskq] app in pyproject.toml).",
)


def _queues(value: str | None, app: App) -> tuple[str, ...]:
    return tuple(parse_queues(value)) if value else (app.settings.queue,)


@main.command()
@app_option
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1),
    envvar="TASKQ_CONCURRENCY",
    default=lambda: os.cpu_count() or 1,
    show_default="number of CPUs",
)
@click.option(
    "-Q", "--queues", envvar="TASKQ_QUEUES", help="Comma-separated queues, read in this order."
)
@click.option(
    "--prefetch",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    envvar="TASKQ_PREFETCH",
    help="Jobs a child takes per fetch.",
)
@click.option(
    "--max-tasks-per-child",
    type=click.IntRange(0),
    default=0,
    envvar="TASKQ_MAX_TASKS_PER_CHILD",
    help="Recycle a child after N jobs (0: never).",
)
@click.option(
    "--max-memory-per-child",
    type=click.IntRange(0),
    default=0,
    envvar="TASKQ_MAX_MEMORY_PER_CHILD",
    help="Recycle a child whose peak RSS passed N KiB (0: never).",
)
@click.option(
    "--time-limit",
    type=float,
    envvar="TASKQ_TIME_LIMIT",
    help="Hard limit (s) for tasks that set none: the child is killed.",
)
@click.option(
    "--soft-time-limit",
    type=float,
    envvar="TASKQ_SOFT_TIME_LIMIT",
    help="Soft limit (s) for tasks that set none: SoftTimeLimitExceeded is raised.",
)
@click.option(
    "--grace",
    type=float,
    default=25.0,
    show_default=True,
    envvar="TASKQ_GRACE",
    help="Seconds running jobs get to finish on SIGTERM.",
)
@click.option(
    "--connect-timeout",
    type=float,
    default=10.0,
    show_default=True,
    envvar="TASKQ_CONNECT_TIMEOUT",
    help="Seconds to wait for Redis at start.",
)
@click.option(
    "--loglevel",
    "-l",
    default="info",
    envvar="TASKQ_LOGLEVEL",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
@click.option(
    "--log-format",
    default="text",
    envvar="TASKQ_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    show_default=True,
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    envvar="TASKQ_METRICS_PORT",
    help="Serve Prometheus metrics on this port (needs taskq[metrics]).",
)
@click.pass_obj
def worker(
    obj: Context,
    concurrency: int,
    queues: str | None,
    prefetch: int,
    max_tasks_per_child: int,
    max_memory_per_child: int,
    time_limit: float | None,
    soft_time_limit: float | None,
    grace: float,
    connect_timeout: float,
    loglevel: str,
    log_format: str,
    metrics_port: int | None,
) -> None:
    """Run a prefork worker pool."""
    if metrics_port is not None:
        from taskq.metrics import Metrics, enable_multiprocess, remove_created_dir

        enable_multiprocess()  # before the app import, which may import prometheus_client
    try:
        log.configure(loglevel, log_format)
        app = obj.app(required=True)
        wait_for_redis(lambda: app.broker.client.ping(), connect_timeout)
        if metrics_port is not None:
            app.add_middleware(Metrics(port=metrics_port, redis_url=app.settings.redis_url))
    except BaseException:
        if metrics_port is not None:
            remove_created_dir()  # nothing else will
        raise
    app.close()  # no connection may cross the fork
    options = PoolOptions(
        concurrency=concurrency,
        queues=_queues(queues, app),
        prefetch=prefetch,
        max_tasks_per_child=max_tasks_per_child,
        max_memory_per_child_kb=max_memory_per_child,
        time_limit_s=time_limit,
        soft_time_limit_s=soft_time_limit,
        grace_s=grace,
        app_name=obj.app_name,
    )
    sys.exit(run_pool(app, options))


def wait_for_redis(ping: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Give a Redis that is still starting (e.g. under the same Procfile) a few seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


@main.command()
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


def _register_subcommands() -> None:
    from taskq.cli_deadletter import deadletter
    from taskq.cli_inspect import inspect, purge

    main.add_command(deadletter)
    main.add_command(inspect)
    main.add_command(purge)


_register_subcommands()
