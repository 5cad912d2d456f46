"""The periodic family's section: the ticks each phase ran (steady masters, and a master
killed right after a tick), their lateness, what a tick costs Redis, and the checks that no
tick ran twice or went missing (:func:`failed`).
"""

from __future__ import annotations

from typing import Any

from bench.common.report import md_table, num
from bench.features.agentside import Params

PHASES = ("steady", "kill")
TICK_MS = 1000  # the app's every=1
FAST_RECOVERY = {"TASKQ_VISIBILITY_TIMEOUT_MS": "3000", "TASKQ_SWEEP_INTERVAL_MS": "500"}

TICKS_HEADER = [
    "phase", "ran (s)", "ticks, first → last recorded", "jobs (distinct ids)",
    "duplicate ticks", "missing ticks", "re-runs", "lateness p50 (ms)", "lateness p99 (ms)",
    "lateness max (ms)", "stored last tick", "check",
]  # fmt: skip
COST_HEADER = [
    "phase", "worker-seconds", "EVALSHA calls", "EVALSHA / tick", "EVALSHA / worker-s",
    "EVAL calls", "HGETALL calls", "HGETALL / tick", "HGETALL / worker-s",
    "periodic.lua claims / tick", "other scripts / worker-s",
]  # fmt: skip


def _phase_label(tag: str, run: int, runs: int) -> str:
    return tag if runs == 1 else f"{tag}, run {run}"


def _state_text(p: Params) -> str:
    ahead = p["state_ahead_ticks"]
    if ahead is None:
        return "missing"
    return "= last run" if ahead == 0 else f"last run + {ahead}"


def check(p: Params) -> str:
    """Return "ok", or what went wrong (a duplicate or a missing tick)."""
    t = p["ticks"]
    bad = [f"{t[k]} {k}" for k in ("duplicates", "missing", "off_grid") if t[k]]
    return "ok" if not bad else "**FAIL** (" + ", ".join(bad) + ")"


def _tick_row(label: str, p: Params) -> list[str]:
    t = p["ticks"]
    return [
        label, num(p["ran_s"], ".1f"), f"{t['ticks_expected']:,}", f"{t['jobs']:,}",
        str(t["duplicates"]), str(t["missing"]), str(t["reruns"]),
        num(t["lateness_p50_ms"], ".1f"), num(t["lateness_p99_ms"], ".1f"),
        num(t["lateness_max_ms"], ".1f"), _state_text(p), check(p),
    ]  # fmt: skip


def _cost_row(label: str, p: Params) -> list[str]:
    c = p["redis"]
    return [
        label, num(c["worker_seconds"], ".1f"), f"{c['evalsha']:,}",
        num(c["evalsha_per_tick"], ".2f"), num(c["evalsha_per_worker_s"], ".2f"),
        f"{c['eval']:,}", f"{c['hgetall']:,}", num(c["hgetall_per_tick"], ".3f"),
        num(c["hgetall_per_worker_s"], ".3f"), num(c["claims_per_tick"], ".2f"),
        num(c["other_scripts_per_worker_s"], ".2f"),
    ]  # fmt: skip


def _notes(label: str, p: Params) -> list[str]:
    c, k = p["redis"], p["killed"]
    scripts = ", ".join(f"{n} {v:,}" for n, v in c["scripts"].items()) or "none"
    lines = [f"- {label}: EVALSHA by script (`MONITOR`): {scripts}; first tick "
             f"{p['first_tick_after_spawn_s']:.2f} s after the first spawn; stop "
             f"(SIGTERM to exit) {p['stop_s']:.2f} s"]  # fmt: skip
    if k:
        lines[-1] += (
            f"; worker {k['worker']} SIGKILLed {k['at_s']:.1f} s in, "
            f"{k['at_ms'] % TICK_MS} ms after a tick"
            + (" (its child ran the latest beat)" if k["ran_last_beat"] else "")
        )
    if p["log_errors"]:
        lines[-1] += f"; worker log errors: {'; '.join(p['log_errors'][:3])}"
    return lines


def render(data: dict[str, Any]) -> list[str]:
    """The section body: ticks table, Redis cost table, notes."""
    params = data["meta"]["params"]
    runs = data["systems"].get("taskq", [])
    ok = [(i + 1, r) for i, r in enumerate(runs) if "error" not in r]
    labelled = [(_phase_label(t, i, len(runs)), r["phases"][t]) for i, r in ok for t in PHASES]
    n, secs = params["procs"], params["seconds"]
    lines = [
        f"`app.add_periodic(beat, every=1)` on queue `pbench`, scheduled by {n} separate "
        f"`taskq worker -Q pbench -c 1` processes (each master schedules it) for {secs:g} s, "
        "then SIGTERM. Each run of `beat()` RPUSHes its tick (`current_job().scheduled_ms`), "
        "job id and start time to a Redis list, read after the workers stopped. **steady**: "
        "taskq's default settings. **kill**: one worker (the one whose child ran the latest "
        "beat) SIGKILLed as a whole process group at the midpoint, 50 ms after a tick, with "
        f"`{' '.join(f'{k}={v}' for k, v in FAST_RECOVERY.items())}` so that a job it held is "
        "recovered within the run. Ticks are counted from the first recorded to the last; a "
        "duplicate is a tick with more than one distinct job id, a missing tick one with none "
        "(both must be 0); a re-run is a second run of one job id (a job recovered from the "
        "killed worker after it had started). Lateness: the job's start time minus its tick, "
        'per job (first run). "stored last tick": the schedule\'s hash field '
        "`pbench:periodic beat` (`<last tick ms>|every:1000`) against the last tick that ran "
        "(one ahead: that tick's job was enqueued just before the stop and not run).",
        "",
        md_table(TICKS_HEADER, [_tick_row(lb, p) for lb, p in labelled]),
        "",
        "Redis cost over each phase (`CONFIG RESETSTAT` before the first spawn, `INFO "
        "commandstats` after the last worker exited, so start-up and shutdown are in): calls "
        "per tick (a tick = a job that ran) and per worker-second (each worker from its spawn "
        "to its SIGTERM or SIGKILL). A master reads the schedules (`HGETALL`) when it starts, "
        "and again only after a claim that got no reply (a Redis error); between ticks it "
        "computes the next due time itself, and at each tick each live master runs "
        "`periodic.lua` once (one claims the tick and enqueues its job, the others are "
        "refused and learn the new value from the refusal); the claims also count each "
        "master's first one at start-up, before the first tick. The "
        "other scripts are the workers' own upkeep and job handling (fetch, promote, "
        "heartbeat, renew, sweep), counted with `MONITOR`. The kill phase's shorter "
        "visibility timeout and sweep interval make its upkeep more frequent.",
        "",
        md_table(COST_HEADER, [_cost_row(lb, p) for lb, p in labelled]),
        "",
    ]
    for lb, p in labelled:
        lines += _notes(lb, p)
    if data["meta"]["skipped"]:
        lines += ["", "taskq: not available yet; nothing measured."]
    return lines


def failed(data: dict[str, Any]) -> str | None:
    """What failed in the stored section: a duplicate or a missing tick, if any."""
    runs = [r for r in data["systems"].get("taskq", []) if "error" not in r]
    if any(check(r["phases"][t]) != "ok" for r in runs for t in PHASES):
        return "duplicate or missing ticks"
    return None
