"""The limits family's section: the rate phase's starts per window against the limit, its Redis
cost per start, and the drain with a backlog of limited jobs against the plain drain, with
their checks (:func:`failed`).
"""

from __future__ import annotations

from typing import Any

from bench.common import rounds
from bench.common.report import div, md_table, med, num, pct, verdict
from bench.common.rounds import fig, half_medians
from bench.features.agentside import Params

HALVES = ("plain", "backlog")  # the two halves of the drain part
TAIL_S = 0.3  # the rate phase runs this long past --seconds after the first start
TOTAL_TOLERANCE = 0.02  # starts in the --seconds: within 2 % of the expected
DRAIN_VS_PLAIN = 0.90  # the backlog half's drain rate, share of the plain one's

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


def failed(data: dict[str, Any]) -> str | None:
    """What failed in the stored section: a rate check or the drain target, if any."""
    runs = [r for r in data["systems"].get("taskq", []) if "error" not in r]
    bad_rate = any(rate_check(r) != "ok" for r in runs)
    if bad_rate or drain_summary(data.get("drain", {}).get("taskq", {}))["pass"] is False:
        return "a rate check or the drain target failed"
    return None
