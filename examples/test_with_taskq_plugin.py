"""Tests of the example tasks with taskq's pytest plugin: a test file to copy into your tests.

The plugin comes with taskq. Name the app it tests in pyproject.toml:

    [tool.pytest.ini_options]
    taskq_app = "examples.tasks:app"

(or pass ``--taskq-app``), and have a redis-server on the PATH: the plugin starts a private
one on a free port for the session and empties it around each test. From the repository root:

    pytest examples/test_with_taskq_plugin.py --taskq-app examples.tasks:app
"""

from __future__ import annotations

import json

import pytest

from examples import tasks
from taskq import App
from taskq.contrib.pytest_plugin import Drain
from taskq.contrib.worker_process import WorkerProcess


def result_of(job_id: str) -> object:
    """What the example tasks stored for a job (in their own Redis hash)."""
    raw = tasks.store().hget(tasks.RESULTS_KEY, job_id)
    assert raw is not None, f"no result stored for job {job_id}"
    return json.loads(raw)["result"]


def test_a_welcome_email_is_sent(taskq_app: App, taskq_drain: Drain) -> None:
    job = tasks.send_welcome_email.delay(7)

    result = taskq_drain()  # runs the ready jobs here, in the test's process

    assert (result.ok, result.dead) == (1, 0)
    assert result_of(job.id) == "welcome email sent to user 7"


def test_the_exchange_rate_comes_on_the_retry(
    taskq_app: App, taskq_drain: Drain, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "FLAKY_RETRY_AFTER_S", 0.01)  # in-process: patches apply
    job = tasks.fetch_exchange_rate.delay("EUR")

    result = taskq_drain(wait_for_retries=True)

    assert [o.kind for o in result.outcomes] == ["retry", "ok"]
    assert result_of(job.id) == {"currency": "EUR", "rate": 1.08}


@pytest.mark.taskq(eager=True)
def test_eager_mode_raises_the_task_error_at_delay(taskq_app: App) -> None:
    # eager: the task runs inside delay(), no Redis, no worker
    with pytest.raises(ConnectionRefusedError, match="legacy CRM refused"):
        tasks.sync_to_legacy_crm.delay(42)


@pytest.mark.taskq(store_results=True)
def test_a_worker_process_resizes_the_image(taskq_app: App, taskq_worker: WorkerProcess) -> None:
    job = tasks.resize_image.delay(5, width=400)

    status = job.wait(timeout=10)  # a real `taskq worker` ran it

    assert status.state == "succeeded"
    assert result_of(job.id) == "image 5 resized to 400px"
    assert taskq_worker.wait_for_jobs(1).processed == 1
