"""Each example runs as its docstring says, on a private Redis, with the outcomes it claims."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from examples import idempotent, producer, tasks
from taskq import App
from taskq.contrib.pytest_plugin import Drain
from taskq.ops.devserver import port_in_use
from tests.conftest import FAST_SETTINGS, ROOT, WorkerProcess, wait_until
from tests.examples_support import http, results, run_example, web_process
from tests.redis_server import free_port

pytestmark = pytest.mark.integration

CRM = "examples.tasks.sync_to_legacy_crm"


# The in-process tests get examples.tasks.app from taskq's pytest plugin (taskq_app, with the
# suite's short timings, on the suite's Redis, emptied around each test) and its taskq_drain.


@pytest.fixture
def taskq_app_path() -> str:
    return "examples.tasks:app"


@pytest.fixture
def taskq_config() -> dict[str, Any]:
    return dict(FAST_SETTINGS)


@pytest.fixture(scope="session")
def taskq_redis_server(redis_server: str) -> str:
    """The suite's Redis, which ``r``, the workers and the example scripts use too."""
    return redis_server


# -- tasks.py, in-process ------------------------------------------------------------------


def test_example_tasks_reach_the_outcomes_they_describe(
    taskq_app: App, taskq_drain: Drain, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # given: the producer's batch of jobs, with short slow and delayed jobs
    jobs = producer.enqueue(3, 0.01, 0.2)

    # when: drained in-process, waiting for the flaky retry and the delayed job
    with caplog.at_level(logging.WARNING, logger="examples.deadletters"):
        result = taskq_drain(wait_for_retries=True, timeout_s=20)

    # then
    done = results(r)
    flaky = next(j for j in jobs if j.task.endswith("fetch_exchange_rate"))
    assert done[flaky.id]["attempt"] == 2
    assert [o.kind for o in result.of_task(flaky.task)] == ["retry", "ok"]
    assert [o.kind for o in result.of_task(CRM)] == ["retry", "dead"]
    assert set(done) == {j.id for j in jobs if j.task != CRM}
    assert r.xlen("tasks:deadletter") == 1
    assert "ALERT dead letter: examples.tasks.sync_to_legacy_crm" in caplog.text


def test_high_priority_example_jobs_run_first(taskq_app: App, taskq_drain: Drain) -> None:
    tasks.resize_image.delay(1)
    tasks.build_report.apply_async(("R1",), {"seconds": 0}, priority="low")
    tasks.send_welcome_email.delay(1)

    result = taskq_drain()

    assert [o.delivery.priority for o in result.outcomes] == ["high", "normal", "low"]


def test_charge_once_takes_each_order_once(taskq_app: App, r: redis.Redis) -> None:
    assert idempotent.charge_once(r, "order-1", 4200) is True
    assert idempotent.charge_once(r, "order-1", 4200) is False
    assert idempotent.charge_once(r, "order-2", 100) is True
    assert idempotent.ledger_entries(r, "order-1") == ["order-1 4200"]
    assert r.llen(idempotent.LEDGER_KEY) == 2


# -- the scripts, as documented --------------------------------------------------------------


@pytest.mark.slow
def test_the_pytest_plugin_example_passes(redis_url: str, tmp_path: Path) -> None:
    # as its docstring runs it; the plugin by module name (its entry point may not be
    # installed yet, and then must not load it twice), on the suite's Redis, without the
    # hypothesis plugin (a second to load, for nothing)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "examples/test_with_taskq_plugin.py",
            "--taskq-app", "examples.tasks:app", "--taskq-redis-url", redis_url,
            "-p", "no:taskq", "-p", "taskq.contrib.pytest_plugin", "-p", "no:hypothesispytest",
            "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'tmp'}", "-q",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=45,
    )  # fmt: skip

    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout and "skipped" not in run.stdout


@pytest.mark.slow
def test_producer_follows_its_jobs_through_a_worker(
    start_worker: Callable[..., WorkerProcess], redis_url: str, r: redis.Redis
) -> None:
    worker = start_worker("-A", "examples.tasks", "-c", "2")

    run = run_example(
        "producer", "--jobs", "6", "--slow-seconds", "0.1", "--delay-seconds", "0.5",
        "--timeout", "30", redis_url=redis_url,
    )  # fmt: skip

    assert run.returncode == 0, run.stdout + run.stderr
    assert "enqueued 9 jobs on tasks: 2 high, 5 normal, 2 low" in run.stdout
    assert "all 9 jobs finished" in run.stdout
    assert "8 ok (1 after a retry), 1 dead-lettered" in run.stdout
    assert "(attempt 2)" in run.stdout
    assert r.xlen("tasks:deadletter") == 1
    assert len(results(r)) == 8
    wait_until(lambda: "ALERT dead letter" in worker.output(), message="the dead-letter alert")


