"""The hot path's promises (issue 12): adaptive prefetch never strands short jobs behind a
long one, strict priority holds with batches, and due delayed jobs and retries reach their
streams within the documented bound while new jobs keep coming."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from taskq import App
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
StartWorker = Callable[..., WorkerProcess]
BOUND_S = 0.05
"""How late a due job may enter its stream (maintenance.HOUSEKEEPING_S)."""
SLACK_S = 0.25
"""Scheduling noise on a loaded 2-core CI machine, on top of the bound."""


def warm_up(r: redis.Redis, n: int = 300) -> None:
    """Short jobs first, so both children's batches have grown (adaptive prefetch)."""
    tasks.stamp.starmap([("warm",)] * n)
    wait_until(lambda: r.llen("runs") >= n, timeout_s=20, message="the warm-up jobs")
    r.delete("runs")


def test_short_jobs_never_wait_in_the_child_of_a_long_one(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a worker with two children, both with grown batches.
    start_worker("-A", "tests.tasks", "-c", "2")
    warm_up(r)
    # When: behind a backlog of short jobs (so that the children take full batches), a 2 s
    # job and then 100 short ones: some child's batch holds the long job with short ones
    # behind it.
    batch = [tasks.stamp.message(("pre",), {}) for _ in range(500)]
    batch.append(tasks.sleepy.message((2.0,), {"tag": "long"}))
    batch += [tasks.stamp.message((f"s{i}",), {}) for i in range(100)]
    task_app.enqueue_many(batch)
    wait_until(lambda: len(runs(r)) >= 601, timeout_s=20, message="every job")
    done = runs(r)
    [long] = [x for x in done if x.get("tag") == "long"]
    short = [x for x in done if str(x.get("tag", "")).startswith("s")]
    # Then: every short job ran while the long one still ran ...
    assert len(short) == 100
    assert max(x["t"] for x in short) < long["end"], "a short job waited for the long one"
    # ... and none of them in the long job's child after the long job started.
    assert not [x for x in short if x["pid"] == long["pid"] and x["start"] >= long["start"]]


def test_priority_holds_across_children_and_within_batches(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: jobs of every priority waiting before the worker starts.
    task_app.enqueue_many(
        [
            tasks.stamp.message((p,), {}, priority=p)
            for p in ("low", "normal", "high")
            for _ in range(60)
        ]
    )
    # When: a worker with two children drains them.
    start_worker("-A", "tests.tasks", "-c", "2")
    wait_until(lambda: len(runs(r)) >= 180, timeout_s=20, message="every job")
    # Then: each child ran high before normal before low (each fetch takes high first) ...
    rank = {"high": 0, "normal": 1, "low": 2}
    for pid in {x["pid"] for x in runs(r)}:
        order = [rank[x["priority"]] for x in runs(r) if x["pid"] == pid]
        assert order == sorted(order), f"child {pid} ran {order}"
    # ... and no low job started before every high job had started somewhere.
    done = runs(r)
    assert (
        min(x["start"] for x in done if x["priority"] == "low")
        >= max(x["start"] for x in done if x["priority"] == "high") - 0.02
    )  # a child may start its last high job just after the other took its batch


def test_due_jobs_arrive_within_the_bound_under_a_steady_stream(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    start_worker("-A", "tests.tasks", "-c", "2")
    warm_up(r, 50)
    stop = threading.Event()

    def steady() -> None:  # ~200 new jobs a second, well within the two children's pace
        while not stop.is_set():
            tasks.stamp.delay("steady")
            time.sleep(0.005)

    feeder = threading.Thread(target=steady, daemon=True)
    feeder.start()
    try:
        due_at = time.time() + 1.0
        tasks.stamp.apply_async(("delayed",), countdown=1.0)
        tasks.flaky_once.delay(0.5)  # fails at once, Retry(countdown=0.5), then succeeds
        failed_at = time.time()
        wait_until(
            lambda: {"delayed", "retried"} <= {x.get("tag") for x in runs(r)},
            timeout_s=10,
            message="the delayed job and the retry",
        )
    finally:
        stop.set()
        feeder.join(5)
    done = {x.get("tag"): x for x in runs(r) if x.get("tag") in ("delayed", "retried")}
    assert due_at <= done["delayed"]["start"] <= due_at + BOUND_S + SLACK_S
    assert failed_at + 0.5 <= done["retried"]["start"] + 0.05
    assert done["retried"]["start"] <= failed_at + 0.5 + BOUND_S + SLACK_S
