"""Broker basics against a real server: groups, shared tasks, strict priority in one fetch."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import taskq
from taskq import App
from taskq.keys import GROUP
from taskq.registry import SHARED
from taskq.testing import drain

pytestmark = pytest.mark.integration


def test_group_creation_is_idempotent_and_a_lost_group_is_recreated(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    broker.ensure_groups()  # BUSYGROUP is not an error
    assert [g["name"] for g in r.xinfo_groups("tasks:high")] == [GROUP.encode()]
    # The stream (and its group) vanish; a job is added before any worker looks again.
    r.delete("tasks:normal")
    r.xadd("tasks:normal", {"task": "x", "body": b"\x80"})
    fetched = broker.fetch("c1", 10).deliveries
    assert [d.stream for d in fetched] == ["tasks:normal"]  # recreated at id 0
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 1


def test_one_fetch_takes_high_before_normal_before_low(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    for priority in ("low", "normal", "high", "low", "high"):
        r.xadd(f"tasks:{priority}", {"task": priority, "body": b"\x80"})
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    got = broker.fetch("c1", 3).deliveries
    assert [d.priority for d in got] == ["high", "high", "normal"]
    assert [d.priority for d in broker.fetch("c1", 3).deliveries] == ["low", "low"]


def test_shared_task_enqueues_through_the_current_app_and_any_app_runs_it(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    runs: list[int] = []

    @taskq.task(name="shared.double")
    def double(x: int) -> None:
        """Declared without any app, as a library would."""
        runs.append(x * 2)

    try:
        app = make_app().set_current()  # shared tasks enqueue through the current app
        job = double.delay(21)
        assert job.entry_id is not None and r.xlen("tasks:normal") == 1
        assert "shared.double" in app.registered()
        drain(app)
        assert runs == [42]
    finally:
        SHARED.tasks.pop("shared.double")  # keep the registry as other tests expect it