@pytest.mark.slow
def test_idempotent_example_charges_once(
    start_worker: Callable[..., WorkerProcess], redis_url: str, r: redis.Redis
) -> None:
    start_worker("-A", "examples.tasks", "-c", "2")

    run = run_example("idempotent", "--order", "order-7", "--copies", "4", redis_url=redis_url)

    assert run.returncode == 0, run.stdout + run.stderr
    assert "ledger entries for order-7: 1" in run.stdout
    assert sorted(v["result"] for v in results(r).values()) == ["already charged"] * 3 + ["charged"]
    assert r.lrange(idempotent.LEDGER_KEY, 0, -1) == [b"order-7 4200"]


@pytest.mark.slow
def test_deadletters_example_lists_retries_and_purges(
    taskq_app: App, taskq_drain: Drain, redis_url: str, r: redis.Redis
) -> None:
    # given: one dead-lettered job
    tasks.sync_to_legacy_crm.delay(42)
    assert taskq_drain(wait_for_retries=True).dead == 1

    listed = run_example("deadletters", redis_url=redis_url)
    assert listed.returncode == 0, listed.stderr
    assert "1 dead-lettered job(s) in tasks:deadletter" in listed.stdout
    assert "sync_to_legacy_crm" in listed.stdout and "attempts=2" in listed.stdout

    retried = run_example("deadletters", "--retry", CRM, redis_url=redis_url)
    assert "re-enqueued 1 dead job(s)" in retried.stdout
    assert r.xlen("tasks:deadletter") == 0
    assert r.xlen("tasks:normal") == 1

    # the re-driven job fails again (with its attempts reset) and dies again
    again = taskq_drain(wait_for_retries=True)
    assert [o.attempt for o in again.outcomes] == [1, 2]
    purged = run_example("deadletters", "--purge-older-than-days", "0", redis_url=redis_url)
    assert "purged 1 dead job(s)" in purged.stdout
    assert r.xlen("tasks:deadletter") == 0


@pytest.mark.slow
def test_webapp_enqueues_a_job_and_reports_its_status(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    cmd = [sys.executable, "-m", "examples.webapp"]
    with web_process(cmd, redis_url, free_port()) as base:
        # given: no worker yet, so the job waits
        status, body = http("POST", base + "/reports?id=Q3&seconds=0")
        assert status == 202 and body["task"] == "examples.tasks.build_report"
        job_url = base + body["status_url"]
        assert http("GET", job_url) == (200, {"job_id": body["job_id"], "status": "pending"})

        # when: a worker starts
        start_worker("-A", "examples.tasks", "-c", "1")

        # then: the status page reports the result
        done = wait_until(
            lambda: (s := http("GET", job_url)[1])["status"] == "done" and s,
            message="the job to finish",
        )
        assert done["result"] == "report Q3 built in 0.0s"
        assert http("POST", base + "/emails")[0] == 400
        assert http("POST", base + "/reports?seconds=soon")[0] == 400
        assert http("GET", base + "/nope")[0] == 404


@pytest.mark.slow
def test_demo_script_runs_the_example_jobs_and_stops_everything(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "DEMO_"))}
    env.update(
        DEMO_PORT=str(port),
        DEMO_DATA_DIR=str(tmp_path / "redis"),
        DEMO_JOBS="3",
        DEMO_SLOW_SECONDS="0.1",
        DEMO_DELAY_SECONDS="0.3",
        VENV=str(Path(sys.executable).parent.parent),
    )
    proc = subprocess.Popen(
        ["bash", "examples/demo.sh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=45)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    assert proc.returncode == 0, out
    assert f"starting taskq server on port {port}" in out
    assert "all 6 jobs finished" in out and "5 ok (1 after a retry), 1 dead-lettered" in out
    assert "examples.tasks.sync_to_legacy_crm  attempts=2  ConnectionRefusedError" in out
    assert "warm shutdown" in out
    if importlib.util.find_spec("uvicorn") and importlib.util.find_spec("starlette"):
        assert "30 quotes from the async endpoint in" in out and "100 EUR = 108.0 USD" in out
    assert not port_in_use(port)  # the server it started is gone
    # Redis 7 keeps the AOF in a folder; 6.2 (the embedded extra's) in one file.
    assert any((tmp_path / "redis" / name).exists() for name in ("appendonlydir", "appendonly.aof"))
