"""The autoscaling signal (``taskq scale``) against a real Redis and real workers."""

from __future__ import annotations

import json
import math
import re
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from taskq import App
from taskq.broker.workers import WorkerRegistry
from taskq.dashboard import asgi
from taskq.keys import QueueKeys
from taskq.worker.durations import OTHER
from taskq.worker.record import WorkerRecord
from taskq.worker.scaling import Scaler, ScaleSignal
from tests import tasks
from tests.conftest import ROOT, WorkerProcess, wait_until
from tests.redis_server import free_port

pytestmark = pytest.mark.integration


def scale_json(redis_url: str, *queues: str) -> Any:
    from taskq.cli import main

    result = CliRunner().invoke(main, ["--redis-url", redis_url, "scale", *queues, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def signal(app: App, queue: str = "tasks", **settings: Any) -> ScaleSignal:
    scaler = Scaler(app.reader, [queue], app.settings.replace(**settings), min_interval_s=0)
    return scaler.signals()[0]


def test_an_empty_queue_wants_no_process(make_app: Callable[..., App], redis_url: str) -> None:
    app = make_app()
    assert signal(app).desired_processes == 0
    doc = scale_json(redis_url, "tasks")
    assert doc["desired_processes"] == 0
    assert doc["queues"][0]["queue"] == "tasks"
    assert doc["queues"][0]["waiting"] == 0


def test_delayed_jobs_count_only_within_the_horizon(task_app: App) -> None:
    # given: three jobs due in 30 s, and no worker
    for _ in range(3):
        tasks.echo.apply_async(("later",), countdown=30)
    # then: a 10 s horizon does not see them, the default 60 s one does
    assert signal(task_app, scale_horizon_s=10).due == 0
    assert signal(task_app, scale_horizon_s=10).desired_processes == 0
    within = signal(task_app)
    assert within.due == 3
    assert within.desired_processes == 1  # no duration known yet: one process measures it


@pytest.mark.slow
def test_a_thousand_short_jobs_want_about_ten_processes(
    task_app: App, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given: 1,000 jobs of 100 ms and one worker of 4 processes measuring them
    tasks.sleepy.starmap((0.1,) for _ in range(1_000))
    worker = start_worker("-A", "tests.tasks", "-c", "4", "--grace", "1")
    # when: its heartbeat carries the duration of some 80 jobs (sampled at 10 Hz, each
    # 100 ms job is counted for 0, 1 or 2 ticks: the mean of 80 is within 20 %)
    found = wait_until(
        lambda: (s := signal(task_app)).job_duration_s and s.running and s.waiting <= 920 and s,
        timeout_s=30,
        message="a duration measured over 80 jobs",
    )
    # then: ~90 s of work to start within 10 s: ~10 processes, about 3 workers of -c 4
    assert 0.07 <= found.job_duration_s <= 0.16, found
    assert 7 <= found.desired_processes <= 13, found
    assert 2 <= math.ceil(found.desired_processes / 4) <= 4
    assert found.workers == 1 and found.processes == 4
    doc = scale_json(task_app.settings.redis_url, "tasks")
    assert abs(doc["desired_processes"] - found.desired_processes) <= 2
    # when: the harness, as an autoscaler would, runs that many workers
    for _ in range(math.ceil(found.desired_processes / 4) - 1):
        start_worker("-A", "tests.tasks", "-c", "4", "--grace", "1")
    # then: the backlog drains, and with nothing waiting or running the signal is 0
    drained = wait_until(
        lambda: (s := signal(task_app)).desired_processes == 0 and s,
        timeout_s=40,
        message="the backlog drained",
    )
    assert drained.waiting == drained.fetched == drained.running == 0
    assert drained.workers >= 2
    worker.stop()


@pytest.mark.slow
def test_the_backlog_is_weighed_by_each_tasks_measured_duration(
    task_app: App, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given: a worker that ran jobs of 300 ms (sleepy) and of 30 ms (spin, shorter than
    # the master's tick: most are counted without being seen running)
    worker = start_worker("-A", "tests.tasks", "-c", "2", "--grace", "1")
    tasks.sleepy.starmap((0.3,) for _ in range(6))
    tasks.spin.starmap((0.03,) for _ in range(60))
    sleepy, spin = tasks.sleepy.name, tasks.spin.name
    record = wait_until(
        lambda: (r := worker_record(task_app)) and r.recent_jobs == 66 and r,
        timeout_s=20,
        message="the 66 jobs in the heartbeat record",
    )
    # then: the record carries each task's window (a spin job no sample saw counts for
    # spin once one was seen), and the signal each task's mean
    assert record.recent_tasks[sleepy].jobs == 6
    assert record.recent_tasks[spin].jobs >= 30, record.recent_tasks
    measured = signal(task_app)
    assert 0.2 <= measured.task_duration_s[sleepy] <= 0.45, measured
    assert 0.01 <= measured.task_duration_s[spin] <= 0.1, measured
    # when: both children run a long job, and 100 short jobs and 20 of 300 ms wait
    tasks.sleepy.starmap((5,) for _ in range(2))
    wait_until(lambda: signal(task_app).running == 2, message="both children busy")
    tasks.spin.starmap((0.03,) for _ in range(100))
    tasks.sleepy.starmap((0.3,) for _ in range(20))
    found = signal(task_app)
    # then: the waiting mix is sampled, and the work is mostly the 20 long jobs' 6 s
    assert found.waiting == 120 and found.waiting_tasks == {spin: 100, sleepy: 20}, found
    short_s = 100 * found.task_duration_s[spin]
    assert found.work_s == pytest.approx(short_s + 20 * found.task_duration_s[sleepy], abs=0.01)
    assert found.work_s >= 4.0
    doc = scale_json(task_app.settings.redis_url, "tasks")["queues"][0]
    assert doc["waiting_tasks"] == found.waiting_tasks
    assert doc["task_duration_s"].keys() >= {sleepy, spin}
    worker.stop()


def worker_record(app: App) -> WorkerRecord | None:
    rows = app.reader.worker_records(["tasks"])[1]
    return WorkerRecord.from_fields(rows[0][0]) if rows else None


def test_a_hostile_worker_record_is_ignored(task_app: App) -> None:
    # given: a live record on the queue whose fields have the wrong types
    registry = WorkerRegistry(task_app.link, ["tasks"])
    hostile = {
        "id": "evil:1:x",
        "queues": "tasks",
        "recent_tasks": '{"tests.tasks.echo": ["1", {}], "x": [1e309, 1]}',
        "recent_jobs": "many",
        "recent_busy_ms": "[]",
        "children": '{"index": "a"}',
    }
    registry.heartbeat("evil:1:x", hostile, ttl_ms=60_000, visibility_timeout_ms=30_000)
    # and a waiting entry whose task name is too long to be one
    tasks.echo.delay(1)
    task_app.link.call("XADD", QueueKeys("tasks").stream("normal"), "*", "task", "x" * 500)
    # then: it is read as a worker that measured nothing, the entry as another task
    found = signal(task_app)
    assert found.workers == 1 and found.task_duration_s == {} and found.job_duration_s is None
    assert found.desired_processes == 1
    assert found.waiting_tasks == {tasks.echo.name: 1, OTHER: 1}
    assert scale_json(task_app.settings.redis_url, "tasks")["queues"][0]["waiting"] == 2


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def gauge(port: int, queue: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "taskq_desired_processes" and s.labels == {"queue": queue}:
                return s.value
    return None


def up(port: int) -> bool:
    try:
        return gauge(port, "tasks") is not None
    except OSError:
        return False


@pytest.mark.slow
def test_the_gauge_and_the_metrics_api_agree_with_taskq_scale(
    task_app: App, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given: a worker that measured jobs of 200 ms, and 300 jobs due in 30 s (inside the
    # horizon): 60 s of work to start within 10 s
    port = free_port()
    start_worker("-A", "tests.tasks", "-c", "2", "--metrics-port", str(port), "--grace", "1")
    tasks.sleepy.starmap((0.2,) for _ in range(4))
    wait_until(lambda: signal(task_app).job_duration_s, message="a measured duration")
    wait_until(lambda: not signal(task_app).running, message="the jobs done")
    for _ in range(300):
        tasks.echo.apply_async((0,), countdown=30)
    wait_until(lambda: up(port), message="the metrics endpoint")
    # then: every reader says the same
    expected = signal(task_app).desired_processes
    assert 4 <= expected <= 9
    assert gauge(port, "tasks") == expected
    api = get_json(f"http://127.0.0.1:{port}/scale")
    assert api["desired_processes"] == expected
    assert api == scale_json(task_app.settings.redis_url, "tasks")
    with TestClient(asgi(task_app)) as dashboard:
        reply = dashboard.get("/api/scale", params={"queue": "tasks"})
        assert reply.status_code == 200
        assert reply.json() == api
        assert dashboard.get("/api/scale", params={"queue": "a:b"}).status_code == 400


def test_the_docs_show_taskq_scale_as_it_prints(redis_url: str) -> None:
    from taskq.cli import main

    page = (ROOT / "docs" / "scaling.md").read_text()
    shown = re.search(r"```\n\$ taskq scale tasks\n(.*?)```", page, re.S)
    assert shown is not None
    printed = CliRunner().invoke(main, ["--redis-url", redis_url, "scale", "tasks"]).output

    def shape(text: str) -> str:
        return re.sub(r"\d+(\.\d+)?(ms|s)?|unknown", "N", text)

    assert shape(printed) == shape(shown.group(1))
