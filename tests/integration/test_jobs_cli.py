"""``taskq jobs``: list and act on a queue's jobs from the command line, as the pages do."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.cli import main
from tests import dashboard_tasks

pytestmark = pytest.mark.integration


def taskq(redis_url: str, *args: str) -> Any:
    cmd = ["--redis-url", redis_url, "-A", "tests.dashboard_tasks", "jobs", *args]
    result = CliRunner().invoke(main, cmd)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_list_json_and_text(dash_app: App, redis_url: str) -> None:
    jobs = [dashboard_tasks.later.delay(i) for i in range(3)]
    doc = json.loads(taskq(redis_url, "list", "backlog", "--state", "waiting", "--json"))
    assert [row["job_id"] for row in doc["rows"]] == [j.id for j in jobs]
    assert doc["after"] is None
    text = taskq(redis_url, "list", "backlog", "--state", "waiting", "-n", "2")
    assert text.count("tests.dashboard_tasks.later") == 2 and "more: --after" in text
    assert "no jobs" in taskq(redis_url, "list", "backlog", "--state", "retrying")
    assert "no jobs" in taskq(redis_url, "list", "backlog", "--state", "held", "--of", "x")


def test_cancel_by_filter_and_delete_by_id(dash_app: App, redis_url: str, r: redis.Redis) -> None:
    keep = [dashboard_tasks.later.delay(i) for i in range(3)]
    gone = [dashboard_tasks.later.delay(100 + i) for i in range(4)]
    out = taskq(redis_url, "cancel", "backlog", "--state", "waiting", "--filter", "args=10", "-y")
    assert "cancel: 4 of 4" in out
    doc = json.loads(taskq(redis_url, "list", "backlog", "--state", "waiting", "--json"))
    assert [row["job_id"] for row in doc["rows"]] == [j.id for j in keep]
    first = doc["rows"][0]["ref"]
    assert "delete: 1 of 1" in taskq(
        redis_url, "delete", "backlog", first, "--state", "waiting", "-y"
    )
    again = taskq(redis_url, "delete", "backlog", first, "--state", "waiting", "-y")
    assert "no waiting job found" in again
    assert len(gone) == 4


def test_retry_a_scheduled_job_by_its_id(dash_app: App, redis_url: str) -> None:
    job = dashboard_tasks.show.apply_async(("x",), countdown=3600)
    out = taskq(redis_url, "retry", dash_app.settings.queue, job.id, "-y")
    assert "retry: 1 of 1" in out
    dash_app.broker.promote()
    assert job.status().state == "waiting"


def test_move_to_high(dash_app: App, redis_url: str) -> None:
    job = dashboard_tasks.later.delay(1)
    assert "move: 1 of 1" in taskq(redis_url, "move", "backlog", "--to", "high", "-y")
    doc = json.loads(
        taskq(redis_url, "list", "backlog", "--state", "waiting", "--priority", "high", "--json")
    )
    assert [row["job_id"] for row in doc["rows"]] == [job.id]


def test_debounced_batching_and_paused_states(dash_app: App, redis_url: str) -> None:
    burst = [
        dashboard_tasks.show.apply_async((i,), debounce_key="k", debounce_s=3600) for i in range(3)
    ]
    call = dashboard_tasks.gather.delay("b", "first")
    doc = json.loads(taskq(redis_url, "list", "tasks", "--state", "debounced", "--json"))
    assert [(row["job_id"], row["calls"]) for row in doc["rows"]] == [(burst[0].id, 3)]
    doc = json.loads(taskq(redis_url, "list", "backlog", "--state", "batching", "--json"))
    assert [(row["job_id"], row["calls"]) for row in doc["rows"]] == [(call.id, 1)]
    assert "no jobs" in taskq(redis_url, "list", "tasks", "--state", "paused")
    # Run the burst's job now: it leaves the schedule (and with it the debounced page).
    out = taskq(redis_url, "retry", "tasks", "--state", "debounced", "-y")
    assert "retry: 1 of 1" in out
    dash_app.broker.promote()
    assert burst[0].status().state == "waiting"
    assert "no jobs" in taskq(redis_url, "list", "tasks", "--state", "debounced")
