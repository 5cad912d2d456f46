"""Redis time per job, from ``INFO commandstats`` deltas.

:class:`Window` brackets one phase (an enqueue loop, a drain): ``CONFIG
RESETSTAT`` at the start, ``INFO commandstats cpu`` at the end, so the rows are
exactly the commands run during the phase (``usec`` is the time Redis spent
executing them, without network I/O). The bench's own ``RESETSTAT`` row is
dropped, and the benchmark task's ``INCR`` of :data:`bench.common.job.COUNTER` is
taken out of the ``incr`` row (the counter says how many there were) and
reported on its own: it is the job's work, not the queue's.

Redis counts a command that a Lua script or a ``MULTI``/``EXEC`` block runs
twice: under its own name, and inside the ``usec`` of the ``evalsha`` (or
``exec``) row that ran it. Summing every row would count that time twice. The
rows alone cannot tell a top-level ``XREADGROUP`` from one run by a script, so
:class:`CommandLog` (``MONITOR``, in an untimed accounting pass of the same
configuration) counts, per command, the calls made at top level, inside
scripts and inside ``MULTI``/``EXEC``. :func:`cost` takes those shares out of
each command's row: queue time = script and ``EXEC`` rows (which include what
they ran) + the top-level share of every other row.

Runs in every bench venv: stdlib and redis-py only.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from typing import Any, cast

from bench.common.job import COUNTER, counter_client

SCRIPTS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
CONTAINERS = SCRIPTS | {"exec"}
MARK = "bench-mark:"  # ECHO argument that starts a segment of the accounting pass
PLACES = ("top", "script", "exec")  # where a command ran, in CommandLog tallies

Rows = dict[str, dict[str, int]]  # command -> {"calls": n, "usec": n}
Tally = dict[str, dict[str, int]]  # base command -> {"top": n, "script": n, "exec": n}


def _cpu_s(info: dict[str, Any]) -> float:
    """CPU seconds of Redis's main thread (the one that runs commands)."""
    if "used_cpu_user_main_thread" in info:
        return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _rows(info: dict[str, Any]) -> Rows:
    prefix = "cmdstat_"
    return {
        key[len(prefix) :]: {"calls": int(v["calls"]), "usec": int(v["usec"])}
        for key, v in info.items()
        if key.startswith(prefix)
    }


def _take(rows: Rows, name: str, calls: int) -> dict[str, int]:
    """Remove ``calls`` calls (and their mean time) from ``rows[name]``; return them."""
    row = rows.get(name)
    if row is None or calls <= 0:
        return {"calls": 0, "usec": 0}
    calls = min(calls, row["calls"])
    usec = round(row["usec"] * calls / row["calls"]) if row["calls"] else 0
    row["calls"] -= calls
    row["usec"] -= usec
    if row["calls"] == 0:
        del rows[name]
    return {"calls": calls, "usec": usec}


