"""Process-tree helpers built on /proc (Linux only, no psutil)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def _cpu_ticks(pid: int) -> int:
    """utime+stime+cutime+cstime of ``pid`` (reaped children included)."""
    fields = _stat_fields(pid)
    if not fields:
        return 0
    return sum(int(x) for x in fields[11:15])


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and all its live descendants."""
    ticks = sum(_cpu_ticks(p) for p in [pid, *descendants(pid)])
    return ticks / CLK_TCK


def _alive_in_session(pid: int, sid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) member of session ``sid``."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z" and int(fields[3]) == sid


def stop_tree(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the worker's session, then SIGKILL whatever is left.

    The worker must have been started with ``start_new_session=True`` so that
    its pid is also its process-group and session id.
    """
    sid = proc.pid
    tree = [sid, *descendants(sid)]
    if proc.poll() is None:
        try:
            os.killpg(sid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not [p for p in tree if _alive_in_session(p, sid)]:
            break
        time.sleep(0.05)
    for pid in tree:
        if _alive_in_session(pid, sid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
