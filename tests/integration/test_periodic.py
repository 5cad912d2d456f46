"""Periodic jobs (issue 15, part 1): exactly one job per tick across workers, catch-up modes,
``taskq periodic list``, bad declarations; against a real Redis and real worker processes."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.broker.schedules import Schedules, ScheduleState
from taskq.cli import main
from taskq.errors import ConfigError
from taskq.periodic import MAX_CATCH_UP, ON_TIME_MS, Periodic
from taskq.worker.ticker import Ticker
from tests import tasks
from tests.conftest import ROOT, WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]


def _worker(start_worker: StartWorker, queue: str, *args: str) -> WorkerProcess:
    return start_worker("-A", "tests.tasks", "-Q", queue, "-c", "1", "--loglevel", "info", *args)


def _ticks(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    return [run for run in runs(r) if run.get("tag") == tag]


def _stored(r: redis.Redis, queue: str, name: str) -> ScheduleState | None:
    raw = r.hget(f"{queue}:periodic", name)
    return ScheduleState.parse(raw.decode()) if raw else None


def _redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.mark.slow
def test_three_workers_enqueue_each_tick_once_across_a_sigkill(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    workers = [_worker(start_worker, "ptick") for _ in range(3)]
    wait_until(lambda: len(_ticks(r, "one")) >= 5, 20, message="five ticks")
    workers[0].kill_all()  # master and child at once, mid-schedule
    first = _ticks(r, "one")[0]["tick"]
    wait_until(lambda: _ticks(r, "one")[-1]["tick"] >= first + 11_000, 30, message="12 s of ticks")
    for w in workers[1:]:
        w.signal(signal.SIGTERM)
        w.wait(20)
    state = _stored(r, "ptick", "tick-one")
    assert state is not None
    # Every tick from the first to the last one enqueued ran (the killed worker's job, if it
    # had one, came back through the sweep), and no tick got a second job.
    wait_until(
        lambda: {t["tick"] for t in _ticks(r, "one")} >= set(range(first, state.last_ms + 1, 1000))
    )
    by_tick: dict[int, set[str]] = {}
    for run in _ticks(r, "one"):
        by_tick.setdefault(run["tick"], set()).add(run["job"])
    assert sorted(by_tick) == list(range(first, state.last_ms + 1, 1000))
    assert all(len(jobs) == 1 for jobs in by_tick.values()), by_tick
    assert all(t % 1000 == 0 for t in by_tick)


def test_first_start_enqueues_no_past_tick_and_the_job_knows_its_tick(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    before = _redis_ms(r)
    _worker(start_worker, "ptick")
    wait_until(lambda: _ticks(r, "one"), 15, message="a tick")
    run = _ticks(r, "one")[0]
    assert run["tick"] > before and run["tick"] % 1000 == 0
    assert run["t"] * 1000 >= run["tick"] - 50  # not started before its tick (clock slack)


def test_catch_up_all_enqueues_every_missed_tick_once(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    p = task_app.periodics["tick-all"]
    last = (_redis_ms(r) // 1000 - 6) * 1000  # six ticks were missed while no worker ran
    r.hset("pall:periodic", "tick-all", ScheduleState.value(last, p.key, 0))
    _worker(start_worker, "pall")
    wait_until(lambda: len(_ticks(r, "all")) >= 8, 20, message="caught-up ticks and two more")
    ticks = sorted(t["tick"] for t in _ticks(r, "all"))
    assert ticks[:6] == [last + 1000 * i for i in range(1, 7)]
    assert len(ticks) == len(set(ticks))


def test_catch_up_one_coalesces_missed_ticks_into_one_job(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    p = task_app.periodics["tick-one"]
    last = (_redis_ms(r) // 1000 - 30) * 1000
    r.hset("ptick:periodic", "tick-one", ScheduleState.value(last, p.key, 0))
    _worker(start_worker, "ptick")
    wait_until(lambda: len(_ticks(r, "one")) >= 3, 20, message="three ticks")
    ticks = [t["tick"] for t in _ticks(r, "one")]
    assert ticks[0] >= last + 29_000  # one job for the 30 missed ticks: the latest one
    assert ticks == sorted(set(ticks))  # then one per tick, none twice


def test_a_changed_definition_starts_over(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    r.hset("ptick:periodic", "tick-one", ScheduleState.value(1_000, "every:60000", 0))
    before = _redis_ms(r)
    _worker(start_worker, "ptick")
    wait_until(lambda: _ticks(r, "one"), 15, message="a tick")
    assert _ticks(r, "one")[0]["tick"] > before  # nothing for the old definition's past ticks
    state = _stored(r, "ptick", "tick-one")
    assert state is not None and state.definition == "every:1000"


def test_no_periodic_flag_schedules_nothing(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    w = _worker(start_worker, "ptick", "--no-periodic")
    wait_until(lambda: r.zcard("ptick:workers") == 1, 15, message="the worker's heartbeat")
    tasks.tick.delay("plain")  # a job through the same worker: its master has ticked by then
    wait_until(lambda: _ticks(r, "plain"), 15, message="the plain job")
    assert not r.exists("ptick:periodic")
    assert not _ticks(r, "one")
    w.stop()


def test_periodic_list_shows_last_and_next(
    task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    p = task_app.periodics["tick-one"]
    r.hset("ptick:periodic", "tick-one", ScheduleState.value(5_000, p.key, 0))
    result = CliRunner().invoke(main, ["-A", "tests.tasks", "periodic", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["tick-one"]["last_ms"] == 5_000 and rows["tick-one"]["next_ms"] == 6_000
    assert rows["tick-one"]["schedule"] == p.schedule.describe()
    assert rows["tick-all"]["last_ms"] is None and rows["tick-all"]["queue"] == "pall"
    assert rows["tick-all"]["next_ms"] > _redis_ms(r) - 1_000
    text = CliRunner().invoke(main, ["-A", "tests.tasks", "periodic", "list"])
    assert text.exit_code == 0 and "tick-one" in text.output and "never" in text.output


def test_two_tickers_racing_for_one_tick_enqueue_it_once(make_app: Callable[..., App]) -> None:
    app = make_app(queue="race")
    t = app.task(name="race.noop")(lambda: None)
    app.add_periodic(t, every=1, catch_up="all")
    store = Schedules(app.link)
    last = (store.read("race")[1] // 1000 - 5) * 1000
    missed = ScheduleState.value(last, "every:1000", 0)
    store.claim("race", "race.noop", "", missed, (b"\x90", []))
    a, b = Ticker(app, ["race"]), Ticker(app, ["race"])
    b.step(store)  # b reads the state too, and claims first: five or six ticks
    enqueued = app.link.call("XLEN", "race:normal")
    assert enqueued >= 5
    a._raw, a._next_ms, a._stale = {"race.noop": missed}, {"race.noop": 0}, False
    a.step(store)  # a still holds the old value: its claim is refused, it learns b's
    assert app.link.call("XLEN", "race:normal") == enqueued
    assert a._raw == b._raw


NEW_DEPLOY = """
from tests.tasks import app, tick

