"""Flow control at enqueue (debounce, keep-last-while-running, batching by key), against a
real Redis and real workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

import msgpack
import pytest
import redis

from taskq import App
from taskq.errors import ConfigError
from taskq.job import Job
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until, worker_env

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


def test_bad_task_level_debounce_options_fail_at_decoration(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()  # (not tests.tasks.app: the tasks declared here stay here)
    with pytest.raises(ConfigError, match="needs debounce_s"):
        app.task(name="t1", debounce_key=lambda x: "k")(lambda x: x)
    with pytest.raises(ConfigError, match="must be a function"):
        app.task(name="t2", debounce_key="k", debounce_s=1)(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least debounce_s"):
        app.task(name="t3", debounce_s=2, debounce_max_wait_s=1)(lambda x: x)

    def raises(x: int) -> str:
        raise KeyError(x)

    bad_key = app.task(name="t4", debounce_key=raises, debounce_s=1)(lambda x: x)
    returns_int = app.task(name="t5", debounce_key=lambda x: x, debounce_s=1)(lambda x: x)
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


PRODUCER = """
import sys, threading
from tests import tasks
tasks.app.settings = tasks.app.settings.replace(redis_url=sys.argv[1])
base = int(sys.argv[2])
def send(t):
    for i in range(50):
        tasks.digest.delay(7, base + t * 50 + i)
