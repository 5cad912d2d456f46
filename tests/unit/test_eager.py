"""Eager mode for application tests: tasks run inline at enqueue time and Redis is never used."""

from __future__ import annotations

import pytest

from taskq import App, ConfigError, EnqueueError, Retry, current_job
from taskq.testing import eager, override

NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens there: any Redis call would fail


def test_eager_context_runs_tasks_inline_and_restores_the_settings() -> None:
    app = App(NO_REDIS)
    calls: list[tuple[int, int]] = []

    @app.task(name="add")
    def add(x: int, y: int) -> None:
        job = current_job()
        assert job is not None
        calls.append((x + y, job.attempt))

    with eager(app):
        job = add.delay(2, 3)
        add.apply_async((1, 1), countdown=60, priority="high")

    assert calls == [(5, 1), (2, 1)]
    assert job.task == "add" and job.entry_id is None
    assert app.settings.eager is False


def test_eager_exceptions_reach_the_caller() -> None:
    app = App(NO_REDIS)

    @app.task(name="boom")
    def boom() -> None:
        raise RuntimeError("boom")

    @app.task(name="again")
    def again() -> None:
        raise Retry(countdown=5)

    with eager(app):
        with pytest.raises(RuntimeError, match="boom"):
            boom.delay()
        with pytest.raises(Retry):
            again.delay()


def test_eager_still_refuses_arguments_that_cannot_be_sent() -> None:
    app = App(NO_REDIS)

    @app.task(name="takes")
    def takes(value: object) -> None:
        pass

    with eager(app), pytest.raises(EnqueueError, match="argument 0"):
        takes.delay(object())


def test_taskq_eager_variable_turns_eager_mode_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_EAGER", "1")
    app = App(NO_REDIS)
    ran: list[str] = []

    @app.task(name="mark")
    def mark() -> None:
        ran.append("yes")

    mark.delay()
    assert app.settings.eager is True and ran == ["yes"]


def test_override_changes_settings_inside_the_block_only() -> None:
    app = App(NO_REDIS, max_retries=1)

    with override(app, redis_url="redis://127.0.0.1:2/0", retry_backoff_ms=10) as same:
        assert same is app
        assert app.settings.redis_url == "redis://127.0.0.1:2/0"
        assert (app.settings.retry_backoff_ms, app.settings.max_retries) == (10, 1)

    assert app.settings.redis_url == NO_REDIS and app.settings.retry_backoff_ms == 1_000


def test_override_refuses_unknown_or_invalid_settings() -> None:
    app = App(NO_REDIS)
    with pytest.raises(ConfigError, match="unknown setting"), override(app, retries=3):
        pass
    with pytest.raises(ConfigError), override(app, queue="a:b"):
        pass
    assert app.settings.queue == "tasks"
