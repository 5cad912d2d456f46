"""The scoreboard: what a child writes, what its master reads, and the slot lock."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from taskq.worker.scoreboard import Scoreboard
from tests.conftest import wait_until


def test_a_job_started_before_the_master_records_the_pid_stays_visible() -> None:
    """The master once zeroed the slot after the fork, so a child that had
    already started its first job lost it (not counted if it died, no time limit)."""
    board = Scoreboard(1)
    board.prepare(0)  # before the fork
    board.slot(0).start(2, "1-0", "t", "job", 5.0)  # the child is quicker than its master
    board.set_pid(0, 1234)  # the master, after the fork
    view = board.read(0)
    assert view.busy and view.pid == 1234 and view.oldest is not None
    assert (view.oldest.entry_id, view.oldest.stream_index) == ("1-0", 2)


def test_deadlines_are_monotonic_and_names_are_cut_at_a_character() -> None:
    board = Scoreboard(1)
    slot = board.slot(0)
    slot.start(0, "1-0", "ж" * 200, "j" * 100, 2.0)
    [job] = board.read(0).running
    assert abs(job.hard_deadline - (time.monotonic() + 2.0)) < 1.0
    assert abs(job.started - time.time()) < 5.0  # wall clock, for display only
    assert job.task == "ж" * 80 and len(job.job_id) == 64
    slot.finish("ok")
    idle = board.read(0)
    assert not idle.busy and idle.oldest is None and idle.processed == 1 and slot.seq == job.seq


def test_the_sequence_tells_one_job_from_the_next() -> None:
    board = Scoreboard(2)
    slot = board.slot(1)
    slot.start(0, "1-0", "t", "a", None)
    [first] = board.read(1).running
    slot.finish("retry")
    slot.start(0, "2-0", "t", "b", None)
    view = board.read(1)
    [second] = view.running
    assert second.seq == first.seq + 1 and second.hard_deadline == 0.0
    assert (view.failed, view.retried) == (1, 1)
    assert board.read(0).running == ()


def _asleep(pid: int) -> bool:
    """True while ``pid`` sleeps in the kernel (state ``S``). The child below can wait for
    nothing but the slot's lock: without the lock it would run on and exit (state ``Z``)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "S"


def test_a_child_cannot_start_a_job_while_the_master_holds_its_lock() -> None:
    """The master acts (kills for the hard limit) under the lock, so the child cannot slip
    into its next job between the master's check and the kill."""
    board = Scoreboard(1)
    board.prepare(0)
    r, w = os.pipe()
    lock = board.lock(0)
    lock.acquire()
    pid = os.fork()
    if pid == 0:  # the child: tries to start a job, which needs the lock
        board.slot(0).start(0, "2-0", "t", "next", None)
        os.write(w, b"x")
        os._exit(0)
    try:
        wait_until(lambda: _asleep(pid), message="the child to block on the lock")
        assert not board.read(0).busy
    finally:
        lock.release()
    assert os.read(r, 1) == b"x"
    os.waitpid(pid, 0)
    assert [j.job_id for j in board.read(0).running] == ["next"]
    os.close(r)
    os.close(w)


def test_a_dead_lock_holder_does_not_block_the_next_child() -> None:
    board = Scoreboard(1)
    board.prepare(0)
    pid = os.fork()
    if pid == 0:
        board.lock(0).acquire()
        os.kill(os.getpid(), signal.SIGKILL)  # dies holding the lock
    os.waitpid(pid, 0)
    assert not board.lock(0).acquire(timeout=0.05)
    board.prepare(0)  # the master gives the next child a fresh slot
    assert board.lock(0).acquire(timeout=0.05)
