"""Per-task statistics in Redis: summaries merge in their minute and hour buckets
(taskstats.lua), the table adds them up over 72 hours, and 72 hours of 100 tasks fit in
less than 5 MB of Redis memory (measured with MEMORY USAGE)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import redis

from taskq import App
from taskq.broker.taskstats import HOUR_MS, MINUTE_MS, Summary, write
from taskq.keys import QueueKeys
from taskq.ops.taskstats import TaskRow, task_history, task_table
from tests.conftest import WorkerProcess, wait_until

pytestmark = pytest.mark.integration


def summary(durations: list[float], failed: int = 0, retried: int = 0) -> Summary:
    s = Summary()
    for i, ms in enumerate(durations):
        s.add(ms, failed=i < failed, retried=i < retried)
    return s


def test_writes_merge_and_the_table_adds_them_up(make_app: Callable[..., App]) -> None:
    app = make_app()
    now = int(app.link.call("TIME")[0]) * 1000
    write(app.link, ["tasks"], now, {"a": summary([10, 20], failed=1, retried=1)})
    write(app.link, ["tasks"], now, {"a": summary([30]), "b": summary([5])})
    write(app.link, ["tasks"], now - 5 * HOUR_MS, {"a": summary([40], failed=1)})
    _, rows = task_table(app.link, ["tasks"])
    by_task = {r.task: r for r in rows}
    a = by_task["a"]
    assert (a.runs, a.failures, a.retries, a.max_ms) == (4, 2, 1, 40)
    assert a.p50_ms is not None and abs(a.p50_ms - 20) <= 1
    assert by_task["b"].runs == 1
    assert a.per_minute == round(3 / 60, 3)  # the run 5 h ago is not in the last hour
    minutes, hours = task_history(app.link, ["tasks"], "a")
    assert minutes.minutes[-1].processed + minutes.minutes[-1].failed == 3
    assert sum(m.failed for m in hours.minutes) == 2


def test_72_hours_of_100_tasks_take_less_than_5_mb(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    """Each bucket as a busy fleet leaves it: every task ran in every minute and hour, with
    durations spread over two orders of magnitude (dozens of histogram buckets each)."""
    app = make_app()
    rng = random.Random(1)
    k = QueueKeys("tasks")
    now = int(app.link.call("TIME")[0]) * 1000
    tasks = [f"app.tasks.task_{i:03d}" for i in range(100)]

    shapes = [summary([rng.lognormvariate(3, 1) for _ in range(200)], 5, 3) for _ in range(20)]

    def busy() -> dict[str, Summary]:
        return {t: rng.choice(shapes) for t in tasks}

    for h in range(72):
        write(app.link, ["tasks"], now - h * HOUR_MS, busy())
    for m in range(1, 62):  # the minute buckets live 62 minutes
        write(app.link, ["tasks"], now - m * MINUTE_MS, busy())
    keys = list(r.scan_iter(match=k.task_stats("*", 0).rsplit(":", 2)[0] + ":*", count=1000))
    # The minute buckets the hour writes made would have expired (62 minutes): not counted.
    keys = [
        key
        for key in keys
        if b":m:" not in key or int(key.rsplit(b":", 1)[1]) > now - HOUR_MS - 2 * MINUTE_MS
    ]
    used = sum(int(r.memory_usage(key) or 0) for key in keys)
    print(f"task statistics: {len(keys)} keys, {used / 1e6:.2f} MB for 72 h of 100 tasks")
    assert used < 5_000_000, used


def test_a_master_writes_its_childrens_runs_with_its_heartbeat(
    task_app: App, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Children that exit after two jobs each: their runs are taken when they are reaped,
    the live child's at each heartbeat; a failure sent round again is a retry."""
    from tests import tasks

    start_worker("-A", "tests.tasks", "-c", "1", "--max-tasks-per-child", "2")
    for i in range(5):
        tasks.echo.delay(i)
    tasks.always_fails.delay("x")

    def rows() -> dict[str, TaskRow] | None:
        found = {r.task: r for r in task_table(task_app.link, [task_app.settings.queue])[1]}
        echo, fails = found.get("tests.tasks.echo"), found.get("tests.tasks.always_fails")
        done = echo and echo.runs == 5 and fails and fails.failures >= 1
        return found if done else None

    found = wait_until(rows, message="the runs in the task statistics")
    echo, fails = found["tests.tasks.echo"], found["tests.tasks.always_fails"]
    assert (echo.failures, echo.retries) == (0, 0)
    assert echo.p95_ms is not None and echo.p95_ms <= echo.max_ms
    assert 1 <= fails.retries <= fails.failures  # its first failures go round again
