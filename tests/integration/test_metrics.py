"""``taskq worker --metrics-port``: Prometheus counters summed over the prefork children."""

from __future__ import annotations

import http.client
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
import redis
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from taskq import App
from taskq.message import Message, new_job_id
from tests import tasks
from tests.conftest import WorkerProcess, wait_until
from tests.redis_server import free_port

StartWorker = Callable[..., WorkerProcess]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def scraped(port: int) -> Samples | None:
    try:
        return scrape(port)
    except (urllib.error.URLError, ConnectionError):
        return None


def job(task: str) -> dict[str, str]:
    return {"queue": "tasks", "task": f"tests.tasks.{task}"}


@pytest.mark.integration
@pytest.mark.slow
def test_counters_histograms_and_depths_are_summed_over_children(
    start_worker: StartWorker, task_app: App, r: redis.Redis
) -> None:
    # Given: a worker with two children and metrics on a port.
    port = free_port()
    w = start_worker("-A", "tests.tasks", "-c", "2", "--metrics-port", str(port), "--grace", "1")
    wait_until(lambda: scraped(port), message="the metrics endpoint")

    # When: six jobs succeed (spread over both children), one fails three times, one waits.
    for _ in range(6):
        tasks.sleepy.delay(0.3)
    tasks.always_fails.delay("m")
    tasks.echo.apply_async((0,), countdown=3600)
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, timeout_s=20, message="the dead letter")
    wait_until(
        lambda: value(scrape(port), "taskq_jobs_processed_total", **job("sleepy")) == 6,
        message="6 processed sleepy jobs",
    )

    # Then: the counters are the sum over both children.
    pids = {msgpack.unpackb(x)["pid"] for x in r.lrange("runs", 0, -1)}
    assert len(pids) == 2, "both children must have run jobs for this test to mean anything"
    m = scrape(port)
    assert value(m, "taskq_jobs_failed_total", **job("always_fails")) == 3
    assert value(m, "taskq_jobs_retried_total", **job("always_fails")) == 2
    assert value(m, "taskq_jobs_dead_lettered_total", **job("always_fails")) == 1
    assert value(m, "taskq_jobs_processed_total", **job("always_fails")) is None
    assert value(m, "taskq_job_duration_seconds_count", **job("sleepy")) == 6
    assert (
        6 * 0.3 <= (value(m, "taskq_job_duration_seconds_sum", **job("sleepy")) or 0) < 6 * 0.3 + 1
    )
    assert value(m, "taskq_job_duration_seconds_bucket", **job("sleepy"), le="0.25") == 0
    assert value(m, "taskq_job_duration_seconds_bucket", **job("sleepy"), le="0.5") == 6
    assert value(m, "taskq_queue_scheduled", queue="tasks") == 1
    assert value(m, "taskq_queue_dead", queue="tasks") == 1
    assert value(m, "taskq_redis_up") == 1

    # And: queue depths are read from Redis at scrape time.
    tasks.sleepy.delay(5)
    tasks.sleepy.delay(5)
    wait_until(lambda: r.xpending("tasks:normal", "taskq")["pending"] == 2, message="2 running")
    tasks.echo.starmap([(i,) for i in range(3)])
    depth = {"queue": "tasks", "priority": "normal"}
    m = wait_until(
        lambda: (m := scrape(port)) and value(m, "taskq_queue_waiting", **depth) == 3 and m,
        message="3 waiting in the gauge",
    )
    assert value(m, "taskq_queue_pending", **depth) == 2
    assert value(m, "taskq_queue_waiting", queue="tasks", priority="high") == 0
    assert (value(m, "taskq_queue_oldest_waiting_age_seconds", **depth) or -1) >= 0

    # When the worker stops, so does the metrics server.
    w.stop()
    wait_until(lambda: scraped(port) is None, message="the metrics port to close")
    assert f"metrics on :{port}" in w.output()
    files_dir = w.output().split("files in ")[1].split(")")[0]
    assert not Path(files_dir).exists()


@pytest.mark.integration
def test_busy_port_fails_the_worker_start_with_one_line(start_worker: StartWorker) -> None:
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        w = start_worker("-A", "tests.tasks", "-c", "1", "--metrics-port", str(port))
        assert w.wait(20) == 1
    assert f"Error: --metrics-port {port}: Address already in use" in w.output()


def test_missing_prometheus_client_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from taskq.cli import main

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    result = CliRunner().invoke(main, ["worker", "-A", "tests.tasks", "--metrics-port", "9999"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: --metrics-port needs prometheus-client: pip install 'taskq[metrics]'\n"
    )


@pytest.mark.integration
def test_metrics_server_leaves_with_its_master(start_worker: StartWorker, task_app: App) -> None:
    port = free_port()
    w = start_worker("-A", "tests.tasks", "-c", "1", "--metrics-port", str(port))
    wait_until(lambda: _answers(port), message="the metrics endpoint")
    # SIGKILL of the master alone (as systemd's KillMode=process would): the port must free
    # up at once so that a restart can bind it again.
    w.proc.kill()
    w.proc.wait(10)
    wait_until(lambda: not _answers(port), timeout_s=3, message="the metrics server to leave")


def _answers(port: int) -> bool:
    """Whether a scrape gets a whole reply: a server killed mid-reply (its master's death
    signal can land while it writes) cuts the body short, which is leaving, not answering."""
    try:
        scrape(port)
    except (OSError, urllib.error.URLError, http.client.HTTPException):
        return False
    return True


@pytest.mark.integration
@pytest.mark.slow
def test_made_up_task_names_share_one_unknown_label(
    start_worker: StartWorker, task_app: App, r: redis.Redis
) -> None:
    # Given: a worker with metrics, and 300 jobs of task names nobody registered
    port = free_port()
    start_worker("-A", "tests.tasks", "-c", "1", "--metrics-port", str(port))
    wait_until(lambda: scraped(port), message="the metrics endpoint")
    task_app.enqueue_many(
        Message(f"made.up.{n}", (), {}, new_job_id(), "tasks") for n in range(300)
    )
    tasks.echo.delay(1)
    # When: the worker dead-letters them all
    wait_until(lambda: r.xlen("tasks:deadletter") == 300, timeout_s=30, message="300 dead")
    unknown = {"queue": "tasks", "task": "unknown"}

    def counted() -> Samples | None:
        m = scrape(port)
        dead = value(m, "taskq_jobs_dead_lettered_total", **unknown)
        done = value(m, "taskq_jobs_processed_total", **job("echo"))
        return m if dead == 300 and done == 1 else None

    m = wait_until(counted, message="300 dead letters and the echo job counted")
    # Then: they share one label; the registered task keeps its own
    labels = {dict(k[1]).get("task") for k in m if k[0].startswith("taskq_job")}
    assert labels == {"unknown", "tests.tasks.echo"}
    assert len([k for k in m if k[0].startswith("taskq_job")]) < 60
