"""``taskq worker``: the prefork pool, as a command."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import click

from taskq.cli import logs
from taskq.cli.main import Context, app_option, queues_of
from taskq.errors import BrokerUnavailable
from taskq.worker.consumer import DEFAULT_ASYNC_CONCURRENCY
from taskq.worker.health import HealthServer
from taskq.worker.pool import PoolOptions, run_pool


@click.command()
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
    envvar="TASKQ_PREFETCH",
    help="Jobs a child takes per fetch (default: adaptive, up to 64 while jobs are short; "
    "a fixed N turns the hand-back of jobs waiting behind a long one off).",
)
@click.option(
    "--async-concurrency",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_ASYNC_CONCURRENCY,
    show_default=True,
    envvar="TASKQ_ASYNC_CONCURRENCY",
    help="Async (async def) jobs each child runs at once on its event loop; sync jobs "
    "always run one at a time.",
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
    "--periodic/--no-periodic",
    default=True,
    envvar="TASKQ_PERIODIC",
    help="Enqueue the periodic jobs of these queues (any number of workers may: each tick "
    "is enqueued once).",
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
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    envvar="TASKQ_METRICS_HOST",
    show_default=True,
    help="Interface the metrics port listens on (0.0.0.0: all, for a scraper on another host).",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    envvar="TASKQ_HEALTH_PORT",
    help="Answer /live and /ready on this port (Kubernetes probes; docs/scaling.md).",
)
@click.option(
    "--health-host",
    default="127.0.0.1",
    envvar="TASKQ_HEALTH_HOST",
    show_default=True,
    help="Interface the health port listens on (0.0.0.0: all, for a kubelet's probes).",
)
@click.option(
    "--autoscale",
    metavar="MAX,MIN",
    envvar="TASKQ_AUTOSCALE",
    callback=lambda _ctx, _param, value: parse_autoscale(value),
    help="Run between MIN (default 1) and MAX children, from the queues' autoscaling "
    "signal (replaces -c; docs/scaling.md).",
)
@click.pass_obj
def worker(
    obj: Context,
    concurrency: int,
    queues: str | None,
    prefetch: int | None,
    async_concurrency: int,
    max_tasks_per_child: int,
    max_memory_per_child: int,
    time_limit: float | None,
    soft_time_limit: float | None,
    grace: float,
    periodic: bool,
    connect_timeout: float,
    loglevel: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    health_port: int | None,
    health_host: str,
    autoscale: tuple[int, int] | None,
) -> None:
    """Run a prefork worker pool."""
    if metrics_port is not None:
        from taskq.ops.metrics import Metrics, enable_multiprocess, remove_created_dir

        enable_multiprocess()  # before the app import, which may import prometheus_client
    try:
        logs.configure(loglevel, log_format)
        app = obj.app(required=True)
        wait_for_redis(lambda: app.link.call("PING"), connect_timeout)
        if metrics_port is not None:
            url = app.settings.redis_url
            metrics = Metrics(
                port=metrics_port,
                host=metrics_host,
                redis_url=url,
                tasks=app.registry,
                settings=app.settings,
            )
            app.add_middleware(metrics)
    except BaseException:
        if metrics_port is not None:
            remove_created_dir()  # nothing else will
        raise
    # The start-up ping's connection serves the first heartbeat too: the pool closes every
    # connection before it forks (no connection may cross the fork).
    health = HealthServer(health_port, health_host) if health_port is not None else None
    options = PoolOptions(
        concurrency=autoscale[0] if autoscale else concurrency,
        autoscale_min=autoscale[1] if autoscale else None,
        health=health,
        queues=queues_of(queues, app),
        prefetch=prefetch,
        max_tasks_per_child=max_tasks_per_child,
        max_memory_per_child_kb=max_memory_per_child,
        time_limit_s=time_limit,
        soft_time_limit_s=soft_time_limit,
        grace_s=grace,
        app_name=obj.app_name,
        periodic=periodic,
        async_concurrency=async_concurrency,
    )
    sys.exit(run_pool(app, options))


def parse_autoscale(value: str | None) -> tuple[int, int] | None:
    """``"MAX,MIN"`` (or ``"MAX"``: MIN is 1) as (MAX, MIN), 1 <= MIN <= MAX."""
    if not value:
        return None
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > 2 or not all(p.isdigit() for p in parts):
        raise click.BadParameter(f"{value!r}: expected MAX,MIN (e.g. 8,2)")
    high, low = int(parts[0]), int(parts[1]) if len(parts) == 2 else 1
    if not 1 <= low <= high:
        raise click.BadParameter(f"{value!r}: need 1 <= MIN <= MAX")
    return high, low


def wait_for_redis(ping: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Give a Redis that is still starting (e.g. under the same Procfile) a few seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ping()
            return
        except BrokerUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)