class Window:
    """Commandstats and Redis CPU over one phase. Resets Redis's command statistics."""

    def __init__(self, url: str) -> None:
        self.client = counter_client(url)
        self._count0 = 0
        self._cpu0 = 0.0

    def start(self) -> None:
        """Zero the command statistics (in one round trip, before anything else runs)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(COUNTER)
        pipe.info("cpu")
        pipe.config_resetstat()
        count, cpu, _ = pipe.execute()
        self._count0 = int(count or 0)
        self._cpu0 = _cpu_s(cpu)

    def stop(self, jobs: int) -> dict[str, Any]:
        """The phase's rows, the task's INCRs apart, and Redis CPU time, for ``jobs`` jobs."""
        info = cast(dict[str, Any], self.client.info("commandstats", "cpu"))
        count = int(cast(bytes | None, self.client.get(COUNTER)) or 0)
        rows = _rows(info)
        rows.pop("config|resetstat", None)
        return {
            "jobs": jobs,
            "commands": rows,
            "task_incr": _take(rows, "incr", count - self._count0),
            "cpu_us": 1e6 * (_cpu_s(info) - self._cpu0),
        }


# MONITOR line: 1796117445.734823 [0 127.0.0.1:43374] "XADD" "key" ...  ([0 lua] inside scripts)
_LINE = re.compile(
    r'^\S+ \[\d+ (?P<client>[^\]]+)\] "(?P<cmd>[^"]+)"(?: "(?P<arg>(?:[^"\\]|\\.)*)")?'
)


class CommandLog:
    """``MONITOR``: where each command runs (top level, in a script, in MULTI/EXEC).

    Slows Redis down, so it is only used in the untimed accounting pass. The feed
    is read at the end (Redis buffers it), split into segments by :meth:`mark`.
    """

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.client = counter_client(url)
        feed = counter_client(url, socket_timeout=timeout_s)
        self._monitor = feed.connection_pool.make_connection()
        self._monitor.send_command("MONITOR")
        self._monitor.read_response()

    def mark(self, segment: str) -> None:
        """Start segment ``segment``: what follows is counted under that name."""
        self.client.echo(MARK + segment)

    def collect(self) -> dict[str, Tally]:
        """Read the feed up to now; per segment, per command, the calls in each place.

        Raises redis's TimeoutError if the feed stops before the final mark.
        """
        end = f"end-{id(self)}"
        self.mark(end)
        lines = []
        while True:
            line = self._monitor.read_response()
            text = line.decode(errors="replace") if isinstance(line, bytes) else str(line)
            if f'"{MARK}{end}"' in text:
                break
            lines.append(text)
        self._monitor.disconnect()
        return tally(lines)


def tally(lines: Sequence[str]) -> dict[str, Tally]:
    """Count MONITOR lines per segment and command: at top level, in scripts, in MULTI/EXEC."""
    segments: dict[str, Tally] = {}
    current = segments.setdefault("start", {})
    in_multi: set[str] = set()
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        client, cmd, arg = m["client"], m["cmd"].lower(), m["arg"] or ""
        if cmd == "echo" and arg.startswith(MARK):
            current = segments.setdefault(arg[len(MARK) :], {})
            continue
        if cmd == "incr" and arg == COUNTER:
            continue  # the benchmark task's own call
        if client == "lua":
            place = "script"
        elif client in in_multi and cmd not in ("exec", "discard"):
            place = "exec"
        else:
            place = "top"
            if cmd == "multi":
                in_multi.add(client)
            elif cmd in ("exec", "discard"):
                in_multi.discard(client)
        counts = current.setdefault(cmd, dict.fromkeys(PLACES, 0))
        counts[place] += 1
    return segments


# ------------------------------------------------------------------ cost per job


def _inner_shares(name: str, accounting: Tally | None) -> tuple[float, float]:
    """Fractions of ``name``'s calls that ran inside scripts and inside MULTI/EXEC."""
    if name in CONTAINERS or not accounting:
        return 0.0, 0.0
    counts = accounting.get(name.split("|", 1)[0])
    total = sum(counts.values()) if counts else 0
    if not counts or not total:
        return 0.0, 0.0
    return counts["script"] / total, counts["exec"] / total


def cost(window: dict[str, Any], accounting: Tally | None) -> dict[str, Any]:
    """Queue-side Redis µs per job of one window, with nothing counted twice.

    ``accounting`` is the same phase's :class:`CommandLog` tally. Without it, a
    window that has script or EXEC rows is summed as is: an upper bound.
    """
    jobs = max(1, int(window["jobs"]))
    rows: Rows = window["commands"]
    top: dict[str, float] = {}
    in_scripts: dict[str, float] = {}
    in_exec: dict[str, float] = {}
    for name, row in rows.items():
        f_script, f_exec = _inner_shares(name, accounting)
        per_job = row["usec"] / jobs
        top[name] = per_job * (1 - f_script - f_exec)
        in_scripts[name] = per_job * f_script
        in_exec[name] = per_job * f_exec
    nested = any(n in CONTAINERS for n in rows)
    total = sum(top.values())
    return {
        "us_per_job": total,
        "per_core": 1e6 / total if total > 0 else None,
        "script_us": sum(v for n, v in top.items() if n in SCRIPTS),
        "inside_scripts_us": sum(in_scripts.values()),
        "exec_us": top.get("exec", 0.0),
        "inside_exec_us": sum(in_exec.values()),
        "split": "monitor" if nested and accounting else "upper bound" if nested else "exact",
        "top_us": _positive(top),
        "in_scripts_us": _positive(in_scripts),
        "in_exec_us": _positive(in_exec),
        "calls_per_job": {n: row["calls"] / jobs for n, row in rows.items()},
        "task_incr_us": window["task_incr"]["usec"] / jobs,
        "cpu_us": window["cpu_us"] / jobs,
    }


def _positive(values: dict[str, float]) -> dict[str, float]:
    return {n: v for n, v in sorted(values.items(), key=lambda kv: -kv[1]) if v > 0}


def median_cost(costs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Element-wise median of :func:`cost` results over runs (None if there are none)."""
    if not costs:
        return None
    out: dict[str, Any] = {}
    for key, first in costs[0].items():
        if isinstance(first, dict):
            names = sorted({n for c in costs for n in c[key]})
            medians = {n: statistics.median([c[key].get(n, 0.0) for c in costs]) for n in names}
            out[key] = _positive(medians)
        elif isinstance(first, str):
            out[key] = first if all(c[key] == first for c in costs) else "mixed"
        else:
            values = [c[key] for c in costs if c[key] is not None]
            out[key] = statistics.median(values) if values else None
    us = out["us_per_job"]
    out["per_core"] = 1e6 / us if us else None
    return out