threads = [threading.Thread(target=send, args=(t,)) for t in range(10)]
for t in threads: t.start()
for t in threads: t.join()
"""


def _digests(r: redis.Redis) -> list[dict[str, Any]]:
    return _tagged(r, "digest")


@pytest.mark.slow
def test_a_thousand_calls_from_twenty_threads_in_two_processes_each_run_in_exactly_one_batch(
    task_app: App, r: redis.Redis, redis_url: str, start_worker: StartWorker
) -> None:
    _worker(start_worker, r)
    env = worker_env(redis_url)
    producers = [
        subprocess.Popen([sys.executable, "-c", PRODUCER, redis_url, str(base)], env=env)
        for base in (0, 500)
    ]
    assert [p.wait(60) for p in producers] == [0, 0]
    wait_until(lambda: sum(len(x["ns"]) for x in _digests(r)) >= 1000, 20, message="all runs")
    ns = [n for x in _digests(r) for n in x["ns"]]
    assert sorted(ns) == list(range(1000))
    assert max(len(x["ns"]) for x in _digests(r)) <= 100
    assert not r.exists("tasks:batch:tests.tasks.digest:user:7")


def test_seven_calls_then_silence_run_as_one_batch_after_the_wait(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    _worker(start_worker, r)
    first_s = time.time()
    handles = [tasks.digest.delay(1, n) for n in range(7)]
    other = tasks.digest.delay(2, 100)  # another key, another batch
    assert len({h.id for h in handles}) == 1 and other.id != handles[0].id
    status = handles[3].status()
    assert status.state == "scheduled" and status.due_ms == handles[0].eta_ms
    assert status.batch == 8 - 1
    assert [h.result(timeout=10) for h in handles] == [7] * 7
    [run] = [x for x in _digests(r) if 100 not in x["ns"]]
    assert run["ns"] == list(range(7)) and run["job"] == handles[0].id
    assert run["ids"][0] == handles[0].id
    assert 0.6 - TOLERANCE_S <= run["t"] - first_s <= 0.6 + 2 * TOLERANCE_S
    out = subprocess.run(
        [sys.executable, "-m", "taskq", "job", handles[5].id, "--json"],
        env=worker_env(task_app.settings.redis_url, TASKQ_QUEUE="tasks"),
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    view = json.loads(out.stdout)
    assert view["job_id"] == handles[0].id
    assert view["batch"] == {"job_id": handles[0].id, "calls": 7}
    own = subprocess.run(
        [sys.executable, "-m", "taskq", "job", run["ids"][5], "--json"],
        env=worker_env(task_app.settings.redis_url, TASKQ_QUEUE="tasks"),
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert run["ids"][5] != handles[0].id  # (a call's own id, as the batch's list holds it)
    assert json.loads(own.stdout)["batch"] == {"job_id": handles[0].id, "calls": 7}
    assert task_app.job(run["ids"][5]).status().batch == 7
    assert task_app.job(run["ids"][5]).id == handles[0].id


@pytest.mark.slow
def test_a_batch_whose_child_is_killed_runs_again_whole_and_retries_whole(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    _worker(start_worker, r)
    handles = [tasks.hard_digest.delay(n) for n in range(5)]  # full: runs at once
    [hung] = wait_until(lambda: _tagged(r, "hard_digest"), 10, message="the first attempt")
    os.kill(hung["pid"], signal.SIGKILL)
    assert handles[0].result(timeout=30) == 5
    attempts = _tagged(r, "hard_digest")
    assert [x["attempt"] for x in attempts] == [1, 2, 3]
    assert all(x["ns"] == list(range(5)) for x in attempts)


def test_signed_batches_run_and_a_forged_call_is_refused(
    signed: None, task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    _worker(start_worker, r, TASKQ_SIGNING_KEYS=SIGNING_KEY)
    assert tasks.digest.delay(3, 1).result(timeout=10) == 1
    forged = msgpack.packb({"v": 1, "id": "f", "task": "tests.tasks.digest", "args": [4, 9]})
    r.rpush("tasks:batch:tests.tasks.digest:user:4", b"f\n" + forged)
    r.zadd(
        "tasks:schedule",
        {b"1\ntests.tasks.digest\n\xc1batch\ntasks:batch:tests.tasks.digest:user:4": 0},
    )
    r.set("tasks:due", 0)
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, 10, message="the forged batch refused")
    assert [x["ns"] for x in _digests(r)] == [[1]]


BAD_BATCH: list[tuple[dict[str, Any], str]] = [
    ({"batch_size": 10}, "needs batch_size and batch_wait_s"),
    ({"batch_wait_s": 1}, "needs batch_size and batch_wait_s"),
    ({"batch_size": 0, "batch_wait_s": 1}, "batch_size must be"),
    ({"batch_size": 1.5, "batch_wait_s": 1}, "batch_size must be"),
    ({"batch_size": 10, "batch_wait_s": -1}, "batch_wait_s must be"),
    ({"batch_size": 10, "batch_wait_s": "1"}, "batch_wait_s must be"),
    ({"batch_size": 10, "batch_wait_s": 1, "batch_key": "k"}, "must be a function"),
    ({"batch_size": 10, "batch_wait_s": 1, "unique": True}, "cannot also be"),
]


@pytest.mark.parametrize(("options", "error"), BAD_BATCH)
def test_bad_batching_options_fail_at_decoration(
    make_app: Callable[..., App], options: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        make_app().task(name="bad_batch", **options)(lambda calls: None)


def test_bad_batched_calls_are_refused_before_anything_is_written(
    task_app: App, make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    def raises(x: int) -> str:
        raise KeyError(x)

    opts: dict[str, Any] = {"batch_size": 5, "batch_wait_s": 1}
    bad_key = app.task(name="b1", batch_key=raises, **opts)(lambda x: x)
    returns_int = app.task(name="b2", batch_key=lambda x: x, **opts)(lambda x: x)
    with pytest.raises(ConfigError, match="batch_key function raised"):
        bad_key.delay(1)
    with pytest.raises(ConfigError, match="invalid batch_key"):
        returns_int.delay(1)
    with pytest.raises(ConfigError, match="takes no countdown"):
        tasks.digest.apply_async((1, 2), countdown=1)
    with pytest.raises(ConfigError, match="takes no debounce_key, debounce_s, unique_key"):
        tasks.digest.apply_async((1, 2), unique_key="u", debounce_key="d", debounce_s=1)
    assert r.dbsize() == 0


def test_inspect_and_the_dashboard_show_the_bursts_and_batches_waiting(
    task_app: App, r: redis.Redis
) -> None:
    from starlette.testclient import TestClient

    from taskq.dashboard import asgi
    from taskq.ops.inspect import Inspector

    burst = [tasks.echo.apply_async((i,), debounce_key="ui", debounce_s=30) for i in range(3)]
    batch = [tasks.digest.delay(5, n) for n in range(4)]
    rows = {(row.kind, row.key): row for row in Inspector.for_app(task_app).gathering()}
    assert set(rows) == {("debounce", "ui"), ("batch", "tests.tasks.digest:user:5")}
    assert (rows["debounce", "ui"].job_id, rows["debounce", "ui"].count) == (burst[0].id, 3)
    assert rows["debounce", "ui"].due_ms == burst[-1].eta_ms
    assert (rows["batch", "tests.tasks.digest:user:5"].count, batch[0].id) == (4, batch[3].id)
    out = subprocess.run(
        [sys.executable, "-m", "taskq", "inspect", "gathering", "-Q", "tasks"],
        env=worker_env(task_app.settings.redis_url),
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert "tests.tasks.digest:user:5" in out.stdout and burst[0].id in out.stdout
    overview = Inspector.for_app(task_app).overview()
    assert {(g.kind, g.count) for g in overview.gathering} == {("debounce", 3), ("batch", 4)}
    with TestClient(asgi(task_app)) as client:
        table = client.get("/").text.split('data-table="gathering"')[1].split("</table>")[0]
    assert '<tr data-kind="debounce">' in table and burst[0].id in table
    assert "<code>tests.tasks.digest:user:5</code>" in table
    r.zrem("tasks:schedule", *r.zrange("tasks:schedule", 0, -1))  # the burst "started"
    assert [row.kind for row in Inspector.for_app(task_app).gathering()] == ["batch"]


# -- combined with limits, and from asyncio code ---------------------------------------------


def _one_at_a_time(spans: list[tuple[float, float]]) -> bool:
    spans = sorted(spans)
    return all(later[0] >= earlier[1] for earlier, later in pairwise(spans))


def test_debounced_bursts_run_once_each_with_their_last_arguments_within_a_concurrency_limit(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given: two bursts of a task that runs one at a time, due together, and a two-child worker
    for key, base in (("x", 0), ("y", 10)):
        handles = [
            tasks.exclusive.apply_async((base + i, 0.3), debounce_key=key, debounce_s=0.2)
            for i in range(5)
        ]
        assert len({h.id for h in handles}) == 1
    _worker(start_worker, r)

    # then: one run per burst, with its last arguments, never both at once
    ran = wait_until(lambda: len(_tagged(r, "exclusive")) == 2 and _tagged(r, "exclusive"), 10)
    time.sleep(0.3)  # (nothing else may run)
    assert sorted(x["n"] for x in _tagged(r, "exclusive")) == [4, 14]
    assert _one_at_a_time([(x["start"], x["end"]) for x in ran])


def test_debounced_bursts_run_once_each_with_their_last_arguments_within_a_rate_limit(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given: four bursts, due together, of a task limited to 3 starts a second
    for key in range(4):
        for i in range(3):
            tasks.thirds.apply_async((key * 10 + i,), debounce_key=f"k{key}", debounce_s=0.2)
    _worker(start_worker, r)

    # then: one run per burst, with its last arguments, the fourth a second after the first
    wait_until(lambda: len(_tagged(r, "thirds")) == 4, 10, message="the four runs")
    time.sleep(0.3)  # (nothing else may run)
    ran = _tagged(r, "thirds")
    assert sorted(x["n"] for x in ran) == [2, 12, 22, 32]
    starts = sorted(x["t"] for x in ran)
    assert starts[3] - starts[0] >= 1.0 - TOLERANCE_S


def test_batch_jobs_obey_their_task_s_concurrency_limit(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given: six calls of a task batched by two and limited to one run at a time
    handles = [tasks.exclusive_digest.delay(n) for n in range(6)]
    assert len({h.id for h in handles}) == 3  # (three full batches, ready at once)
    _worker(start_worker, r)

    # then: every call in one batch, and the two children never run two batches at once
    assert [h.result(timeout=10) for h in handles] == [2] * 6
    ran = _tagged(r, "exclusive_digest")
    assert sorted(n for x in ran for n in x["ns"]) == list(range(6))
    assert _one_at_a_time([(x["start"], x["end"]) for x in ran])


def test_asyncio_enqueues_debounce_batch_and_keep_last_as_the_blocking_ones_do(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    async def burst_and_batch() -> tuple[list[Job], list[Job]]:
        burst = [
            await tasks.echo.aapply_async((i,), debounce_key="async", debounce_s=0.2)
            for i in range(5)
        ]
        batch = [await tasks.digest.adelay(3, n) for n in range(4)]
        return burst, batch

    async def keep_last() -> list[Job]:
        opts: dict[str, Any] = {"unique_key": "async-dash", "unique_mode": "keep_last"}
        return [await tasks.recompute.aapply_async((i, 0.0), **opts) for i in range(1, 6)]

    # given: a burst and a batch sent from asyncio code, and a keep_last job running
    burst, batch = asyncio.run(burst_and_batch())
    first = tasks.recompute.apply_async((0, 1.0), unique_key="async-dash", unique_mode="keep_last")
    _worker(start_worker, r)
    wait_until(lambda: _tagged(r, "recompute"), 10, message="the running keep_last job")

    # when: more keep_last enqueues come from asyncio code while it runs
    follow_ups = asyncio.run(keep_last())

    # then: each behaves as its blocking twin
    assert len({j.id for j in burst}) == 1 and len({j.id for j in batch}) == 1
    assert len({j.id for j in follow_ups}) == 1 and follow_ups[0].id != first.id
    assert follow_ups[0].result(timeout=10) == 5
    assert batch[0].result(timeout=10) == 4
    wait_until(lambda: _echoed(r), 10, message="the burst's run")
    time.sleep(0.3)  # (nothing else may run)
    assert [x["value"] for x in _echoed(r)] == [4]
    assert [x["value"] for x in _tagged(r, "recompute")] == [0, 5]
    [digest] = _digests(r)
    assert digest["ns"] == [0, 1, 2, 3] and digest["job"] == batch[0].id