del app.periodics["tick-one"]
app.add_periodic(tick, every=2, args=("one",), name="tick-one")
"""


@pytest.mark.slow
def test_a_rolling_deploy_that_changes_every_ticks_the_newer_definition_only(
    task_app: App, r: redis.Redis, start_worker: StartWorker, tmp_path: Path
) -> None:
    # Given a worker of the old deploy (every=1) that has ticked,
    old = _worker(start_worker, "ptick")
    wait_until(lambda: len(_ticks(r, "one")) >= 2, 20, message="old ticks")
    # when a worker of the new deploy (every=2, same name) starts beside it,
    (tmp_path / "newdeploy.py").write_text(NEW_DEPLOY)
    new = start_worker("-A", "newdeploy", "-Q", "ptick", "-c", "1", PYTHONPATH=f"{ROOT}:{tmp_path}")
    registered = wait_until(lambda: _definition_is(r, "every:2000"), 20, message="new definition")
    wait_until(lambda: _ticks(r, "one")[-1]["tick"] >= registered.last_ms + 8_000, 20)
    # and then stops, leaving the old worker alone,
    new.stop()
    after = _ticks(r, "one")[-1]["tick"]
    wait_until(lambda: _ticks(r, "one")[-1]["tick"] >= after + 4_000, 20, message="old alone")
    old.stop()
    # then every tick since the new definition was registered follows it (the old worker
    # never wrote its own back, and ticked the new one as stored): each 2 s tick once.
    state = _stored(r, "ptick", "tick-one")
    assert state is not None and state.definition == "every:2000"
    assert state.registered_ms == registered.registered_ms
    later = sorted(t["tick"] for t in _ticks(r, "one") if t["tick"] > registered.last_ms)
    assert later == list(range(later[0], state.last_ms + 1, 2_000)), later
    assert later[0] % 2_000 == 0 and later[0] - registered.last_ms <= 2_000


def _definition_is(r: redis.Redis, definition: str) -> ScheduleState | None:
    state = _stored(r, "ptick", "tick-one")
    return state if state is not None and state.definition == definition else None


def test_a_stored_definition_newer_than_the_master_is_ticked_as_stored(
    make_app: Callable[..., App],
) -> None:
    app = make_app(queue="deploy")
    t = app.task(name="deploy.noop")(lambda: None)
    app.add_periodic(t, every=1, catch_up="all")
    store = Schedules(app.link)
    ticker = Ticker(app, ["deploy"])
    ticker.step(store)  # registers every:1000, dated by this master's start
    now = wait_until(lambda: max(store.read("deploy")[1] - ticker._born_ms, 0)) + ticker._born_ms
    newer = ScheduleState.value((now // 2_000 - 3) * 2_000, "cron:* * * * *:UTC", now)
    older = ScheduleState.value((now // 2_000 - 3) * 2_000, "every:2000", ticker._born_ms - 1)
    for stored, kept in ((newer, True), (older, False), ("7|every:2000|9" + "9" * 15, False)):
        app.link.call("HSET", "deploy:periodic", "deploy.noop", stored)
        ticker._stale = True
        ticker.step(store)
        state = _stored_of(app, "deploy.noop")
        assert (state.definition != "every:1000") is kept, (stored, state)


def _stored_of(app: App, name: str) -> ScheduleState:
    state = ScheduleState.parse(app.link.call("HGET", "deploy:periodic", name).decode())
    assert state is not None
    return state


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"cron": "61 * * * *"}, "61"),
        ({"cron": "* * * *"}, "* * * *"),
        ({"cron": "0 9 * * *", "tz": "Mars/Base"}, "Mars/Base"),
        ({"every": 0}, "every"),
        ({"every": 5, "cron": "* * * * *"}, "exactly one"),
        ({}, "exactly one"),
        ({"every": 5, "catch_up": "most"}, "catch_up"),
        ({"every": 5, "tz": "Europe/Paris"}, "tz="),
        ({"every": 5, "args": (object(),)}, "not msgpack-serializable"),
    ],
)
def test_bad_declarations_fail_at_once(
    make_app: Callable[..., App], kwargs: dict[str, Any], needle: str
) -> None:
    app = make_app()
    t = app.task(name="bad.noop")(lambda *a: None)
    with pytest.raises(ConfigError) as caught:
        app.add_periodic(t, **kwargs)
    assert needle in str(caught.value)


def test_one_name_twice_is_an_error(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.periodic(every=60)
    def report() -> None: ...

    with pytest.raises(ConfigError, match="twice"):
        app.add_periodic(report, every=30)
    assert app.add_periodic(report, every=30, name="report-30s").name == "report-30s"


def _p(app: App, catch_up: str, every_s: int = 10) -> Periodic:
    t = app.task(name=f"due.{catch_up}")(lambda: None)
    return app.add_periodic(t, every=every_s, catch_up=catch_up)


def test_due_by_catch_up_mode(make_app: Callable[..., App]) -> None:
    app = make_app()
    one, none, all_ = _p(app, "one"), _p(app, "none", every_s=60), _p(app, "all")
    assert one.due(0, 35_000) == ([30_000], 30_000)  # three missed: one job, the latest tick
    assert all_.due(0, 35_000) == ([10_000, 20_000, 30_000], 30_000)
    assert none.due(0, 120_000 + ON_TIME_MS) == ([120_000], 120_000)  # on time
    assert none.due(0, 120_001 + ON_TIME_MS) == ([], 120_000)  # missed: skipped, not enqueued
    assert one.due(30_000, 39_999) == ([], 30_000)
    ticks, last = all_.due(0, 10_000 * (MAX_CATCH_UP + 50))
    assert len(ticks) == MAX_CATCH_UP and last == 10_000 * (MAX_CATCH_UP + 50)
    assert ticks[0] == 10_000 * 51  # the latest ones
