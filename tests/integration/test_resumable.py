"""Resumable jobs against a real Redis and real worker processes: steps run once per job,
iterations resume at their saved cursor, a stopping worker hands the job back without
spending an attempt, ``max_run_s`` lets short jobs through."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from taskq import App, chord
from taskq.testing import drain
from tests import resumable_tasks as t
from tests.conftest import WorkerProcess, wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.integration

StartWorker = Callable[..., WorkerProcess]
WORKER = ("-A", "tests.resumable_tasks:app")


@pytest.fixture
def app(redis_url: str) -> Iterator[App]:
    saved = t.app.settings
    t.app.settings = saved.replace(redis_url=redis_url, retry_backoff_ms=10)
    yield t.app
    t.app.close()
    t.app.settings = saved


def _list(r: redis.Redis, key: str) -> list[str]:
    return [x.decode() for x in r.lrange(key, 0, -1)]


def test_a_step_that_raised_runs_again_and_done_steps_do_not(app: App, r: redis.Redis) -> None:
    job = t.three_steps.delay("a")
    drain(app, max_jobs=1)
    live_s = r.ttl(f"tasks:steps:{job.id}")  # while the job waits for its retry
    drain(app, wait_for_retries=True)
    assert _list(r, "steps:a") == ["s1", "s2", "s2", "s3"]
    assert live_s > app.settings.result_ttl_s  # at least 7 days while the job lives
    assert 0 < r.ttl(f"tasks:steps:{job.id}") <= app.settings.result_ttl_s  # after its end


def test_steps_in_a_worker_process(app: App, r: redis.Redis, start_worker: StartWorker) -> None:
    start_worker(*WORKER, "-c", "1")
    job = t.three_steps.delay("w")
    wait_until(lambda: r.llen("steps:w") >= 4, message="the job's steps")
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="the job to be acked")
    assert _list(r, "steps:w") == ["s1", "s2", "s2", "s3"]
    assert job.id


@pytest.mark.slow
def test_a_child_killed_in_s3_runs_only_s3_again(
    app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    start_worker(*WORKER, "-c", "1")
    t.killed_in_s3.delay("k")
    pid = int(wait_until(lambda: r.lindex("pid:k", 0), message="s3 to run"))
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: r.llen("steps:k") >= 4, message="the retry's s3")
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="the job to be acked")
    assert _list(r, "steps:k") == ["s1", "s2", "s3", "s3"]


@pytest.mark.slow
def test_sigterm_hands_an_iteration_back_without_spending_an_attempt(
    app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # given a worker walking 10,000 items
    first = start_worker(*WORKER, "-c", "1")
    job = t.backfill.delay(10_000, "b", 0.0003)
    wait_until(lambda: r.llen("items:b") >= 5_000, timeout_s=30, message="half the walk")
    # when it is stopped (warm) and another worker takes over
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    handled_then = r.llen("items:b")
    assert handled_then < 10_000, "the walk ended before the stop"
    start_worker(*WORKER, "-c", "1")
    wait_until(lambda: r.scard("attempts:b") and r.xlen("tasks:normal") == 0 and _done(r, job.id))
    # then every item ran, at most one checkpoint interval twice, on attempt 1 throughout
    items = [int(x) for x in r.lrange("items:b", 0, -1)]
    assert set(items) == set(range(10_000))
    print(f"\nstopped at {handled_then} items; {len(items) - 10_000} handled twice")
    assert len(items) - 10_000 <= app.settings.checkpoint_every_items
    assert r.smembers("attempts:b") == {b"1"}
    assert "HandBack" in first.output() or "yielded" in first.output()


@pytest.mark.slow
def test_after_a_sigkill_an_iteration_resumes_at_its_last_saved_cursor(
    app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    start_worker(*WORKER, "-c", "1")
    job = t.backfill.delay(10_000, "kill", 0.0003)
    wait_until(lambda: r.llen("items:kill") >= 3_000, timeout_s=30, message="a third of the walk")
    os.kill(int(r.lindex("pid:kill", 0) or 0), signal.SIGKILL)
    wait_until(lambda: _done(r, job.id), timeout_s=30, message="the walk to end")
    items = [int(x) for x in r.lrange("items:kill", 0, -1)]
    assert set(items) == set(range(10_000))
    assert 0 <= len(items) - 10_000 <= app.settings.checkpoint_every_items
    assert r.smembers("attempts:kill") == {b"1", b"2"}  # the lost run was an attempt


def _done(r: redis.Redis, job_id: str) -> bool:
    raw = r.hget(f"tasks:steps:{job_id}", "c:rows")
    from taskq.checkpoint import parse_cursor

    return raw is not None and parse_cursor(raw, "rows").finished


@pytest.mark.slow
def test_max_run_s_lets_short_jobs_start_within_a_second_and_a_half(
    app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    start_worker(*WORKER, "-c", "1")
    t.long_walk.delay(10_000, "m", 0.0005)
    wait_until(lambda: r.llen("started:m"), message="the long job to start")
    for _ in range(20):
        t.short.delay(time.time(), "m")
        time.sleep(0.05)
    wait_until(lambda: r.llen("delays:m") == 20, timeout_s=20, message="the short jobs")
    delays = [float(x) for x in r.lrange("delays:m", 0, -1)]
    assert max(delays) < 1.5, delays
    wait_until(lambda: r.llen("done:m"), timeout_s=30, message="the long job to end")


@pytest.mark.slow
def test_a_chord_whose_member_was_killed_mid_step_runs_its_body_once(
    app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    start_worker(*WORKER, "-c", "2")
    header = [t.member.s(i, "c") for i in range(4)]
    chord(header, t.collect.s("c")).delay()
    pid = int(wait_until(lambda: r.lindex("pid:c", 0), message="member 0's s2"))
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: r.llen("bodies:c"), timeout_s=20, message="the chord's body")
    wait_until(lambda: sum(r.xlen(f"tasks:{p}") for p in ("high", "normal", "low")) == 0)
    assert _list(r, "bodies:c") == ["0,10,20,30"]
    steps = _list(r, "steps:c")
    assert steps.count("0:s1") == 1 and steps.count("0:s2") == 2
    assert all(steps.count(f"{i}:s1") == 1 for i in range(4))


@pytest.mark.slow
def test_step_values_survive_a_redis_kill_with_aof(aof_server: RedisServer) -> None:
    saved = t.app.settings
    t.app.settings = saved.replace(redis_url=aof_server.url, retry_backoff_ms=10)
    try:
        t.three_steps.delay("aof")
        drain(t.app, max_jobs=1)  # attempt 1: s1 stored, s2 raised
        time.sleep(1.2)  # appendfsync everysec: what is a second old is on disk
        aof_server.kill()
        aof_server.start()
        t.app.close()
        drain(t.app, wait_for_retries=True, timeout_s=20)
        with aof_server.client() as c:
            assert _list(c, "steps:aof") == ["s1", "s2", "s2", "s3"]
    finally:
        t.app.close()
        t.app.settings = saved


def test_async_steps_in_the_async_runner(make_app: Callable[..., App], r: redis.Redis) -> None:
    import taskq
    from taskq import current_job

    app = make_app(retry_backoff_ms=10)
    calls: list[str] = []

    async def charge() -> str:
        calls.append("charge")
        return "ch_1"

    @app.task(max_retries=1, store_result=True)
    async def pay() -> list[Any]:
        charged = await taskq.astep("charge", charge)
        rows = list(taskq.iterate("rows", lambda c: ([c or 0, 1], None)))
        job = current_job()
        if job is not None and job.attempt == 1:
            raise RuntimeError("after the step, once")
        return [charged, rows]

    job = pay.delay()
    drain(app, wait_for_retries=True)
    assert job.result(timeout=2) == ["ch_1", []] and calls == ["charge"]


def test_eager_mode_runs_steps_and_iterations() -> None:
    app = App(eager=True)
    calls: list[str] = []

    @app.task
    def job() -> Any:
        import taskq

        a = taskq.step("a", lambda: calls.append("a") or (1, 2))
        rows = list(taskq.iterate("rows", lambda c: ([c or 0, 1], None)))
        return [a, rows]

    assert job.delay().result() == [(1, 2), [0, 1]]
    assert calls == ["a"]


@pytest.mark.parametrize(("kind", "says"), [("type", "not msgpack"), ("size", "over the")])
def test_a_step_value_that_cannot_be_stored_fails_the_attempt(
    app: App, r: redis.Redis, kind: str, says: str
) -> None:
    job = t.bad_value.delay(kind)
    result = drain(app)
    [outcome] = result.outcomes
    assert outcome.kind == "dead" and outcome.error_type == "CheckpointError"
    assert says in outcome.error
    stored = r.hgetall(f"tasks:steps:{job.id}")
    assert b"v:bad" not in stored and b"s:bad" in stored  # marked failed, no value


def test_a_bad_stored_value_fails_the_run_clearly(app: App, r: redis.Redis) -> None:
    # given a job whose stored step value and cursor are not what taskq writes
    job = t.reads_s1.apply_async(job_id="bad-step")
    walk = t.walks_stored.apply_async(("x",), job_id="bad-cursor")
    r.hset(f"tasks:steps:{job.id}", mapping={"v:s1": b"\xc1", "s:s1": b"junk"})
    r.hset(f"tasks:steps:{walk.id}", "c:rows", b"\x93\x01\x02\x03")
    # when they run, then each fails with a CheckpointError and the consumer goes on
    result = drain(app)
    errors = sorted(o.error for o in result.outcomes)
    assert [o.error_type for o in result.outcomes] == ["CheckpointError"] * 2
    assert "does not decode" in errors[1] or "does not decode" in errors[0]
    assert any("is not a cursor" in e for e in errors)


def test_a_stale_run_cannot_write_steps(app: App, r: redis.Redis) -> None:
    from taskq.broker.checkpoints import Checkpoints
    from taskq.checkpoint import StaleRun

    r.xgroup_create("tasks:normal", "taskq", id="0", mkstream=True)
    entry = r.xadd("tasks:normal", {"task": "x", "body": b"x"}).decode()
    r.xreadgroup("taskq", "new-owner", {"tasks:normal": ">"})
    stale = Checkpoints(app.broker_for(("tasks",)).link, "old-owner")
    with pytest.raises(StaleRun):
        stale.write(("tasks", "normal", "j1", entry), {"v:s": b"\x01"}, ttl_ms=1000)
    assert not r.exists("tasks:steps:j1")


def test_status_cli_and_dashboard_show_steps_and_cursors(app: App, r: redis.Redis) -> None:
    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from taskq.cli import main
    from taskq.dashboard import asgi

    # given a job that failed once in s2 and then ran to its end, and a finished walk
    app.settings = app.settings.replace(store_results=True)
    job = t.three_steps.delay("v")
    walk = t.backfill.delay(300, "v")
    drain(app, wait_for_retries=True)
    # then its status has each step, done, and the walk's cursor with its item count
    status = job.status()
    done = [("s1", "done"), ("s2", "done"), ("s3", "done")]
    assert [(s.name, s.state) for s in status.steps] == done
    [cursor] = walk.status().cursors
    assert (cursor.name, cursor.items, cursor.finished) == ("rows", 300, True)
    # and taskq job shows them, as text and as JSON
    text = CliRunner().invoke(main, ["--redis-url", app.settings.redis_url, "job", job.id])
    assert "step s2: done at" in text.output
    out = CliRunner().invoke(
        main, ["--redis-url", app.settings.redis_url, "job", walk.id, "--json"]
    )
    assert '"items": 300' in out.output
    # and so does the dashboard's job page
    with TestClient(asgi(app)) as client:
        page = client.get(f"/jobs/{walk.id}").text
    assert 'id="job-steps"' in page and "300 items, finished" in page


def test_a_failed_step_shows_as_failed(app: App, r: redis.Redis) -> None:
    app.settings = app.settings.replace(store_results=True, retry_backoff_ms=60_000)
    job = t.three_steps.delay("f")
    drain(app)
    states = {s.name: (s.state, s.error) for s in job.status().steps}
    assert states == {"s1": ("done", ""), "s2": ("failed", "RuntimeError")}


def test_max_run_s_in_drain_with_signed_bodies_gives_back_without_an_attempt(
    app: App, r: redis.Redis
) -> None:
    app.settings = app.settings.replace(signing_keys=("k1",), checkpoint_every_items=50)
    t.long_walk.delay(3_000, "s", 0.0005)  # about 1.5 s of items: over max_run_s once
    result = drain(app, timeout_s=20)
    kinds = [o.kind for o in result.outcomes]
    assert kinds[0] == "yielded" and kinds[-1] == "ok"
    assert {o.attempt for o in result.outcomes} == {1}
    assert r.llen("done:s") == 1 and r.llen("started:s") == 1  # item 0 ran once


@pytest.mark.slow
def test_the_example_runs_as_its_docstring_says(
    redis_url: str, r: redis.Redis, start_worker: StartWorker
) -> None:
    from tests.examples_support import run_example

    start_worker("-A", "examples.resumable", "-c", "2")
    run = run_example("resumable", "--order", "o-1", "--rows", "600", redis_url=redis_url)
    assert run.returncode == 0, run.stderr
    assert "paid: {'charge': 'ch_o-1', 'booked_cents': 4200}" in run.stdout
    assert "backfilled rows: 600" in run.stdout
    calls = [line.strip() for line in run.stdout.splitlines() if line.startswith("  ")]
    assert calls[:4] == ["charge o-1 4200", "email o-1", "email o-1", "ledger o-1 ch_o-1"]
    assert r.hlen("examples:resumable:prices") == 600


def test_steps_in_chain_and_group_members(app: App, r: redis.Redis) -> None:
    from taskq import chain, group

    app.settings = app.settings.replace(store_results=True)
    flow = chain(t.member.s(1, "ch"), t.member.s("ch")).delay()
    members = group(t.member.s(i, "gr") for i in range(1, 4)).delay()
    drain(app)
    assert flow.result(timeout=2) == 100
    assert members.result(timeout=2) == [10, 20, 30]
    assert sorted(_list(r, "steps:ch")) == ["10:s1", "10:s2", "1:s1", "1:s2"]
