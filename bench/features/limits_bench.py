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

from bench.common import envs, record, rounds
from bench.common.job import counter_client
from bench.common.procs import BenchError
from bench.common.redistime import Window
from bench.common.report import div, md_table, med, num, pct, verdict
from bench.common.rounds import fig, half_medians, half_of
from bench.common.runner import Entry
from bench.features import agentside, family
from bench.features.agentside import AgentCtx, Params
from bench.features.family import Family, Size
from bench.features.periodic_bench import Phase

KEY = "limits"
HALVES = ("plain", "backlog")  # the two halves of the drain part
ENV_HALF = "BENCH_LIMITS_HALF"  # which drain half an agent runs (unset: the rate phase)
WINDOWS_S = (1.0, 0.98)  # the sliding windows the start stamps are counted in
TAIL_S = 0.3  # the rate phase runs this long past --seconds after the first start
TOTAL_TOLERANCE = 0.02  # starts in the --seconds: within 2 % of the expected
DRAIN_VS_PLAIN = 0.90  # the backlog half's drain rate, share of the plain one's
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


# ------------------------------------------------------------------ report

RATE_HEADER = [
    "run", "ran (s)", "spawn → 1st start (s)", "starts in the {secs:g} s from the 1st",
    "expected", "off by", "starts recorded (to SIGTERM)", "max in any 1 s", "max in any 0.98 s",
    "shortest span of {over} starts (ms)", "per whole second p50 / min / max",
    "left in schedule", "check",
]  # fmt: skip
COST_HEADER = [
    "run", "starts", "EVALSHA calls", "EVALSHA / start", "EVALSHA µs / start",
    "`limit.lua` calls (`ZSCORE` count)", "`limit.lua` / start", "deferrals (calls − starts)",
    "other EVALSHA / start",
    "Redis CPU µs / start",
]  # fmt: skip
DRAIN_HEADER = [
    "run", "order", "plain (jobs/s)", "with backlog (jobs/s)", "backlog / plain",
    "after 1st job: plain", "after 1st job: backlog", "after 1st job: ratio",
    "start-up plain / backlog (s)", "limited started during the backlog drain",
    "EVALSHA / noop job: plain / backlog",
]  # fmt: skip


def rate_check(p: Params) -> str:
    """Return "ok", or what went over (a window over the limit, a total off by more than 2 %)."""
    s, limit = p["starts"], p["rate"]["starts"]
    bad = []
    if s["max_1s"] > limit:
        slack = " (≤ limit in any 0.98 s)" if s["max_0.98s"] <= limit else ""
        bad.append(f"{s['max_1s']} in 1 s{slack}")
    if s["total_off"] is None or abs(s["total_off"]) > TOTAL_TOLERANCE:
        bad.append(f"total {s['starts_in_run']:,} vs {s['expected']:,}")
    return "ok" if not bad else "**FAIL** (" + ", ".join(bad) + ")"


def _rate_row(run: int, p: Params) -> list[str]:
    s = p["starts"]
    return [
        str(run), num(p["ran_s"], ".1f"), num(p["first_start_after_spawn_s"], ".2f"),
        f"{s['starts_in_run']:,}", f"{s['expected']:,}", pct(s["total_off"]),
        f"{s['starts_recorded']:,}", f"{s['max_1s']}", f"{s['max_0.98s']}",
        num(s["min_span_over_limit_ms"], ",.1f"),
        f"{num(s['per_second_p50'], 'g')} / {s['per_second_min']} / {s['per_second_max']}",
        f"{p['left']['schedule']:,}", rate_check(p),
    ]  # fmt: skip


def _cost_row(run: int, p: Params) -> list[str]:
    c = p["redis"]
    return [
        str(run), f"{p['starts']['starts_recorded']:,}", f"{c['evalsha']:,}",
        num(c["evalsha_per_start"], ".2f"), num(c["evalsha_us_per_start"], ".1f"),
        f"{c['limit_calls']:,}", num(c["limit_per_start"], ".2f"),
        num(c["deferrals"], ","), num(c["other_evalsha_per_start"], ".2f"),
        num(c["cpu_us_per_start"], ".0f"),
    ]  # fmt: skip


def _red(res: Params | None, key: str) -> float | None:
    return None if res is None or "error" in res else float(res["redis"][key])


