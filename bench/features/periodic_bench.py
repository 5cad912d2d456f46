"""Periodic benchmark: a one-second schedule run by 3 workers at once.

Usage, from the repository root::

    .venv/bin/python bench/features/periodic_bench.py              # full: 60 s per phase, 1 run
    .venv/bin/python bench/features/periodic_bench.py --quick      # 15 s per phase
    .venv/bin/python bench/features/periodic_bench.py --seconds 120 --runs 3

Here ``--procs`` (default 3) is the number of separate ``taskq worker -Q pbench -c 1``
processes, each with its own master, so each schedules the periodic job itself; ``--runs``
defaults to 1. The app (bench/peers/taskq_periodic_app.py) declares
``app.add_periodic(beat, every=1, name="beat")``; every run of ``beat()`` RPUSHes its tick
(``current_job().scheduled_ms``), job id and start time to the Redis list ``beats``.

Two phases, each from an empty Redis: **steady**, the workers run for ``--seconds`` and are
stopped with SIGTERM; **kill**, the same, but at the midpoint one worker (the one whose child
ran the latest beat) is SIGKILLed as a whole process group, 50 ms after a tick, with
``TASKQ_VISIBILITY_TIMEOUT_MS=3000`` and ``TASKQ_SWEEP_INTERVAL_MS=500`` so that a job it held
is recovered within the run. Reported per phase: ticks from the first recorded to the last,
jobs (distinct job ids), ticks with more than one job id (duplicates, must be 0), ticks
missing in between (must be 0), re-runs of one job id, lateness (start - tick) p50, p99 and
max; and the Redis cost, from ``INFO commandstats`` over the phase: EVALSHA, EVAL and HGETALL
calls per tick and per worker-second, with a ``MONITOR`` count of the scripts behind the
EVALSHAs (``periodic.lua`` is the tick claim).

Writes the "Periodic" section of bench/results/RESULTS-features.md; bench/README.md ("Feature
benchmarks") explains it. Exit status 1 if a measurement failed, else 2 if a phase had a
duplicate or a missing tick, else 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis import Redis

from bench.common import envs
from bench.common.job import counter_client
from bench.common.procs import BenchError, start_worker, stop_tree
from bench.common.redistime import Window
from bench.common.rounds import environ
from bench.common.runner import Entry
from bench.features import family
from bench.features.agentside import AgentCtx, Params, latency_figures
from bench.features.family import Family, Size
from bench.features.periodic_report import FAST_RECOVERY, PHASES, TICK_MS, failed, render

KEY = "periodic"
KILL_AFTER_TICK_S = 0.05  # the kill lands this long after a whole second (a tick)
GRACE_S = 30.0  # bound of the SIGTERM stop
POLL_S = 0.05
COUNTED = ("evalsha", "eval", "hgetall")  # the commandstats rows reported


# ------------------------------------------------------------------ agent side


def script_names() -> dict[str, str]:
    """SHA1 of each taskq script (as it is sent to Redis) -> its name."""
    from taskq.broker.scripts import script_sha  # here: the agent runs in taskq's venv

    folder = resources.files("taskq.broker").joinpath("lua")
    names = [p.name[:-4] for p in folder.iterdir() if p.name.endswith(".lua")]
    return {script_sha(n): n for n in names if not n.startswith("_")}


_LINE = re.compile(r'^\S+ \[\d+ (?P<client>[^\]]+)\] "(?P<cmd>[^"]+)"(?: "(?P<arg>[^"]*)")?')


class ScriptLog:
    """``MONITOR`` over a phase: the top-level EVALSHA and EVAL calls, by script name."""

    MARK = "periodic-bench-end"

    def __init__(self, url: str) -> None:
        self.names = script_names()  # before the workers start (the scripts may change later)
        self.client = counter_client(url)
        feed = counter_client(url, socket_timeout=60.0)
        self._conn = feed.connection_pool.make_connection()
        self._conn.send_command("MONITOR")  # type: ignore[no-untyped-call]
        self._conn.read_response()

    def collect(self) -> dict[str, int]:
        """Calls per script up to now (``eval`` for script text sent whole)."""
        names = {**script_names(), **self.names}
        self.client.echo(self.MARK)
        counts: dict[str, int] = {}
        while True:
            raw = self._conn.read_response()
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if f'"{self.MARK}"' in line:
                break
            m = _LINE.match(line)
            if m is None or m["client"] == "lua":
                continue
            cmd = m["cmd"].lower()
            if cmd == "evalsha":
                name = names.get(m["arg"] or "", f"sha {(m['arg'] or '?')[:8]}")
                counts[name] = counts.get(name, 0) + 1
            elif cmd == "eval":
                counts["eval"] = counts.get("eval", 0) + 1
        self._conn.disconnect()  # type: ignore[no-untyped-call]
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def parse_beats(lines: Sequence[Any]) -> list[tuple[int, str, float, int]]:
    """The ``beats`` records: (tick ms, job id, start ms, pid)."""
    out = []
    for raw in lines:
        tick, job_id, start, pid = raw.decode().split()
        out.append((int(tick), job_id, float(start), int(pid)))
    return out


def tick_figures(beats: Sequence[tuple[int, str, float, int]]) -> Params:
    """Ticks, jobs, duplicates, gaps, re-runs and lateness of the recorded runs."""
    if not beats:
        raise BenchError("no beat ran")
    jobs: dict[str, tuple[int, float]] = {}  # job id -> (tick, first start)
    ids_of: dict[int, set[str]] = {}
    for tick, job_id, start, _ in beats:
        ids_of.setdefault(tick, set()).add(job_id)
        if job_id not in jobs or start < jobs[job_id][1]:
            jobs[job_id] = (tick, start)
    first, last = min(ids_of), max(ids_of)
    expected = (last - first) // TICK_MS + 1
    missing = [t for t in range(first, last + 1, TICK_MS) if t not in ids_of]
    lateness = latency_figures([start - tick for tick, start in jobs.values()], len(jobs))
    return {
        "first_tick_ms": first,
        "last_tick_ms": last,
        "ticks_expected": expected,
        "ticks_seen": len(ids_of),
        "jobs": len(jobs),
        "duplicates": sum(1 for ids in ids_of.values() if len(ids) > 1),
        "missing": len(missing),
        "missing_ticks_ms": missing[:20],
        "off_grid": sum(1 for t in ids_of if t % TICK_MS),
        "reruns": len(beats) - len(jobs),
        "lateness_p50_ms": lateness["p50_ms"],
        "lateness_p99_ms": lateness["p99_ms"],
        "lateness_max_ms": lateness["max_ms"],
        "runs_per_pid": _count(pid for *_, pid in beats),
    }


def _count(values: Iterator[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def redis_cost(window: Params, scripts: dict[str, int], jobs: int, worker_s: float) -> Params:
    """Calls of EVALSHA / EVAL / HGETALL in the phase, per tick and per worker-second."""
    rows = window["commands"]
    out: Params = {"worker_seconds": worker_s, "scripts": scripts}
    for name in COUNTED:
        calls = rows.get(name, {}).get("calls", 0)
        out[name] = calls
        out[f"{name}_per_tick"] = calls / jobs if jobs else None
        out[f"{name}_per_worker_s"] = calls / worker_s if worker_s else None
    claims = scripts.get("periodic", 0)
    out["claims"] = claims
    out["claims_per_tick"] = claims / jobs if jobs else None
    other = sum(scripts.values()) - claims
    out["other_scripts_per_worker_s"] = other / worker_s if worker_s else None
    return out


def stored_state(r: Redis, queue: str, name: str) -> Params:
    """The schedule's stored value ``<last tick ms>|<definition>``."""
    raw = r.hget(f"{queue}:periodic", name)
    text = raw.decode() if isinstance(raw, bytes) else ""
    last, _, definition = text.partition("|")
    return {"raw": text, "last_tick_ms": int(last) if last.isdigit() else None, "def": definition}


