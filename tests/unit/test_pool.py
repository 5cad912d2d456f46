"""The supervisor's decisions, without Redis: time limits, respawn backoff, exit causes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from taskq import App
from taskq.worker.pool import Pool, PoolOptions, _Child, _describe, signal_name
from taskq.worker.reclaim import Backoff
from taskq.worker.slotview import SlotView

app = App("redis://127.0.0.1:1/0", queue="unit")


def sleeper() -> int:
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    return pid


def test_the_hard_limit_does_not_kill_a_child_that_moved_on_to_its_next_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The master once read the slot, then killed in a separate step while
    the child may have started another job. The kill now happens under the slot's lock,
    only if the slot still shows the job that ran over."""
    pool = Pool(app, PoolOptions(concurrency=1))
    pid = sleeper()
    try:
        pool.children[0] = _Child(0, pid, "c", time.monotonic())
        slot = pool.scoreboard.slot(0)
        slot.start(0, "1-0", "t", "over", 0.001)
        time.sleep(0.01)
        stale = pool.scoreboard.read(0)
        slot.finish("ok")
        slot.start(0, "2-0", "t", "next", 60.0)  # the child moved on
        reads = iter([stale])
        real_read = pool.scoreboard.read
        monkeypatch.setattr(pool.scoreboard, "read", lambda i: next(reads, None) or real_read(i))
        pool._watch_busy_children()
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # still alive
        assert pool.children[0].killed_for == ""
        # When the slot still shows the job that ran over, it is killed.
        slot.finish("ok")
        slot.start(0, "3-0", "t", "over again", 0.001)
        time.sleep(0.01)
        pool._watch_busy_children()
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert pool.children[0].killed_for == "hard time limit exceeded"
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_respawn_backoff_doubles_and_is_capped_for_any_number_of_failures() -> None:
    backoff = Backoff()
    delays = []
    for _ in range(2000):  # far past where 2.0 ** n overflows a float
        backoff.failed()
        delays.append(backoff.not_before - time.monotonic())
    assert 0.4 < delays[0] <= 0.5 and 0.9 < delays[1] <= 1.0
    assert all(29.0 < d <= 30.0 for d in delays[7:])


def test_exit_causes_name_any_signal() -> None:
    """Signal 40 (real-time) has no ``signal.Signals`` member."""
    assert signal_name(signal.SIGKILL) == "SIGKILL"
    assert signal_name(40) == "signal 40"
    killed_by_40 = 40  # a wait status: terminated by signal 40, no core
    assert _describe(killed_by_40, "") == "killed by signal 40"
    assert _describe(0, "") == "exited with code 0"
    assert _describe(0, "hard time limit exceeded") == "hard time limit exceeded"


def test_slot_view_is_busy_only_while_a_job_runs() -> None:
    view = SlotView(1, 0, 0, 0, 0)
    assert not view.busy and view.oldest is None
