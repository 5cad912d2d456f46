"""taskq.testing.drain against a real Redis: what it runs, what it waits for, when it stops."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from taskq import App, Retry, current_job, testing
from taskq.message import Message
from taskq.testing import DrainTimeout, drain
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

RETRY = "tasks:retry:normal"


def now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_drain_runs_every_ready_job_highest_priority_first(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    seen: list[str] = []

    @app.task(name="note")
    def note(tag: str) -> None:
        seen.append(tag)

    # given: three normal jobs and then one high job
    for i in range(3):
        note.delay(f"normal-{i}")
    note.apply_async(("high",), priority="high")

    # when
    result = drain(app)

    # then: all ran, the high one first, and nothing is left pending or in the streams
    assert (result.ok, result.retried, result.dead) == (4, 0, 0)
    assert seen == ["high", "normal-0", "normal-1", "normal-2"]
    assert [o.msg.args[0] for o in result.outcomes if o.msg] == seen
    assert r.xlen("tasks:normal") == 0 and r.xlen("tasks:high") == 0
    assert r.xpending("tasks:normal", "taskq")["pending"] == 0


def test_drain_does_not_wait_for_a_retry_by_default(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app(retry_backoff_ms=60_000)

    @app.task(name="fails")
    def fails() -> None:
        raise RuntimeError("boom")

    fails.delay()
    started = time.monotonic()
    result = drain(app)

    assert (result.ok, result.retried, result.dead) == (0, 1, 0)
    assert time.monotonic() - started < 5
    outcome = result.of_task("fails")[0]
    assert (outcome.attempt, outcome.error_type, outcome.error) == (1, "RuntimeError", "boom")
    # the job waits out its backoff in the retry set, out of the stream
    assert r.zcard("tasks:retry:normal") == 1
    assert r.xpending("tasks:normal", "taskq")["pending"] == 0 and r.xlen("tasks:normal") == 0


def test_drain_waits_for_retries_when_asked(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app(retry_backoff_ms=50, retry_jitter=False)

    @app.task(name="flaky", max_retries=3)
    def flaky() -> None:
        job = current_job()
        assert job is not None
        if job.attempt < 3:
            raise Retry(countdown=0.1)

    @app.task(name="hopeless", max_retries=2)
    def hopeless() -> None:
        raise ConnectionError("down")

    flaky.delay()
    hopeless.delay()
    result = drain(app, wait_for_retries=True)

    assert [o.kind for o in result.of_task("flaky")] == ["retry", "retry", "ok"]
    assert [o.attempt for o in result.of_task("flaky")] == [1, 2, 3]
    assert [o.kind for o in result.of_task("hopeless")] == ["retry", "retry", "dead"]
    assert (result.ok, result.retried, result.dead) == (1, 4, 1)
    assert r.xlen("tasks:deadletter") == 1
    assert r.zcard("tasks:retry:normal") == 0


def test_drain_runs_a_retry_that_comes_due_while_it_decides_whether_to_stop(
    make_app: Callable[..., App], r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(retry_backoff_ms=10, retry_jitter=False)

    @app.task(name="flaky_once")
    def flaky_once() -> None:
        job = current_job()
        assert job is not None
        if job.attempt == 1:
            raise Retry(countdown=0.01)

    def retry_is_due() -> bool:
        parked = r.zrange(RETRY, 0, -1, withscores=True)
        return bool(parked) and all(due <= now_ms(r) for _, due in parked)

    def slow_burst(*args: Any) -> None:
        # a slow machine: the retry this burst parked is due before drain looks again
        burst(*args)
        bursts.append(len(bursts) + 1)
        if bursts == [1]:  # the burst that ran the first attempt and parked the retry
            wait_until(retry_is_due, message="the retry to come due")

    burst, bursts = testing._burst, list[int]()
    monkeypatch.setattr(testing, "_burst", slow_burst)
    flaky_once.delay()

    result = drain(app, wait_for_retries=True)

    assert [o.kind for o in result.outcomes] == ["retry", "ok"]
    assert r.zcard(RETRY) == 0 and r.xlen("tasks:normal") == 0


def test_drain_waits_for_delayed_jobs_only_when_asked(make_app: Callable[..., App]) -> None:
    app = make_app()
    ran: list[int] = []

    @app.task(name="later")
    def later(n: int) -> None:
        ran.append(n)

    later.apply_async((1,), countdown=0.3)
    assert drain(app).runs == 0

    result = drain(app, wait_for_retries=True)
    assert result.ok == 1 and ran == [1]


def test_drain_stops_after_max_jobs(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()

    @app.task(name="count")
    def count(n: int) -> None:
        pass

    count.map(range(5))
    first = drain(app, max_jobs=2)
    assert first.runs == 2
    assert r.xlen("tasks:normal") == 3

    rest = drain(app)
    assert [o.msg.args[0] for o in rest.outcomes if o.msg] == [2, 3, 4]


def test_drain_times_out_between_jobs(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(name="slow")
    def slow() -> None:
        time.sleep(0.2)

    for _ in range(10):
        slow.delay()
    with pytest.raises(DrainTimeout) as caught:
        drain(app, timeout_s=0.3)
    assert 1 <= caught.value.result.runs < 10


def test_drain_times_out_at_once_when_a_retry_is_due_after_the_deadline(
    make_app: Callable[..., App],
) -> None:
    app = make_app(retry_backoff_ms=60_000)

    @app.task(name="fails")
    def fails() -> None:
        raise RuntimeError("boom")

    fails.delay()
    started = time.monotonic()
    with pytest.raises(DrainTimeout, match="due in"):
        drain(app, wait_for_retries=True, timeout_s=5)
    assert time.monotonic() - started < 4
    assert app.middleware == []  # the helper's recorder is gone


def test_drain_dead_letters_a_job_of_an_unknown_task(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    app.enqueue(Message("nobody.registered.this"))

    result = drain(app)

    assert result.dead == 1
    assert "nobody.registered.this" in result.outcomes[0].error
    assert r.xlen("tasks:deadletter") == 1


def test_drain_reads_the_queues_it_is_given(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(name="mail", queue="mail")
    def mail() -> None:
        pass

    mail.delay()
    assert drain(app).runs == 0  # the app's default queue is "tasks"
    assert drain(app, queues=["mail"]).ok == 1


def test_drain_rejects_a_job_limit_below_one(make_app: Callable[..., App]) -> None:
    with pytest.raises(ValueError):
        drain(make_app(), max_jobs=0)
