"""Rate-limits benchmark: a 50/s global limit on 2 workers, and what it costs the other jobs.

Usage, from the repository root::

    .venv/bin/python bench/features/limits_bench.py          # full: 20 s, 20,000 jobs, 3 runs
    .venv/bin/python bench/features/limits_bench.py --quick  # 8 s, 5,000 jobs, 1 run
    .venv/bin/python bench/features/limits_bench.py --seconds 60 --runs 5

taskq only, no peer and no raw floor. The app (bench/peers/taskq_limits_app.py) has, on queue
``lbench``, ``limited(i)`` with ``rate_limit="50/s"`` (it writes its start record,
``time.time_ns()`` at the task's start, to a per-process file, and nothing else) and the
unlimited ``noop(i)`` (the main bench's task: the record, then one ``INCR`` of
``bench:incr``). ``--procs`` (2) separate ``taskq worker -A bench.peers.taskq_limits_app:app -c
<--concurrency> --loglevel warning`` commands, each in its own session, do the work.

Each run, every part from an empty Redis:

* **rate**: ``--limited-jobs`` (2,000) ``limited`` jobs bulk-enqueued (more than the phase can
  start), then the workers are spawned and run until ``--seconds`` (20) after the first start
  (+0.3 s), then get one SIGTERM each. From the start records: the starts in the
  ``--seconds`` from the first one (expected ``50 * seconds``), the highest count in any 1 s
  window of the start stamps (exact, sliding; also any 0.98 s window, for clock slack), and
  starts per whole second from the first (p50, min, max). Pass: at most 50 in any 1 s window,
  the total within 2 % of the expected. Redis cost from ``INFO commandstats`` over the phase
  (``CONFIG RESETSTAT`` before the spawn, read after the workers exited): EVALSHA calls and
  µs per start, and the ``limit.lua`` calls among them (the ``ZSCORE`` row: only that script
  runs ``ZSCORE``, once per call, once per admitted job and once per deferral).
* **drain**, two halves in a fresh agent each, alternating which goes first from one run to
  the next: **plain**, ``--noop-jobs`` (20,000) ``noop`` jobs bulk-enqueued, drained by the
  workers, timed from just before the spawn until ``bench:incr`` reaches their number;
  **backlog**, the same, but ``--backlog-jobs`` (5,000) ``limited`` jobs are bulk-enqueued
  first (same priority: they sit ahead of the noop jobs in the stream). Pass: the backlog
  half's drain rate is at least 90 % of the plain one's (ratio of the medians).

Writes the "Limits" section of bench/results/RESULTS-features.md; bench/README.md ("Feature
benchmarks") explains it. Exit status 1 if a measurement failed, else 2 if a check failed,
else 0.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import envs, record
from bench.common.job import counter_client
from bench.common.procs import BenchError
from bench.common.redistime import Window
from bench.common.rounds import half_of
from bench.common.runner import Entry
from bench.features import agentside, family
from bench.features.agentside import AgentCtx, Params
from bench.features.family import Family, Size
from bench.features.limits_report import (
    HALVES,
    TAIL_S,
    failed,
    render,
)
from bench.features.periodic_bench import Phase

KEY = "limits"
ENV_HALF = "BENCH_LIMITS_HALF"  # which drain half an agent runs (unset: the rate phase)
WINDOWS_S = (1.0, 0.98)  # the sliding windows the start stamps are counted in
SETTLE_S = 0.5  # after the drain, for the last acks to reach Redis before the window closes
STALL_S = 30.0  # a drain whose counter has not moved for this long has failed
POLL_S = 0.001
BATCH = 1_000  # jobs per bulk enqueue call (starmap)


# ------------------------------------------------------------------ agent side


def _starts(ctx: AgentCtx, base: int, limited: bool) -> list[int]:
    """Sorted start stamps (ns) of the limited (or of the noop) jobs recorded so far."""
    return sorted(ns for i, ns in record.read_records(ctx.record_dir) if (i >= base) == limited)


def max_in_window(stamps: Sequence[int], width_ns: int) -> tuple[int, int]:
    """The highest number of stamps in any half-open window ``[t, t + width)`` (it is reached
    with ``t`` at a stamp), and the index of the stamp that window starts at."""
    best, at, j = 0, 0, 0
    for i, t in enumerate(stamps):
        j = max(j, i)
        while j < len(stamps) and stamps[j] < t + width_ns:
            j += 1
        if j - i > best:
            best, at = j - i, i
    return best, at


def rate_figures(stamps: Sequence[int], seconds: float, starts: int, window_ms: int) -> Params:
    """Starts in the ``seconds`` from the first, per window, per whole second; the checks."""
    if not stamps:
        raise BenchError("no limited job started")
    first = stamps[0]
    span_ns = round(seconds * 1e9)
    in_run = [t for t in stamps if t < first + span_ns]
    per_s = [0] * int(seconds)
    for t in in_run:
        k = (t - first) // 1_000_000_000
        if k < len(per_s):
            per_s[k] += 1
    expected = round(starts * seconds * 1000 / window_ms)
    out: Params = {
        "starts_in_run": len(in_run),
        "starts_recorded": len(stamps),
        "expected": expected,
        "total_off": (len(in_run) - expected) / expected if expected else None,
        "per_second": per_s,
        "per_second_p50": statistics.median(per_s) if per_s else None,
        "per_second_min": min(per_s, default=None),
        "per_second_max": max(per_s, default=None),
    }
    over = [stamps[i + starts] - stamps[i] for i in range(len(stamps) - starts)]
    out["min_span_over_limit_ms"] = min(over) / 1e6 if over else None
    for w in WINDOWS_S:
        best, at = max_in_window(stamps, round(w * 1e9))
        out[f"max_{w:g}s"] = best
        out[f"max_{w:g}s_at_s"] = (stamps[at] - first) / 1e9 if stamps else None
    return out


def rate_cost(window: Params, starts: int) -> Params:
    """EVALSHA calls and µs per start; ``limit.lua`` calls, and deferrals (calls - starts).

    ``limit.lua`` runs ``ZSCORE`` once per call, and no other command of the phase does (taskq
    sends none at top level; the concurrency limit's ``slot.lua`` does, but this app has no
    such task), so the ``zscore`` row counts its calls without a ``MONITOR`` (which would slow
    every script down and inflate its µs). Fewer calls than starts: no deferral figure."""
    rows = window["commands"]
    evalsha = rows.get("evalsha", {"calls": 0, "usec": 0})
    limit = rows.get("zscore", {}).get("calls", 0)
    per = (lambda v: v / starts) if starts else (lambda v: None)
    return {
        "evalsha": evalsha["calls"], "evalsha_usec": evalsha["usec"],
        "evalsha_per_start": per(evalsha["calls"]), "evalsha_us_per_start": per(evalsha["usec"]),
        "eval": rows.get("eval", {}).get("calls", 0), "cpu_us": window["cpu_us"],
        "cpu_us_per_start": per(window["cpu_us"]),
        "limit_calls": limit, "limit_per_start": per(limit),
        "other_evalsha_per_start": per(evalsha["calls"] - limit),
        "deferrals": limit - starts if limit >= starts else None,
    }  # fmt: skip


def rate_phase(system: Any, ctx: AgentCtx) -> Params:
    """Limited jobs waiting, the workers run ``seconds`` past the first start; the starts."""
    from taskq.keys import QueueKeys  # here: the agent runs in taskq's venv
    from taskq.limits import Rate

    rate = Rate.parse(system.rate)
    if ctx.limited_jobs < rate.starts * ctx.seconds * 1000 / rate.window_ms:
        raise BenchError(f"--limited-jobs {ctx.limited_jobs} is fewer than the phase can start")
    r = ctx.redis()
    t0 = time.perf_counter()
    system.enqueue_limited(ctx.limited_jobs, BATCH)
    enqueue_s = time.perf_counter() - t0
    phase = Phase(ctx, system.worker_argvs(ctx.procs, ctx.concurrency), "rate")
    window = Window(ctx.url)
    window.start()
    try:
        phase.start()
        first_ns = _first_start(ctx, phase, system.limited_base)
        end = first_ns / 1e9 + ctx.seconds + TAIL_S
        while (now := time.time()) < end:
            time.sleep(min(0.05, end - now))
            phase.check_alive()
        ran_s = time.time() - phase.spawned[0]
        stop_s = phase.stop()
    finally:
        phase.close()
    stamps = _starts(ctx, system.limited_base, limited=True)
    figures = rate_figures(stamps, ctx.seconds, rate.starts, rate.window_ms)
    stats = window.stop(len(stamps))
    cost = rate_cost(stats, len(stamps))
    k = QueueKeys(system.queue)
    ctx.out["worker_argv"] = [[Path(a[0]).name, *a[1:]] for a in phase.argvs]
    return {
        "figures": {
            "starts": figures["starts_in_run"], "max_1s": figures["max_1s"],
            "max_0.98s": figures["max_0.98s"], "evalsha_per_start": cost["evalsha_per_start"],
        },
        "rate": {"starts": rate.starts, "window_ms": rate.window_ms, "text": system.rate},
        "enqueue_s": enqueue_s,
        "ran_s": ran_s,
        "stop_s": stop_s,
        "first_start_after_spawn_s": first_ns / 1e9 - phase.spawned[0],
        "starts": figures,
        "left": {
            "schedule": int(r.zcard(k.schedule)),
            "streams": sum(int(r.xlen(s)) for s in k.streams if r.exists(s)),
            "limit_set": int(r.zcard(k.limit(system.limited_task))),
        },
        "redis": cost,
        "log_errors": phase.log_errors()[:10],
    }  # fmt: skip


def _first_start(ctx: AgentCtx, phase: Phase, base: int) -> int:
    """Wait for the first limited job's start record; its stamp (ns)."""
    bound = time.monotonic() + ctx.deadline
    while not (stamps := _starts(ctx, base, limited=True)):
        if time.monotonic() > bound:
            raise BenchError(f"no limited job started in {ctx.deadline:.0f}s")
        phase.check_alive()
        time.sleep(0.005)
    return stamps[0]


