"""The App's typed surface: settings, task options with units, the current app."""

from __future__ import annotations

import dataclasses
import typing

import pytest

import taskq
from taskq import App, ConfigError, Settings
from taskq.config import SettingsArgs


def test_settings_can_be_given_whole_or_as_keywords() -> None:
    base = Settings(queue="reports", max_retries=7)
    app = App(settings=base, visibility_timeout_ms=60_000)
    assert (app.settings.queue, app.settings.max_retries) == ("reports", 7)
    assert app.settings.visibility_timeout_ms == 60_000
    assert App(settings=base).settings is base
    with pytest.raises(ConfigError, match="unknown setting"):
        App(no_such_setting=1)  # type: ignore[call-arg]


def test_the_keyword_settings_type_lists_every_setting() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)} - {"redis_url", "queue"}
    assert set(typing.get_type_hints(SettingsArgs)) == fields


def test_old_option_spellings_work_with_a_deprecation_warning() -> None:
    app = App("redis://127.0.0.1:1/0")
    with pytest.warns(
        DeprecationWarning, match="deprecated: use '(time_limit_s|retry_backoff_ms)'"
    ):

        @app.task(time_limit=5, retry_backoff=200)  # type: ignore[call-overload]
        def old() -> None: ...

    assert (old.options.time_limit_s, old.options.retry_backoff_ms) == (5, 200)


def test_shared_tasks_need_a_current_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taskq.current, "_current", None)

    @taskq.task(name="unit.shared")
    def shared() -> None: ...

    with pytest.raises(ConfigError, match="no current app"):
        shared.app  # noqa: B018
    app = App("redis://127.0.0.1:1/0").set_current()
    assert shared.app is app and taskq.current_app() is app


def test_repr_hides_the_password() -> None:
    app = App("redis://user:s3cret@localhost:6379/0")
    assert "s3cret" not in repr(app) and "***" in repr(app)
