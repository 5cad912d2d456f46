"""The environment the pytest plugin's worker process gets: its settings as TASKQ_* variables
that Settings.from_env reads back, and this process's import path."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from taskq.config import Settings
from taskq.contrib.worker_process import child_env


def test_settings_reach_the_worker_as_variables_it_reads_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("TASKQ_")]:
        monkeypatch.delenv(name)
    settings: dict[str, Any] = {
        "redis_url": "redis://127.0.0.1:1/0",
        "eager": True,
        "retry_jitter": False,
        "block_ms": 100,
        "retry_backoff_factor": 1.5,
        "queue": "mail",
        "signing_keys": ("new", "old"),
    }

    env = child_env(settings)

    assert (env["TASKQ_EAGER"], env["TASKQ_RETRY_JITTER"]) == ("1", "0")
    assert env["TASKQ_SIGNING_KEYS"] == "new,old"
    read = Settings.from_env(env)
    assert {name: getattr(read, name) for name in settings} == settings


def test_the_worker_imports_from_this_process_path() -> None:
    env = child_env({})

    here = [p for p in sys.path if p]
    assert env["PYTHONPATH"].split(os.pathsep)[: len(here)] == here
    assert env["PYTHONUNBUFFERED"] == "1"
