"""Unique jobs and caller-chosen ids (issue 15, part 2), against a real Redis and workers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from taskq import App, Deadletters, TaskFailed
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.message import Message
from taskq.testing import drain
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]


def _worker(start_worker: StartWorker) -> WorkerProcess:
    return start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning")


def _locks(r: redis.Redis) -> list[bytes]:
    return sorted(r.scan_iter("tasks:unique:*"))


def _tagged(r: redis.Redis, tag: str) -> list[dict[str, object]]:
    return [x for x in runs(r) if x.get("tag") == tag]


def test_twenty_concurrent_enqueues_of_one_key_run_once_and_again_after_it_ends(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    handles: list[Job] = []
    barrier = threading.Barrier(20)

    def enqueue() -> None:
        barrier.wait()
        handles.append(tasks.unique_report.delay(42))

    threads = [threading.Thread(target=enqueue) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({h.id for h in handles}) == 1
    assert r.xlen("tasks:normal") == 1 and len(_locks(r)) == 1
    _worker(start_worker)
    assert handles[0].result(timeout=20) == 42
    wait_until(lambda: not _locks(r), 10, message="the lock to go with the job's end")
    again = tasks.unique_report.delay(42)
    assert again.id != handles[0].id
    assert again.result(timeout=20) == 42
    assert len(_tagged(r, "unique_report")) == 2
    other = tasks.unique_report.delay(43)  # other arguments, another key
    assert other.id not in (again.id, handles[0].id)


def test_an_explicit_key_on_a_job_without_a_record(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    first = tasks.plain_unique.apply_async(("a",), unique_key="sync:customer-7")
    second = tasks.plain_unique.apply_async(("b",), unique_key="sync:customer-7")
    assert second.id == first.id and r.xlen("tasks:normal") == 1
    _worker(start_worker)
    wait_until(lambda: _tagged(r, "a") and not _locks(r), 20, message="run and release")
    third = tasks.plain_unique.apply_async(("c",), unique_key="sync:customer-7")
    assert third.id != first.id
    wait_until(lambda: _tagged(r, "c"), 20, message="the later job")
    assert not _tagged(r, "b")


def test_throttle_holds_the_key_after_the_job_ends(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    kw = {"unique_key": "digest", "unique_for": 60, "unique_mode": "throttle"}
    first = tasks.add.apply_async((1, 2), **kw)  # type: ignore[arg-type]
    _worker(start_worker)
    assert first.result(timeout=20) == 3
    assert r.pttl("tasks:unique:digest") > 50_000
    assert tasks.add.apply_async((5, 5), **kw).id == first.id  # type: ignore[arg-type]


def test_the_key_is_released_when_the_job_fails_for_good(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    job = tasks.fails_stored.apply_async(("boom",), unique_key="fragile")
    _worker(start_worker)
    with pytest.raises(TaskFailed):
        job.result(timeout=20)
    wait_until(lambda: not _locks(r), 10, message="the lock to go with the dead letter")


def test_the_key_is_released_when_the_job_is_cancelled(task_app: App, r: redis.Redis) -> None:
    job = tasks.unique_report.delay(7)
    assert job.cancel() == "cancelled"
    assert not _locks(r)
    assert tasks.unique_report.delay(7).id != job.id


def test_unique_for_caps_how_long_the_key_is_held(task_app: App, r: redis.Redis) -> None:
    first = tasks.add.apply_async((1, 1), unique_key="short", unique_for=0.2)
    wait_until(lambda: not _locks(r), 5, message="the lock to expire")
    second = tasks.add.apply_async((1, 1), unique_key="short", unique_for=0.2)
    assert second.id != first.id and r.xlen("tasks:normal") == 2


def test_a_delayed_unique_job_holds_its_key_from_the_schedule(
    task_app: App, r: redis.Redis
) -> None:
    first = tasks.add.apply_async((1, 1), unique_key="later", countdown=30)
    second = tasks.add.apply_async((2, 2), unique_key="later", countdown=30)
    assert second.id == first.id
    assert r.zcard("tasks:schedule") == 1 and first.status().state == "scheduled"


def test_a_caller_chosen_id_is_refused_while_its_job_lives(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    first = tasks.add.apply_async((2, 3), job_id="order-1001")
    assert first.id == "order-1001"
    assert tasks.add.apply_async((9, 9), job_id="order-1001").id == "order-1001"
    assert r.xlen("tasks:normal") == 1
    _worker(start_worker)
    assert task_app.job("order-1001").result(timeout=20) == 5
    wait_until(lambda: not _locks(r), 10, message="the id to be free again")
    tasks.add.apply_async((4, 4), job_id="order-1001")
    wait_until(lambda: task_app.job("order-1001").status().result is not None, 20)
    assert task_app.job("order-1001").result(timeout=20) == 8


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"unique_for": 10}, "need a unique_key"),
        ({"unique_mode": "throttle"}, "need a unique_key"),
        ({"unique_key": "k", "unique_mode": "sometimes"}, "unique_mode"),
        ({"unique_key": "k", "unique_for": -1}, "unique_for"),
        ({"unique_key": ""}, "invalid unique_key"),
        ({"job_id": "has space"}, "invalid job id"),
    ],
)
def test_bad_input(task_app: App, kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        tasks.add.apply_async((1, 2), **kwargs)  # type: ignore[arg-type]
    assert needle in str(caught.value)


def test_bad_task_options(make_app: Callable[..., App]) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match="unique_mode"):
        app.task(unique=True, unique_mode="often")(lambda: None)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="unique_for_s"):
        app.task(unique=True, unique_for_s=0)(lambda: None)


def test_the_key_does_not_depend_on_how_the_arguments_are_written(
    task_app: App, r: redis.Redis
) -> None:
    # given one call written five ways: positional, by keyword in either order, the default
    # given or left out
    first = tasks.unique_report.delay(8, seconds=0.3)
    same = [
        tasks.unique_report.delay(report_id=8, seconds=0.3),
        tasks.unique_report.delay(seconds=0.3, report_id=8),
        tasks.unique_report.delay(8),
        tasks.unique_report.apply_async((8, 0.3)),
    ]
    # then they are one job; other values are another
    assert {h.id for h in same} == {first.id}
    assert r.xlen("tasks:normal") == 1 and len(_locks(r)) == 1
    assert tasks.unique_report.delay(8, seconds=1).id != first.id


def test_the_key_of_a_task_with_var_args_and_var_kwargs(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app(queue="varargs")

    @app.task(unique=True)
    def sync(shop_id: int, *extra: int, full: bool = False, **flags: bool) -> None: ...

    first = sync.delay(8, 1, 2, full=True, dry=True, fast=False)
    assert sync.delay(shop_id=8, full=True).id != first.id  # other *extra
    assert sync.delay(8, 1, 2, fast=False, dry=True, full=True).id == first.id
    assert sync.delay(8, 1, 2, full=True, dry=True).id != first.id  # other **flags
    assert sync.delay(8, 1, 2, dry=True, fast=False, full=True).id == first.id
    assert sync.delay(shop_id=9).id == sync.delay(9, full=False).id


def test_a_retried_dead_unique_job_takes_its_key_again(task_app: App, r: redis.Redis) -> None:
    # given a unique job that failed for good: its end released the key
    dead = tasks.fails_stored.apply_async(("boom",), unique_key="fragile")
    drain(task_app)
    assert dead.status().state == "failed" and not _locks(r)
    store = Deadletters.for_app(task_app)
    # when a fresh job holds the key, the dead job's retry is refused, naming the holder
    fresh = tasks.fails_stored.apply_async(("again",), unique_key="fragile")
    moved, skipped = store.retry(None)
    assert moved == 0 and len(skipped) == 1 and fresh.id in skipped[0][1]
    assert store.count() == 1 and r.xlen("tasks:normal") == 1
    # once the key is free, the retry takes it: an enqueue of the key gets the retried job
    assert fresh.cancel() == "cancelled"
    assert store.retry(None) == (1, [])
    assert r.get("tasks:unique:fragile") == dead.id.encode()
    assert tasks.fails_stored.apply_async(("x",), unique_key="fragile").id == dead.id
    drain(task_app)  # and its end releases the key again
    assert dead.status().state == "failed" and not _locks(r)


def test_a_dead_job_naming_another_queues_lock_is_not_retried(
    task_app: App, r: redis.Redis
) -> None:
    msg = Message(tasks.fails_stored.name, ("x",), queue="tasks", unique="elsewhere:unique:k")
    task_app.enqueue(msg)
    drain(task_app)
    _, skipped = Deadletters.for_app(task_app).retry(None)
    assert len(skipped) == 1 and "not a valid job" in skipped[0][1]  # refused at decode
    assert not r.exists("elsewhere:unique:k") and r.xlen("tasks:normal") == 0