def drain_half(system: Any, ctx: AgentCtx, half: str) -> Params:
    """One drain half: (``backlog``: limited jobs first, then) the noop jobs, drained."""
    n = ctx.noop_jobs
    backlog = ctx.backlog_jobs if half == "backlog" else 0
    client = counter_client(ctx.url)
    t0 = time.perf_counter()
    if backlog:
        system.enqueue_limited(backlog, BATCH)
    system.enqueue_noop(n, BATCH)
    enqueue_s = time.perf_counter() - t0
    window = Window(ctx.url)
    window.start()
    argvs = system.worker_argvs(ctx.procs, ctx.concurrency)
    with agentside.workers(argvs, ctx, f"drain-{half}") as running:
        t_spawn = running.t_start
        done_ns = agentside.wait_counter(client, n, running, ctx.deadline)
        time.sleep(SETTLE_S)
        stats = window.stop(n)
    noop = _starts(ctx, system.limited_base, limited=False)
    limited = _starts(ctx, system.limited_base, limited=True)
    if len(noop) < n:
        raise BenchError(f"{half}: {len(noop)} noop start records for {n} jobs")
    evalsha = stats["commands"].get("evalsha", {"calls": 0, "usec": 0})
    drain_s = (done_ns - t_spawn) / 1e9
    steady_s = (noop[n - 1] - noop[0]) / 1e9
    return {
        "figures": {
            "rate": n / drain_s, "steady_rate": (n - 1) / steady_s if steady_s > 0 else None,
            "limited_started": sum(1 for t in limited if t <= done_ns),
        },
        "half": half,
        "jobs": n,
        "backlog": backlog,
        "enqueue_s": enqueue_s,
        "drain_s": drain_s,
        "startup_s": (noop[0] - t_spawn) / 1e9,
        "steady_s": steady_s,
        "limited_started_s": [(t - t_spawn) / 1e9 for t in limited if t <= done_ns][:5],
        "redis": {
            "evalsha": evalsha["calls"], "evalsha_usec": evalsha["usec"],
            "evalsha_per_job": evalsha["calls"] / n, "evalsha_us_per_job": evalsha["usec"] / n,
            "cpu_us_per_job": stats["cpu_us"] / n,
        },
    }  # fmt: skip


