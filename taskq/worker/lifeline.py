"""A child dies with its master: nobody else renews the leases of the jobs it runs.

The master renews its children's leases. A child whose master is gone (SIGKILL of the master
alone, as supervisord sends by default, or an OOM kill) would keep running a job whose lease
then runs out, and another worker would run the same job at the same time. So the child is
killed the moment its master goes: on Linux the kernel does it (``PR_SET_PDEATHSIG``); on
other systems a watchdog thread in the child checks its parent every ``POLL_S``. The job it
was running stays pending and is recovered by the sweep, counting as a failed attempt, like
the job of any worker that crashed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


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
