"""Processes: CPU pinning, starting a worker in its own session, its tree's CPU and RSS, and
stopping it (built on /proc: Linux only, no psutil)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Collection
from functools import partial
from pathlib import Path

from bench.common import envs

CLK_TCK = os.sysconf("SC_CLK_TCK")
ALL_CPUS = frozenset(os.sched_getaffinity(0))  # taken at import, before any pinning
STALL_S = 30.0  # a drain with no new job for this long has failed


class BenchError(RuntimeError):
    """A phase could not complete (worker died, deadline passed, ...)."""


def pin_self(cpu: int) -> None:
    """Run this process on ``cpu`` only (no-op when ``cpu`` < 0)."""
    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def unpin_self() -> None:
    """Let this process run on every CPU again (e.g. in a worker being spawned)."""
    os.sched_setaffinity(0, ALL_CPUS)


def confine_self(cpus: Collection[int]) -> None:
    """Run this process on ``cpus`` only; processes it forks or execs afterwards inherit it."""
    os.sched_setaffinity(0, cpus)


def parse_cpus(text: str) -> frozenset[int]:
    """CPUs of a comma list such as ``"0,2"`` (empty: none)."""
    return frozenset(int(c) for c in text.split(",") if c.strip())


def format_cpus(cpus: Collection[int]) -> str:
    """The comma list :func:`parse_cpus` reads."""
    return ",".join(str(c) for c in sorted(cpus))


def tree_affinity(pid: int) -> frozenset[int]:
    """Every CPU that some live thread of ``pid`` or of its descendants may run on."""
    cpus: set[int] = set()
    for p in [pid, *descendants(pid)]:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):  # the thread has exited
                cpus |= os.sched_getaffinity(int(tid))
    return frozenset(cpus)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0])."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (children first, breadth-first)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        out.append(child)
        queue.extend(children.get(child, []))
    return out


def rss_kb(pid: int) -> int | None:
    """Resident set size of ``pid`` in KiB (VmRSS), None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _cpu_ns(pid: int) -> int:
    """CPU time (ns) of every live thread of ``pid``, from schedstat.

    Falls back to utime+stime clock ticks where schedstat is missing.
    """
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            return sum(int(x) for x in fields[11:13]) * 10**9 // CLK_TCK if fields else 0
    return total


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its live descendants' threads."""
    return sum(_cpu_ns(p) for p in [pid, *descendants(pid)]) / 1e9


def _alive_in_session(pid: int, sid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) member of session ``sid``."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z" and int(fields[3]) == sid


def _signal(pids: list[int], sid: int, sig: int) -> None:
    """Send ``sig`` to the live members of session ``sid`` among ``pids``."""
    for pid in pids:
        if _alive_in_session(pid, sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def stop_tree(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the worker's session, then SIGKILL whatever is left.

    The worker must have been started with ``start_new_session=True`` so that
    its pid is also its process-group and session id.
    """
    sid = proc.pid
    tree = [sid, *descendants(sid)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive_in_session(p, sid) for p in tree):
        time.sleep(0.05)
    _signal(tree, sid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def start_worker(
    argv: list[str], log_path: str, cpus: Collection[int] = ()
) -> tuple[subprocess.Popen[bytes], int]:
    """Spawn the worker CLI in its own session; returns it and the time just before.

    The worker may use every CPU, or only ``cpus`` when given: the affinity is set in
    the child before ``exec``, so the processes and threads it starts inherit it.
    """
    with open(log_path, "ab") as log:
        t_start = time.time_ns()
        worker = subprocess.Popen(
            argv,
            cwd=envs.REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=partial(confine_self, cpus) if cpus else unpin_self,
        )
    return worker, t_start
