"""Pause and resume (by queue, task and limit key): real Redis, jobs run in this process;
then a fleet of real worker processes (slow)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.broker.control import read_pauses
from taskq.broker.schedules import Schedules, ScheduleState
from taskq.cli import main
from taskq.errors import ConfigError
from taskq.ops.queue_metrics import QueueDepth
from taskq.pauses import Pause
from taskq.testing import drain
from taskq.worker import pausing, ticker
from taskq.worker.ticker import Ticker
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until
from tests.redis_server import RedisServer


@pytest.fixture(autouse=True)
def _read_pauses_at_every_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process consumers here read the pauses at every job's turn (workers: every 0.5 s)."""
    monkeypatch.setattr(pausing, "READ_EVERY_S", 0.0)


def _app(make_app: Callable[..., App], ran: list[Any]) -> tuple[App, Any, Any]:
    app = make_app(store_results=True)

    @app.task
    def a(n: int) -> None:
        ran.append(("a", n))

    @app.task(rate_limit="1000/s", limit_key=lambda tenant, n: tenant)
    def b(tenant: str, n: int) -> None:
        ran.append((tenant, n))

    return app, a, b


def test_a_paused_task_is_set_aside_and_runs_after_resume_in_priority_order(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    ran: list[Any] = []
    app, a, b = _app(make_app, ran)
    # given a paused task, with jobs of it and of another task waiting
    app.pause(task=a.name)
    low = a.apply_async((1,), priority="low")
    jobs = [a.delay(2), b.delay("t", 1), a.apply_async((3,), priority="high")]
    # when the queue is drained, the other task runs and the paused one's jobs wait aside
    drain(app)
    assert ran == [("t", 1)]
    assert r.zcard(f"tasks:held:paused:{len(a.name)}:{a.name}:") == 3
    assert r.xlen("tasks:normal") == 0 and low.status().state == "waiting"
    # and a cancel finds a job there
    assert jobs[0].cancel() == "cancelled"
    # then the resume brings them back, and they run in their priority order
    assert app.resume(task=a.name) == 2
    drain(app)
    assert ran == [("t", 1), ("a", 3), ("a", 1)]
    assert r.hget("tasks:counts", "held") == b"0"
    assert r.hlen("tasks:paused") == 0


def test_a_paused_queue_takes_enqueues_and_runs_nothing_until_resumed(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    ran: list[Any] = []
    app, a, b = _app(make_app, ran)
    assert app.pause() == app.pause()  # idempotent
    a.delay(1), b.delay("t", 2)
    drain(app)  # (a burst sets them aside; a worker whose queues are all paused fetches none)
    assert ran == [] and r.xlen("tasks:normal") == 0 and r.zcard("tasks:held:paused:0::") == 2
    assert app.resume() == 2
    drain(app)
    assert sorted(ran) == [("a", 1), ("t", 2)]


def test_a_paused_limit_key_stops_its_jobs_only(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    ran: list[Any] = []
    app, a, b = _app(make_app, ran)
    app.pause(key="noisy")
    b.delay("noisy", 1), b.delay("calm", 2), a.delay(3)
    drain(app)
    assert sorted(ran, key=str) == [("a", 3), ("calm", 2)]
    assert app.resume(key="noisy") == 1
    drain(app)
    assert ("noisy", 1) in ran


def test_bad_pauses_are_refused(make_app: Callable[..., App]) -> None:
    app = make_app()
    with pytest.raises(ConfigError):
        app.pause("bad queue")
    with pytest.raises(ConfigError):
        app.pause(task="")


@pytest.mark.slow
def test_pausing_a_queue_three_workers_drain(
    task_app: App, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given three workers draining a queue of short jobs
    for _ in range(3):
        start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning")
    for i in range(400):
        tasks.sleepy.delay(0.05, f"n{i}")
    wait_until(lambda: len(runs(r)) >= 20, 20, message="the workers to drain")
    # when the queue is paused
    task_app.pause()
    paused_at = time.time()
    # then no job starts later than 1 s after, running ones finish, enqueues are accepted
    time.sleep(1.0)
    tasks.sleepy.delay(0, "after-pause")
    tasks.urgent.delay("urgent")
    time.sleep(0.5)
    done = runs(r)
    assert max(x["start"] for x in done) < paused_at + 1.0
    assert r.llen("started") == len(done)  # every started job finished
    time.sleep(0.5)
    assert len(runs(r)) == len(done)  # nothing more
    # when resumed, the rest drains, the high-priority job first among what was waiting
    task_app.resume()
    wait_until(lambda: len(runs(r)) == 402, 60, message="the rest to drain")
    tags = [x.get("tag", x.get("value")) for x in sorted(runs(r), key=lambda x: x["t"])]
    assert sorted(tags) == sorted([f"n{i}" for i in range(400)] + ["after-pause", "urgent"])
    after = [x for x in runs(r) if x["t"] > paused_at + 1.5]
    assert min(after, key=lambda x: x["t"]).get("value") == "urgent"


@pytest.mark.slow
def test_a_pause_survives_a_worker_restart(
    task_app: App, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    task_app.pause(task=tasks.echo.name)
    worker = start_worker("-A", "tests.tasks", "-c", "1", "--loglevel", "warning")
    tasks.echo.delay("held"), tasks.stamp.delay("free")
    wait_until(lambda: any(x.get("tag") == "free" for x in runs(r)), 20, message="free")
    worker.stop()
    start_worker("-A", "tests.tasks", "-c", "1", "--loglevel", "warning")
    tasks.stamp.delay("free2")
    wait_until(lambda: any(x.get("tag") == "free2" for x in runs(r)), 20, message="free2")
    assert not any(x.get("value") == "held" for x in runs(r))
    task_app.resume(task=tasks.echo.name)
    wait_until(lambda: any(x.get("value") == "held" for x in runs(r)), 5, message="resumed")


def test_a_pause_survives_a_redis_restart(aof_server: RedisServer) -> None:
    app = App(aof_server.url)
    try:
        app.pause(task="tests.tasks.echo")
        time.sleep(1.1)  # appendfsync everysec
        aof_server.kill()
        aof_server.start()
        pauses = read_pauses(app.link, ["tasks"])["tasks"]
        assert list(pauses) == [Pause("tests.tasks.echo")]
    finally:
        app.close()


def test_pause_and_resume_on_the_command_line_show_in_inspect_and_metrics(
    make_app: Callable[..., App], r: redis.Redis, redis_url: str
) -> None:
    app = make_app()
    base = ["--redis-url", redis_url]
    out = CliRunner().invoke(main, [*base, "pause", "tasks", "--task", "t.x", "--key", "k1"])
    assert out.exit_code == 0 and "paused tasks (task t.x, key k1)" in out.output, out.output
    assert CliRunner().invoke(main, [*base, "pause", "tasks"]).exit_code == 0
    shown = CliRunner().invoke(main, [*base, "inspect", "queues", "-Q", "tasks", "--json"])
    [queue] = json.loads(shown.output)
    assert sorted((p["task"] or "", p["key"] or "") for p in queue["paused"]) == [
        ("", ""),
        ("t.x", "k1"),
    ]
    text = CliRunner().invoke(main, [*base, "inspect", "-Q", "tasks"]).output
    assert "tasks: paused (the whole queue" in text and "tasks: paused (task t.x, key k1" in text
    metrics = {
        tuple(s.labels.values()): s.value
        for family in QueueDepth(redis_url, ["tasks"]).collect()
        if family.name == "taskq_paused"
        for s in family.samples
    }
    assert metrics == {("tasks", "", ""): 1, ("tasks", "t.x", "k1"): 1}
    out = CliRunner().invoke(main, [*base, "resume", "tasks"])
    assert out.exit_code == 0 and "resumed tasks: 0 job(s)" in out.output, out.output
    assert list(read_pauses(app.link, ["tasks"])["tasks"]) == [Pause("t.x", "k1")]


def test_a_paused_periodic_task_keeps_its_ticks_due_and_runs_one_on_resume(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ticker, "READ_EVERY_S", 0.0)
    app = make_app(queue="ticks")
    t = app.task(name="ticks.noop")(lambda: None)
    app.add_periodic(t, every=1, catch_up="all")
    store = Schedules(app.link)
    last = (store.read("ticks")[1] // 1000 - 5) * 1000  # five ticks missed
    missed = ScheduleState.value(last, "every:1000", 0)
    store.claim("ticks", "ticks.noop", "", missed, (b"\x90", []))
    app.pause("ticks", task="ticks.noop")
    beat = Ticker(app, ["ticks"])
    beat.step(store)
    # paused: no job, and the last tick enqueued is still the old one (the ticks stay due)
    assert app.link.call("XLEN", "ticks:normal") == 0
    assert store.read("ticks")[0]["ticks.noop"] == missed
    # resumed: one job, though the schedule catches up "all"
    app.resume("ticks", task="ticks.noop")
    beat.step(store)
    assert app.link.call("XLEN", "ticks:normal") == 1


def _redis_ms(r: redis.Redis) -> int:
    s, us = r.time()
    return int(s) * 1000 + int(us) // 1000


def test_the_audit_shows_each_action_with_its_user(
    make_app: Callable[..., App], r: redis.Redis, redis_url: str
) -> None:
    app = make_app(audit_max_entries=3)
    app.pause(task="t.x")
    paused_ms = _redis_ms(r)
    wait_until(lambda: _redis_ms(r) > paused_ms, 1, 0.001)
    app.resume(task="t.x")  # (in a later ms: --since below tells them apart)
    job = app.task(name="t.y")(lambda: None).delay()
    assert job.cancel() == "cancelled"
    # then each shows, in order, with the Redis user and this host
    shown = CliRunner().invoke(main, ["--redis-url", redis_url, "audit", "--json", "-Q", "tasks"])
    entries = json.loads(shown.output)
    assert [e["action"] for e in entries] == ["pause", "resume", "cancel"]
    assert {e["user"] for e in entries} == {"default"}
    assert all(e["host"] == socket.gethostname() for e in entries)
    assert entries[0]["detail"] == {"task": "t.x", "key": None}
    assert entries[2]["detail"] == {"job_id": job.id, "terminate": False, "outcome": "cancelled"}
    # --since, and the text form
    since = datetime.fromtimestamp(entries[1]["at_ms"] / 1000, timezone.utc).isoformat()
    text = CliRunner().invoke(main, ["--redis-url", redis_url, "audit", "--since", since]).output
    assert "pause " not in text and "resume" in text and f"job_id={job.id}" in text
    assert "(user default on" in text
    # the stream is capped (about audit_max_entries: MAXLEN ~)
    for _ in range(200):
        app.pause(task="t.z")
    assert r.xlen("tasks:audit") < 200


def test_a_paused_async_task_is_set_aside_too(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()
    ran: list[int] = []

    @app.task
    async def fetch(n: int) -> None:
        ran.append(n)

    app.pause(task=fetch.name)
    fetch.delay(1)
    drain(app)
    assert ran == [] and r.zcard(f"tasks:held:paused:{len(fetch.name)}:{fetch.name}:") == 1
    app.resume(task=fetch.name)
    drain(app)
    assert ran == [1]


def test_pausing_a_partitioned_queue_pauses_every_partition(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions={"tasks": 3})
    app.pause("tasks", task="t.x")
    parts = ["{tasks.0}", "{tasks.1}", "{tasks.2}"]
    assert {q: list(p) for q, p in read_pauses(app.link, parts).items()} == {
        q: [Pause("t.x")] for q in parts
    }
    app.resume("tasks", task="t.x")
    assert read_pauses(app.link, parts) == {q: {} for q in parts}