def drain_summary(node: dict[str, list[Params]]) -> Params:
    """Medians of each half's rates over the runs that did not fail; the target."""
    out = half_medians(node, HALVES, ("rate", "steady_rate"))
    out["limited_started"] = med([fig(r, "limited_started") for r in node.get("backlog", [])])
    out["pass"] = None if out["rate_ratio"] is None else out["rate_ratio"] >= DRAIN_VS_PLAIN
    return out


def _drain_row(run: int, plain: Params | None, back: Params | None) -> list[str]:
    order = "plain first" if (back or {}).get("order") == 2 else "backlog first"
    startup = [num(None if r is None or "error" in r else r["startup_s"], ".2f")
               for r in (plain, back)]  # fmt: skip
    return [
        str(run), order, num(fig(plain, "rate")), num(fig(back, "rate")),
        pct(div(fig(back, "rate"), fig(plain, "rate"))), num(fig(plain, "steady_rate")),
        num(fig(back, "steady_rate")),
        pct(div(fig(back, "steady_rate"), fig(plain, "steady_rate"))),
        " / ".join(startup), num(fig(back, "limited_started"), ",.0f"),
        " / ".join(num(_red(r, "evalsha_per_job"), ".3f") for r in (plain, back)),
    ]  # fmt: skip


def _median_row(m: Params) -> list[str]:
    return [
        "**median**", f"target ≥ {DRAIN_VS_PLAIN:.0%}: {verdict(m['pass'])}", num(m["plain_rate"]),
        num(m["backlog_rate"]), f"**{pct(m['rate_ratio'])}**", num(m["plain_steady_rate"]),
        num(m["backlog_steady_rate"]), pct(m["steady_rate_ratio"]), "",
        num(m["limited_started"], ",.0f"),
        "",
    ]  # fmt: skip


def _rate_notes(run: int, p: Params) -> list[str]:
    s, left = p["starts"], p["left"]
    line = (
        f"- rate, run {run}: starts per whole second "
        f"{', '.join(str(v) for v in s['per_second'])}; the fullest 1 s window opens "
        f"{s['max_1s_at_s']:.2f} s after the 1st start; left after the stop: "
        f"{left['schedule']:,} in the schedule, {left['streams']:,} in the stream, "
        f"{left['limit_set']} slots in the limit's set; bulk enqueue {p['enqueue_s']:.2f} s; "
        f"stop (SIGTERM to exit) {p['stop_s']:.2f} s"
    )
    if p["log_errors"]:
        line += f"; worker log errors: {'; '.join(p['log_errors'][:3])}"
    return [line]


def _drain_note(run: int, half: str, r: Params) -> str:
    if "error" in r:
        return f"- drain {half}, run {run}: error ({r['error']})"
    c = r["redis"]
    return (
        f"- drain {half}, run {run}: bulk enqueue {r['enqueue_s']:.2f} s "
        f"({r['backlog']:,} limited + {r['jobs']:,} noop jobs); drain {r['drain_s']:.2f} s; "
        f"EVALSHA {c['evalsha']:,} calls, {c['evalsha_us_per_job']:.1f} µs per noop job; Redis "
        f"CPU {c['cpu_us_per_job']:.1f} µs per noop job"
    )