def agent(system: Any, ctx: AgentCtx) -> Params:
    """The rate phase, or (``BENCH_LIMITS_HALF`` set by the orchestrator) one drain half."""
    half = half_of(ENV_HALF, HALVES)
    return rate_phase(system, ctx) if half is None else drain_half(system, ctx, half)


# ------------------------------------------------------------------ orchestrator side


def drain_rounds(s: family.Session, systems: Sequence[Entry], run: int) -> None:
    """Run ``run`` of the drain: plain and backlog, each a fresh agent from an empty Redis."""
    family.halves_rounds(s, systems, run, ENV_HALF, HALVES, "drain")


ENTRIES = {
    e.name: e
    for e in [Entry("taskq", "taskq_limits_app", envs.PROJECT_VENV, "taskq", is_taskq=True)]
}


FAMILY = Family(
    key=KEY,
    title="Limits",
    module="bench.features.limits_bench",
    attr="LIMITS",
    systems=list(ENTRIES.values()),
    sizes=[
        Size("seconds", 20, 8, "run time of the rate phase from the first start, s"),
        Size("limited_jobs", 2_000, 1_000, "limited jobs waiting at the rate phase's start"),
        Size("noop_jobs", 20_000, 5_000, "unlimited jobs of each drain half"),
        Size("backlog_jobs", 5_000, 1_250, "limited jobs ahead of them in the backlog half"),
        Size("concurrency", 2, 2, "processes of each worker command (-c)"),
    ],
    agent=agent,
    render=render,
    raws=(),
    extra=drain_rounds,
    failed=failed,
)


if __name__ == "__main__":
    sys.exit(family.main(FAMILY))
