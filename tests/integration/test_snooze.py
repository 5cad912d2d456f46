"""Snooze: a task raises (or returns) ``taskq.Snooze(seconds)`` to run again later without
spending an attempt; ``max_snoozes`` caps it. Real Redis, jobs run in this process."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from taskq import App, Snooze, current_job
from taskq.errors import ConfigError
from taskq.testing import drain
from taskq.worker.outcome import DEAD, OK, SNOOZED


def test_a_job_snoozed_1000_times_is_still_on_attempt_1(make_app: Callable[..., App]) -> None:
    app = make_app(store_results=True)
    attempts: list[int] = []

    @app.task
    def poll(times: int) -> int:
        job = current_job()
        assert job is not None
        attempts.append(job.attempt)
        if len(attempts) <= times:
            raise Snooze(0)
        return len(attempts)

    job = poll.delay(1000)
    result = drain(app, max_jobs=1001, wait_for_retries=True, timeout_s=60)
    assert [o.kind for o in result.outcomes].count(SNOOZED) == 1000
    assert result.outcomes[-1].kind == OK
    assert set(attempts) == {1}
    assert job.result(timeout=1) == 1001
    assert job.status().attempts == 1


def test_a_snoozed_job_says_snoozed_with_its_due_time(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app(store_results=True)

    @app.task
    def later() -> Snooze:
        return Snooze(60)  # returned rather than raised

    job = later.delay()
    [outcome] = drain(app).outcomes
    assert outcome.kind == SNOOZED and outcome.delay_ms == 60_000
    status = job.status()
    assert status.state == "snoozed" and status.attempts == 0 and status.worker is None
    [(_, due)] = r.zrange("tasks:schedule", 0, -1, withscores=True)
    assert status.due_ms == int(due)
    assert r.xlen("tasks:normal") == 0
    # a snoozed job can be cancelled like a scheduled one
    assert job.cancel() == "cancelled"
    assert r.zcard("tasks:schedule") == 0


def test_max_snoozes_caps_the_runs_and_the_snooze_past_it_dead_letters(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    runs: list[int] = []

    @app.task(max_snoozes=2, max_retries=0)
    def impatient() -> None:
        runs.append(1)
        raise Snooze(0)

    impatient.delay()
    result = drain(app, wait_for_retries=True, timeout_s=10)
    assert [o.kind for o in result.outcomes] == [SNOOZED, SNOOZED, DEAD]
    assert len(runs) == 3  # max_snoozes + 1 runs
    [(_, fields)] = r.xrange("tasks:deadletter")
    assert fields[b"error_type"] == b"Snooze"
    assert b"max_snoozes (2)" in fields[b"error"]


def test_bad_snoozes_are_refused() -> None:
    for bad in (-1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ConfigError):
            Snooze(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_snoozes"):
        App().task(max_snoozes=-1)(lambda: None)
