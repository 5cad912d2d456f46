"""taskq.contrib.django without a configured Django: settings, task classes, import costs.

Importing the package imports Django's modules but sets nothing up (no ``django.setup()``,
no settings read), so these tests leave no global state behind.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from taskq import ConfigError, Settings
from taskq.contrib.django import DjangoApp, DjangoTask, taskq_settings
from taskq.options import TaskOptions
from taskq.registry import SHARED
from tests.conftest import ROOT


def test_settings_taskq_wins_over_the_environment_which_fills_in_the_rest() -> None:
    env = {"TASKQ_QUEUE": "from-env", "TASKQ_MAX_RETRIES": "7", "REDIS_URL": "redis://env:1/0"}

    s = taskq_settings({"queue": "from-settings", "STORE_RESULTS": True}, env)

    assert (s.queue, s.store_results) == ("from-settings", True)  # names in either case
    assert (s.max_retries, s.redis_url) == (7, "redis://env:1/0")  # the rest from env
    assert s.retry_backoff_ms == Settings().retry_backoff_ms  # then the defaults


def test_a_none_in_settings_taskq_leaves_the_setting_to_the_environment() -> None:
    assert taskq_settings({"queue": None}, {"TASKQ_QUEUE": "env"}).queue == "env"
    assert taskq_settings(None, {}).queue == Settings().queue


def test_settings_taskq_refuses_unknown_names_and_non_mappings() -> None:
    with pytest.raises(ConfigError, match=r"settings\.TASKQ: unknown setting\(s\) concurency"):
        taskq_settings({"concurency": 4}, {})
    with pytest.raises(ConfigError, match=r"settings\.TASKQ must be a dict, not list"):
        taskq_settings([("queue", "q")], {})


def test_an_unknown_on_commit_option_is_refused_at_the_call_not_at_the_commit() -> None:
    t: DjangoTask[[int], int] = DjangoTask(abs, name="t", options=TaskOptions(), app=None)
    with pytest.raises(ConfigError, match="unknown apply_async option"):
        t.apply_async_on_commit((1,), countdwn=5)  # type: ignore[call-arg]


def test_the_django_app_and_the_shared_decorator_make_django_tasks() -> None:
    from taskq.contrib.django import task

    app = DjangoApp("redis://localhost:1/0")

    @app.task(priority="high")
    def own(x: int) -> int:
        return x

    @task
    def shared(x: int) -> int:
        return x

    try:
        assert isinstance(own, DjangoTask) and own.options.priority == "high"
        assert isinstance(shared, DjangoTask) and SHARED.tasks[shared.name] is shared
        assert own(2) == 2 and shared(3) == 3  # still plain tasks otherwise
    finally:
        del SHARED.tasks[shared.name]


def test_importing_taskq_does_not_import_django() -> None:
    code = (
        "import sys, taskq, taskq.contrib, taskq.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
