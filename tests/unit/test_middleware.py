"""Middleware: hooks run in order; a failing hook is logged with its name and the rest run."""

from __future__ import annotations

import logging

import pytest

from taskq import Middleware
from taskq.middleware import emit


class Recorder(Middleware):
    def __init__(self, name: str, seen: list[str], *, fail: bool = False) -> None:
        self.name, self.seen, self.fail = name, seen, fail

    def worker_start(self, queues: object) -> None:
        self.seen.append(f"{self.name}:start:{queues}")
        if self.fail:
            raise RuntimeError("hook broke")


def test_hooks_run_in_the_order_they_were_added() -> None:
    seen: list[str] = []
    emit([Recorder("a", seen), Recorder("b", seen)], "worker_start", ("tasks",))
    assert seen == ["a:start:('tasks',)", "b:start:('tasks',)"]


def test_a_failing_hook_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []
    with caplog.at_level(logging.ERROR, logger="taskq.middleware"):
        emit([Recorder("a", seen, fail=True), Recorder("b", seen)], "worker_start", ())
    assert seen == ["a:start:()", "b:start:()"]
    [record] = caplog.records
    assert "Recorder.worker_start failed" in record.getMessage() and record.exc_info


def test_the_base_class_hooks_do_nothing() -> None:
    m = Middleware()
    for hook in ("worker_start", "child_start", "child_stop", "worker_stop"):
        emit([m], hook, *(((),) if hook == "worker_start" else ()))
