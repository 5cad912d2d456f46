"""Limits set at run time (``taskq limit set/show/clear``, ``app.set_limit``): checks, the
audit, and real worker fleets obeying a rate and a concurrency changed under them."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Callable

import msgpack
import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.broker.control import read_control
from taskq.cli import main
from taskq.errors import ConfigError
from taskq.pauses import LimitOverride, Pause
from taskq.testing import drain
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until


def test_limits_are_checked_stored_shown_audited_and_cleared(
    make_app: Callable[..., App], r: redis.Redis, redis_url: str
) -> None:
    app = make_app()
    for bad in ({"rate": "fast"}, {"rate": "0/s"}, {"concurrency": 0}, {"concurrency": "3"}, {}):
        with pytest.raises(ConfigError):
            app.set_limit("t.x", **bad)
    app.set_limit("t.x", rate="5/s")
    app.set_limit("t.x", concurrency=3)  # kept together with the rate
    app.set_limit("t.x", rate="1/m", key="k1")
    limits = read_control(app.link, ["tasks"])[1]["tasks"]
    assert limits == {
        Pause("t.x"): LimitOverride("5/s", 3),
        Pause("t.x", "k1"): LimitOverride("1/m"),
    }
    base = ["--redis-url", redis_url]
    shown = json.loads(CliRunner().invoke(main, [*base, "limit", "show", "--json"]).output)
    assert {(x["task"], x["key"], x["rate"], x["concurrency"]) for x in shown["runtime"]} == {
        ("t.x", None, "5/s", 3),
        ("t.x", "k1", "1/m", None),
    }
    out = CliRunner().invoke(main, [*base, "limit", "clear", "t.x", "--key", "k1"])
    assert out.exit_code == 0, out.output
    bad = CliRunner().invoke(main, [*base, "limit", "set", "t.x", "--rate", "lots"])
    assert bad.exit_code != 0 and "rate_limit 'lots'" in bad.output
    assert list(read_control(app.link, ["tasks"])[1]["tasks"]) == [Pause("t.x")]
    audit = CliRunner().invoke(main, [*base, "audit", "--json"]).output
    actions = [e["action"] for e in json.loads(audit)]
    assert actions == ["limit_set", "limit_set", "limit_set", "limit_clear"]


@pytest.mark.slow
def test_a_rate_lowered_at_run_time_holds_across_the_fleet(
    task_app: App, r: redis.Redis, start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    # given two workers running a task at 50/s
    for _ in range(2):
        start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning")
    for n in range(400):
        tasks.paced.delay(n)
    wait_until(lambda: len(runs(r)) >= 25, 20, message="the fleet to run the task")
    # when its rate is set to 5/s at run time
    out = CliRunner().invoke(
        main, ["--redis-url", redis_url, "limit", "set", tasks.paced.name, "--rate", "5/s"]
    )
    assert out.exit_code == 0, out.output
    set_at = time.time()
    time.sleep(5.0)
    # then no 0.9 s window after the first 2 s holds more than 5 starts
    starts = sorted(x["t"] for x in runs(r) if x["t"] > set_at + 2.0)
    assert len(starts) >= 8  # it still runs
    worst = max(sum(1 for t in starts if s <= t < s + 0.9) for s in starts)
    assert worst <= 5, starts


@pytest.mark.slow
def test_a_concurrency_lowered_while_five_run_lets_them_finish_then_runs_one(
    task_app: App, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given five jobs of a task limited to five at once, running
    start_worker("-A", "tests.tasks", "-c", "6", "--prefetch", "1", "--loglevel", "warning")
    for n in range(9):
        tasks.five_at_once.delay(n, 1.0)
    # (begun: each has entered its function, not only taken its slot)
    begun = lambda: r.llen("runs") == 0 and r.llen("five:begun") >= 5  # noqa: E731
    wait_until(begun, 20, message="five running")
    # when the concurrency is set to 1
    task_app.set_limit(tasks.five_at_once.name, concurrency=1)
    set_at = time.time()
    # then the five finish, and the rest run one at a time after them
    wait_until(lambda: len(runs(r)) == 9, 30, message="every job to run")
    done = sorted(runs(r), key=lambda x: x["start"])
    first, rest = done[:5], done[5:]
    assert all(x["start"] < set_at for x in first)
    assert all(x["start"] >= max(f["end"] for f in first) - 0.05 for x in rest)
    for a, b in itertools.pairwise(rest):
        assert b["start"] >= a["end"] - 0.05, (a, b)
    task_app.clear_limit(tasks.five_at_once.name)


def test_clearing_a_run_time_concurrency_sends_its_held_jobs_back(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    # given a task without limits of its own, limited at run time, with a job waiting for
    # a slot (held, out of its stream) and a slot taken
    app = make_app()
    ran: list[int] = []
    free = app.task(name="t.free")(lambda n: ran.append(n))
    app.set_limit("t.free", concurrency=1)
    body = app.encode(free.message((7,), {}))
    r.zadd("tasks:held:t.free", {b"1\nt.free\n" + body: 1})
    r.hincrby("tasks:counts", "held", 1)
    r.zadd("tasks:running:t.free", {"w:1:2|other": 1})
    # when the limit is cleared, the held job goes back to its stream and runs
    app.clear_limit("t.free")
    assert r.xlen("tasks:normal") == 1 and r.hget("tasks:counts", "held") == b"0"
    assert not r.exists("tasks:running:t.free", "tasks:held:t.free")
    drain(app)
    assert ran == [7]


@pytest.mark.slow
def test_a_slot_taken_under_a_run_time_limit_is_freed_when_its_child_dies(
    task_app: App, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # given a task without a concurrency limit of its own, limited to one at run time: a job
    # running (its slot taken) and another waiting for that slot
    name = tasks.sleepy_traced.name
    task_app.set_limit(name, concurrency=1)
    start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "warning", TASKQ_MAX_RETRIES="0")
    tasks.sleepy_traced.delay(60, "long")
    wait_until(lambda: r.llen("starts") == 1, 20, message="the long job to start")
    tasks.sleepy_traced.delay(0, "next")
    wait_until(lambda: r.zcard(f"tasks:held:{name}") == 1, 20, message="the next one held")
    assert r.zcard(f"tasks:running:{name}") == 1
    # when the child running the first one is SIGKILLed
    os.kill(msgpack.unpackb(r.lindex("starts", 0), raw=False)["pid"], signal.SIGKILL)
    # then its master's recovery frees the slot under the run-time limit: the next job runs
    wait_until(lambda: [x["tag"] for x in runs(r)] == ["next"], 20, message="the next job")
    assert r.xlen("tasks:deadletter") == 1  # the lost run (no retries here)
    wait_until(lambda: r.zcard(f"tasks:running:{name}") == 0, 5, message="the slot freed")
    assert r.zcard(f"tasks:held:{name}") == 0
    task_app.clear_limit(name)
