"""Child processes: they die with their master, how a child's end is told, and its title.

A child dies with its master: nobody else renews the leases of the jobs it runs.

The master renews its children's leases. A child whose master is gone (SIGKILL of the master
alone, as supervisord sends by default, or an OOM kill) would keep running a job whose lease
then runs out, and another worker would run the same job at the same time. So the child is
killed the moment its master goes: on Linux the kernel does it (``PR_SET_PDEATHSIG``); on
other systems a watchdog thread in the child checks its parent every ``POLL_S``. The job it
was running stays pending and is recovered by the sweep, counting as a failed attempt, like
the job of any worker that crashed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

import setproctitle

PR_SET_PDEATHSIG = 1
POLL_S = 0.5
CANCEL_SIGNAL = signal.SIGUSR1
"""The master tells a child to stop its running job (cancelled with ``terminate=True``)."""


def die_with_parent(parent_pid: int) -> None:
    """Arrange for this process to be SIGKILLed when ``parent_pid`` exits.

    Call it first thing in a forked child. If the parent is already gone (it died between
    the fork and this call), the child is killed at once.
    """
    if not (sys.platform.startswith("linux") and _set_pdeathsig(signal.SIGKILL)):
        watch_parent(parent_pid)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(parent_pid: int, poll_s: float = POLL_S) -> threading.Thread:
    """The portable fallback: a daemon thread that kills this process once its parent changes."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="taskq-lifeline", daemon=True)
    thread.start()
    return thread


def _set_pdeathsig(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the running program's symbols: libc's
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def kill(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` if it still exists."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def describe_exit(status: int) -> str:
    """A wait status in words: ``killed by SIGKILL``, ``exited with code 1``."""
    if os.WIFSIGNALED(status):
        return f"killed by {signal_name(os.WTERMSIG(status))}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def signal_name(signum: int) -> str:
    """``SIGKILL``, or ``signal 40`` for a number Python has no name for (real-time ones)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class ChildTitle:
    """A child's process title: its ``prefix`` and its state (``idle``, ``running <task>``),
    set only when the state changes. Setting a title is a system call; a child that ran a
    batch of no-op jobs, each titled with its own entry id, spent a few per cent of its time
    on them, where the same task in a row now costs one (bench/README.md, "Cold per-job
    work")."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.state = ""

    def __call__(self, state: str) -> None:
        if state != self.state:
            self.state = state
            setproctitle.setproctitle(f"{self.prefix} {state}")
