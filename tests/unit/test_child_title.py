"""A child's process title is set only when it changes (each set is a system call)."""

from __future__ import annotations

import pytest

from taskq.worker import lifeline
from taskq.worker.lifeline import ChildTitle


def test_a_title_is_set_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[str] = []
    monkeypatch.setattr(lifeline.setproctitle, "setproctitle", shown.append)
    title = ChildTitle("taskq: child 1/2 [tasks]")
    for state in ("idle", "running app.a", "running app.a", "running app.b", "idle", "idle"):
        title(state)
    assert shown == [
        "taskq: child 1/2 [tasks] idle",
        "taskq: child 1/2 [tasks] running app.a",
        "taskq: child 1/2 [tasks] running app.b",
        "taskq: child 1/2 [tasks] idle",
    ]