def render(data: dict[str, Any]) -> list[str]:
    """The section body: the rate table, its Redis cost, the drain table, notes."""
    params = data["meta"]["params"]
    secs, procs, conc = params["seconds"], params["procs"], params["concurrency"]
    runs = data["systems"].get("taskq", [])
    ok = [(i + 1, r) for i, r in enumerate(runs) if "error" not in r]
    rate: Params = ok[0][1]["rate"] if ok else {"starts": 50, "window_ms": 1000, "text": "50/s"}
    node = data.get("drain", {}).get("taskq", {})
    pairs = rounds.pairs(node, HALVES)
    m = drain_summary(node)
    workers = (
        f"{procs} separate `taskq worker -A bench.peers.taskq_limits_app:app -c {conc} "
        f"--loglevel warning` commands (each its own session: {procs * conc} worker processes)"
    )
    lines = [
        f'`@app.task(rate_limit="{rate["text"]}")` on queue `lbench`, run by {workers}. '
        "Each job of the limited task writes its start record (`time.time_ns()` at the "
        "task's start, to a per-process file: no Redis command) and does nothing else.",
        "",
        f"**Rate**: {params['limited_jobs']:,} limited jobs bulk-enqueued first (more than the "
        f"phase can start), then the workers are spawned, run until {secs:g} s after the first "
        f'start (+{TAIL_S:g} s), and get one SIGTERM each. "starts in the {secs:g} s" counts '
        f"the starts in the {secs:g} s from the first one (expected {rate['starts']} per "
        f"{rate['window_ms'] / 1000:g} s); the windows are exact sliding windows over every "
        "recorded start stamp (a window opens at a stamp and is half-open), the 0.98 s one to "
        "show clock slack (slots are given by Redis's clock, starts stamped by the worker "
        f'after its fetch); "shortest span of {rate["starts"] + 1} starts": the least time '
        f"between a start and the {rate['starts']}th after it (the limit held in worker time "
        f"if it is at least {rate['window_ms']:g} ms; the slack is what it falls short by); "
        '"per whole second": the starts in each whole second counted from '
        f"the first start. Check: at most {rate['starts']} in any 1 s window and the total "
        f"within {TOTAL_TOLERANCE:.0%} of the expected.",
        "",
        md_table(
            [h.format(secs=secs, over=rate["starts"] + 1) for h in RATE_HEADER],
            [_rate_row(i, p) for i, p in ok],
        ),
        "",
        "Redis cost over the rate phase (`CONFIG RESETSTAT` before the spawn, `INFO "
        "commandstats` after the workers exited, so start-up and shutdown are in), per start "
        "recorded: EVALSHA calls and their µs (every script: `limit.lua`, and the workers' "
        "fetch, promote, heartbeat and other upkeep), the `limit.lua` calls (the `ZSCORE` row: "
        "only `limit.lua` runs it, once per call, so no `MONITOR` is needed, which would slow "
        "the scripts and inflate their µs; one call per admitted job and one per deferral: at the "
        "start, every job the window cannot take is deferred once, to its slot, and runs "
        "`limit.lua` again when it comes back and starts; the jobs still deferred at the "
        "stop count a call but no start), the other EVALSHAs, and Redis's main-thread CPU "
        "time (commands and I/O).",
        "",
        md_table(COST_HEADER, [_cost_row(i, p) for i, p in ok]),
        "",
        f"**Drain, no head-of-line blocking**: each run, two halves, each from an empty Redis "
        f"in a fresh agent, alternating which goes first: **plain**, {params['noop_jobs']:,} "
        "jobs of the unlimited `noop()` (the main bench's task: the start record, then one "
        "`INCR` of `bench:incr`) bulk-enqueued, then the workers are spawned, timed from just "
        f"before the spawn until `bench:incr` reaches {params['noop_jobs']:,} (polled every "
        f"ms); **backlog**, the same, but {params['backlog_jobs']:,} `limited()` jobs are "
        "bulk-enqueued before the noop jobs, at the same priority, so they are ahead in the "
        "stream and each is deferred (or, at 50/s, started) before the noop jobs behind it. "
        '"after 1st job": from the first noop start to the last (start-up left out). '
        f"Target: the backlog half's drain rate ≥ {DRAIN_VS_PLAIN:.0%} of the plain one's "
        '(ratio of the medians; each run\'s own ratio shown). "limited started": limited '
        "jobs that started between the spawn and the end of the drain.",
        "",
        md_table(DRAIN_HEADER, [*(_drain_row(*p) for p in pairs), _median_row(m)]),
        "",
    ]
    for i, p in ok:
        lines += _rate_notes(i, p)
    for run, plain, back in pairs:
        lines += [_drain_note(run, h, r) for h, r in (("plain", plain), ("backlog", back)) if r]
    errors = rounds.errors(node, HALVES, "drain")
    if errors:
        lines += ["", "Drain errors:", "", *errors]
    if data["meta"]["skipped"]:
        lines += ["", "taskq: not available yet; nothing measured."]
    return lines


ENTRIES = {
    e.name: e
    for e in [Entry("taskq", "taskq_limits_app", envs.PROJECT_VENV, "taskq", is_taskq=True)]
}


def failed(data: dict[str, Any]) -> str | None:
    """What failed in the stored section: a rate check or the drain target, if any."""
    runs = [r for r in data["systems"].get("taskq", []) if "error" not in r]
    bad_rate = any(rate_check(r) != "ok" for r in runs)
    if bad_rate or drain_summary(data.get("drain", {}).get("taskq", {}))["pass"] is False:
        return "a rate check or the drain target failed"
    return None


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