def session_of(pid: int) -> int | None:
    """The session (worker) a process belongs to, None if it is gone."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


class Phase:
    """One phase's worker processes: spawned, maybe one killed, stopped with SIGTERM."""

    def __init__(self, ctx: AgentCtx, argvs: Sequence[Sequence[str]], tag: str) -> None:
        self.ctx, self.argvs, self.tag = ctx, argvs, tag
        self.procs: list[subprocess.Popen[bytes]] = []
        self.spawned: list[float] = []  # time.time() just before each spawn
        self.ended: dict[int, float] = {}  # index -> time.time() of its kill or stop signal
        self.killed: Params | None = None

    def start(self) -> None:
        for k, argv in enumerate(self.argvs):
            log = str(self.ctx.workdir / f"{self.tag}-worker-{k}.log")
            self.spawned.append(time.time())
            self.procs.append(start_worker(list(argv), log)[0])

    def check_alive(self) -> None:
        for k, proc in enumerate(self.procs):
            if k not in self.ended and proc.poll() is not None:
                raise BenchError(f"{self.tag}: worker {k} exited with status {proc.returncode}")

    def kill_one(self, r: Redis, beats_key: str, t0: float) -> None:
        """SIGKILL the process group of the worker whose child ran the latest beat."""
        last = r.lindex(beats_key, -1)
        sid = session_of(int(last.split()[3])) if isinstance(last, bytes) else None
        k = next((i for i, p in enumerate(self.procs) if p.pid == sid), 0)
        victim = self.procs[k]
        os.killpg(victim.pid, signal.SIGKILL)
        self.ended[k] = time.time()
        victim.wait(timeout=GRACE_S)
        self.killed = {
            "worker": k, "pid": victim.pid, "at_s": self.ended[k] - t0,
            "at_ms": round(self.ended[k] * 1e3), "ran_last_beat": sid == victim.pid,
        }  # fmt: skip

    def stop(self) -> float:
        """SIGTERM every live worker once (a second one would be a cold shutdown), wait."""
        now = time.time()
        live = [k for k in range(len(self.procs)) if k not in self.ended]
        for k in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.procs[k].pid, signal.SIGTERM)
            self.ended[k] = now
        bound = time.monotonic() + GRACE_S
        for k in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.procs[k].wait(timeout=max(0.0, bound - time.monotonic()))
        return time.monotonic() - (bound - GRACE_S)

    def close(self) -> None:
        for proc in self.procs:
            stop_tree(proc)

    def worker_seconds(self) -> float:
        return sum(self.ended[k] - t for k, t in enumerate(self.spawned))

    def log_errors(self) -> list[str]:
        out = []
        for k in range(len(self.procs)):
            path = self.ctx.workdir / f"{self.tag}-worker-{k}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            out += [f"worker {k}: {ln}" for ln in text.splitlines() if " ERROR " in ln]
        return out


