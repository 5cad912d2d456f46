"""Flow control at enqueue (debounce, keep-last-while-running), against a real Redis and
real workers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import redis

from taskq import App
from taskq.errors import ConfigError
from taskq.job import Job
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]
TOLERANCE_S = 0.15
SIGNING_KEY = "flow-control-signing-key-0123456789"


def _worker(start_worker: StartWorker, r: redis.Redis, *env: str, **kw: str) -> WorkerProcess:
    """A worker with two children, once it beats (so timings count from a live worker)."""
    w = start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning", *env, **kw)
    wait_until(lambda: r.zcard("tasks:workers"), 20, message="the worker to start")
    return w


def _tagged(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    return [x for x in runs(r) if x.get("tag") == tag]


def _echoed(r: redis.Redis) -> list[dict[str, Any]]:
    return [x for x in runs(r) if "value" in x and "tag" not in x]


@pytest.fixture
def signed(task_app: App) -> Iterator[None]:
    before = task_app.settings
    task_app.settings = task_app.settings.replace(signing_keys=[SIGNING_KEY])
    yield
    task_app.settings = before


def test_fifty_enqueues_in_a_burst_run_once_with_the_last_arguments(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    _worker(start_worker, r)
    opts: dict[str, Any] = {"debounce_key": "k", "debounce_s": 1.0, "debounce_max_wait_s": 5.0}
    handles: list[Job] = []
    for i in range(50):
        handles.append(tasks.echo.apply_async((i,), **opts))
        time.sleep(0.03)
    last_s = time.time()
    assert len({h.id for h in handles}) == 1
    assert r.zcard("tasks:schedule") == 1
    ran = wait_until(lambda: _echoed(r), 5, message="the burst's run")
    time.sleep(0.3)  # (nothing else may run)
    assert [x["value"] for x in _echoed(r)] == [49]
    assert ran[0]["job"] == handles[0].id
    assert abs(ran[0]["t"] - (last_s + 1.0)) <= TOLERANCE_S
    again = tasks.echo.apply_async((50,), **opts)  # the job started: a new burst
    assert again.id != handles[0].id


@pytest.mark.slow
def test_a_steady_stream_of_enqueues_runs_every_max_wait_with_the_latest_arguments(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    _worker(start_worker, r)
    opts: dict[str, Any] = {"debounce_key": "feed", "debounce_s": 1.0, "debounce_max_wait_s": 5.0}
    first_s: dict[str, float] = {}
    last_value: dict[str, int] = {}
    end_s = time.time() + 20
    i = 0
    while time.time() < end_s:
        sent_s = time.time()
        job = tasks.echo.apply_async((i,), **opts)
        first_s.setdefault(job.id, sent_s)
        last_value[job.id] = i
        i += 1
        time.sleep(max(0.0, sent_s + 0.2 - time.time()))
    wait_until(lambda: len(_echoed(r)) == len(first_s), 8, message="every burst's run")
    for run in _echoed(r):
        assert run["value"] == last_value[run["job"]]
        assert run["t"] - first_s[run["job"]] <= 5.0 + TOLERANCE_S
    assert len(first_s) >= 4


def test_a_task_level_key_function_and_a_status_that_says_when_it_is_due(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    first = tasks.reindex.delay("a", 1)
    other = tasks.reindex.delay("b", 1)
    last = tasks.reindex.delay("a", 2)
    assert last.id == first.id != other.id
    status = last.status()
    assert status.state == "scheduled" and status.due_ms is not None
    assert status.due_ms == last.eta_ms and tuple(status.args) == ("a", 2)
    _worker(start_worker, r)
    assert first.result(timeout=10) == 2 and other.result(timeout=10) == 1
    assert sorted((x["doc"], x["value"]) for x in _tagged(r, "reindex")) == [("a", 2), ("b", 1)]


def test_debounce_with_a_unique_key_and_a_priority(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    opts: dict[str, Any] = {"debounce_key": "d", "debounce_s": 0.3, "unique_key": "u"}
    first = tasks.recompute.apply_async((1, 1.0), priority="high", **opts)
    assert tasks.recompute.apply_async((2, 1.0), priority="high", **opts).id == first.id
    _worker(start_worker, r)
    wait_until(lambda: _tagged(r, "recompute"), 10, message="the run")
    held = tasks.recompute.apply_async((3, 1.0), **opts)  # a new burst, but the key is held
    assert held.id == first.id
    assert first.result(timeout=10) == 2
    wait_until(lambda: not r.exists("tasks:unique:u"), 5, message="the lock to go")
    assert tasks.recompute.apply_async((4, 0.0), **opts).id != first.id


def test_signed_debounced_bodies_run_and_a_forged_one_is_refused(
    signed: None, task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    opts: dict[str, Any] = {"debounce_key": "s", "debounce_s": 0.2}
    job = tasks.echo.apply_async(("one",), **opts)
    assert tasks.echo.apply_async(("two",), **opts).id == job.id
    forged = msgpack.packb({"v": 1, "id": job.id, "task": "tests.tasks.echo", "args": ["x"]})
    r.zadd("tasks:schedule", {b"1\ntests.tasks.echo\n" + forged: 0})
    _worker(start_worker, r, TASKQ_SIGNING_KEYS=SIGNING_KEY)
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, 10, message="the forged body refused")
    wait_until(lambda: _echoed(r), 10, message="the signed run")
    assert [x["value"] for x in _echoed(r)] == ["two"]
    assert r.xlen("tasks:deadletter") == 1


BAD_DEBOUNCE: list[tuple[dict[str, Any], str]] = [
    ({"debounce_key": "k"}, "needs debounce_s"),
    ({"debounce_key": "k", "debounce_s": 0}, "debounce_s must be"),
    ({"debounce_key": "k", "debounce_s": -1}, "debounce_s must be"),
    ({"debounce_key": "k", "debounce_s": "1"}, "debounce_s must be"),
    ({"debounce_key": "k", "debounce_s": float("nan")}, "debounce_s must be"),
    ({"debounce_key": "k", "debounce_s": True}, "debounce_s must be"),
    ({"debounce_key": "k", "debounce_s": 2, "debounce_max_wait_s": 1}, "at least debounce_s"),
    ({"debounce_key": "", "debounce_s": 1}, "invalid debounce_key"),
    ({"debounce_key": "x" * 201, "debounce_s": 1}, "invalid debounce_key"),
    ({"debounce_key": 5, "debounce_s": 1}, "invalid debounce_key"),
    ({"debounce_s": 1}, "need a debounce_key"),
    ({"debounce_key": "k", "debounce_s": 1, "countdown": 1}, "no countdown or eta"),
    ({"debounce_key": "k", "debounce_s": 1, "eta": time.time() + 9}, "no countdown or eta"),
    ({"debounce_key": "k", "debounce_s": 1, "job_id": "j"}, "do not go together"),
    ({"debounce_key": "k", "debounce_s": 1, "link": tasks.echo.s(1)}, "link"),
]


@pytest.mark.parametrize(("options", "error"), BAD_DEBOUNCE)
def test_bad_debounce_options_are_refused_before_anything_is_written(
    task_app: App, r: redis.Redis, options: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        tasks.echo.apply_async((1,), **options)
    assert r.dbsize() == 0


def test_bad_task_level_debounce_options_fail_at_decoration(task_app: App, r: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="needs debounce_s"):
        task_app.task(name="t1", debounce_key=lambda x: "k")(lambda x: x)
    with pytest.raises(ConfigError, match="must be a function"):
        task_app.task(name="t2", debounce_key="k", debounce_s=1)(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least debounce_s"):
        task_app.task(name="t3", debounce_s=2, debounce_max_wait_s=1)(lambda x: x)

    def raises(x: int) -> str:
        raise KeyError(x)

    bad_key = task_app.task(name="t4", debounce_key=raises, debounce_s=1)(lambda x: x)
    returns_int = task_app.task(name="t5", debounce_key=lambda x: x, debounce_s=1)(lambda x: x)
    with pytest.raises(ConfigError, match="debounce_key function raised"):
        bad_key.delay(1)
    with pytest.raises(ConfigError, match="invalid debounce_key"):
        returns_int.delay(1)
    assert r.dbsize() == 0


def test_keep_last_collapses_enqueues_during_a_run_into_one_follow_up_with_the_last_arguments(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    opts: dict[str, Any] = {"unique_key": "dash", "unique_mode": "keep_last"}
    first = tasks.recompute.apply_async((0, 1.0), **opts)
    assert tasks.recompute.apply_async((99, 0.0), **opts).id == first.id  # waiting: until_done
    assert r.xlen("tasks:normal") == 1
    _worker(start_worker, r)
    wait_until(lambda: _tagged(r, "recompute"), 10, message="the first run")
    follow_ups = [tasks.recompute.apply_async((i, 0.0), **opts) for i in range(1, 11)]
    assert len({j.id for j in follow_ups}) == 1 and follow_ups[0].id != first.id
    assert follow_ups[0].status().state == "pending"
    assert follow_ups[-1].result(timeout=10) == 10
    assert first.result(timeout=1) == 0
    wait_until(lambda: not r.exists("tasks:unique:dash"), 5, message="the lock to go")
    time.sleep(0.2)  # (no third run may come)
    assert [x["value"] for x in _tagged(r, "recompute")] == [0, 10]
    assert not r.exists("tasks:keeplast:dash")


def test_a_signed_follow_up_runs(
    signed: None, task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    opts: dict[str, Any] = {"unique_key": "signed", "unique_mode": "keep_last"}
    tasks.recompute.apply_async((0, 0.8), **opts)
    _worker(start_worker, r, TASKQ_SIGNING_KEYS=SIGNING_KEY)
    wait_until(lambda: _tagged(r, "recompute"), 10, message="the first run")
    follow_up = [tasks.recompute.apply_async((i, 0.0), **opts) for i in (1, 2)][-1]
    assert follow_up.result(timeout=10) == 2
    assert r.xlen("tasks:deadletter") == 0