def run_for(phase: Phase, seconds: float, kill: bool, r: Redis, beats_key: str) -> float:
    """Let the workers run ``seconds``; in the kill phase, kill one after a tick at half."""
    t0 = time.time()
    end = t0 + seconds
    kill_at = (int(t0 + seconds / 2) + 1 + KILL_AFTER_TICK_S) if kill else None
    while (now := time.time()) < end:
        wake = end if kill_at is None else min(end, kill_at)
        time.sleep(max(0.0, min(POLL_S, wake - now)))
        if kill_at is not None and time.time() >= kill_at:
            phase.kill_one(r, beats_key, t0)
            kill_at = None
        phase.check_alive()
    return time.time() - t0


def measure_phase(system: Any, ctx: AgentCtx, tag: str) -> Params:
    """One phase from an empty Redis: run, stop, read the beats and the Redis cost."""
    kill = tag == "kill"
    r = ctx.redis()
    r.flushall()
    if ctx.seconds > ctx.deadline:
        raise BenchError(f"--seconds {ctx.seconds} is over --deadline {ctx.deadline}")
    with environ(FAST_RECOVERY if kill else {}):
        phase = Phase(ctx, system.worker_argvs(ctx.procs), tag)
        monitor = ScriptLog(ctx.url)
        window = Window(ctx.url)
        window.start()
        try:
            phase.start()
            ran_s = run_for(phase, ctx.seconds, kill, r, system.beats)
            stop_s = phase.stop()
        finally:
            phase.close()
    beats = parse_beats(r.lrange(system.beats, 0, -1))
    ticks = tick_figures(beats)
    stats = window.stop(ticks["jobs"])
    cost = redis_cost(stats, monitor.collect(), ticks["jobs"], phase.worker_seconds())
    state = stored_state(r, system.queue, system.schedule)
    ctx.out["worker_argv"] = [[Path(a[0]).name, *a[1:]] for a in phase.argvs]
    return {
        "ran_s": ran_s,
        "stop_s": stop_s,
        "first_tick_after_spawn_s": ticks["first_tick_ms"] / 1e3 - phase.spawned[0],
        "env": FAST_RECOVERY if kill else {},
        "killed": phase.killed,
        "state": state,
        "state_ahead_ticks": (state["last_tick_ms"] - ticks["last_tick_ms"]) // TICK_MS
        if state["last_tick_ms"] is not None
        else None,
        "ticks": ticks,
        "redis": cost,
        "log_errors": phase.log_errors()[:10],
    }


def agent(system: Any, ctx: AgentCtx) -> Params:
    """Both phases, in taskq's venv; scalar figures for the progress line."""
    phases = {tag: measure_phase(system, ctx, tag) for tag in PHASES}
    figures: Params = {}
    for tag, p in phases.items():
        t = p["ticks"]
        figures |= {
            f"{tag}_jobs": t["jobs"], f"{tag}_dup": t["duplicates"],
            f"{tag}_missing": t["missing"], f"{tag}_p99_ms": t["lateness_p99_ms"],
        }  # fmt: skip
    return {"figures": figures, "phases": phases}


ENTRIES = {
    e.name: e
    for e in [Entry("taskq", "taskq_periodic_app", envs.PROJECT_VENV, "taskq", is_taskq=True)]
}


FAMILY = Family(
    key=KEY,
    title="Periodic",
    module="bench.features.periodic_bench",
    attr="PERIODIC",
    systems=list(ENTRIES.values()),
    sizes=[Size("seconds", 60, 15, "run time of each phase, s")],
    agent=agent,
    render=render,
    raws=(),
    failed=failed,
)


def with_defaults(argv: Sequence[str]) -> list[str]:
    """This family's own defaults of the shared options: 1 run, 3 worker processes."""
    if argv and argv[0] in ("agent", "raw", "probe"):
        return list(argv)
    given = {a.split("=", 1)[0] for a in argv}
    extra = [*(["--runs", "1"] if "--runs" not in given else []),
             *(["--procs", "3"] if "--procs" not in given else [])]  # fmt: skip
    return [*extra, *argv]


if __name__ == "__main__":
    sys.exit(family.main(FAMILY, with_defaults(sys.argv[1:])))
