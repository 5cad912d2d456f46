"""The results family's drain with results on against results off (target: on >= 90 % of
off): ``--drain-jobs`` no-op jobs (the main bench's task, bench/common/job.py) drained by
``taskq worker -c 2`` on the plain app and on ``App(store_results=True)``, each in the main
bench's drain round (bench/compare/agent.py, run as :mod:`bench.compare.halves`), with its
Redis time per job (bench/common/redistime.py: a clean pass in every run, the MONITOR
accounting pass in run 1); and the part of the section that reports it.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Sequence
from typing import Any

from bench.common.report import md_table, med, num, verdict
from bench.common.rounds import alternating
from bench.common.runner import Entry, brief
from bench.compare import halves, report, summary
from bench.features.agentside import Params
from bench.features.family import Session

DRAIN_VS_OFF = 0.90  # target: drain with results on, share of the drain with results off
MODES = {"off": "taskq_app", "on": "taskq_results_app"}  # bench/peers module of each half


def _drain_entry(entry: Entry, mode: str) -> Entry:
    """The bench.compare.agent round of taskq variant ``entry`` with results ``mode`` (off, on)."""
    return Entry(f"{entry.name}-results-{mode}", MODES[mode], entry.venv,
                 f"{entry.label}, results {mode}", True)  # fmt: skip


def drain_rounds(s: Session, systems: Sequence[Entry], run: int) -> None:
    """Run ``run`` of the drain with results off and on, for each taskq variant.

    Each half is the main bench's drain round (``python -m bench.compare.agent --phases drain``, a
    fresh agent from an empty Redis): bulk enqueue of ``--drain-jobs`` jobs, then the worker
    is spawned and timed to the last job's start, with a commandstats window. Then the same
    drain as a clean pass (the worker tree off redis-server's CPU) for the Redis time per
    job, and in run 1 the MONITOR accounting pass that splits script time. The halves
    alternate which goes first from one run to the next.
    """
    n = s.args.drain_jobs
    variants = [e for e in systems if e.is_taskq]
    if n <= 0 or not variants:
        return
    meta = s.data["meta"].setdefault("drain", {})
    halves.prepare(s.args, s.runner, meta)
    kinds = halves.kinds(s.runner, ("timed", "drain"))
    head = f"run {run}/{s.args.runs}"
    for entry in variants:
        node = s.data.setdefault("drain", {}).setdefault(
            entry.name, halves.new_node(MODES, ("timed", "clean"))
        )

        def one_round(mode: str, at: int, phases: str, clean: bool, entry: Entry = entry) -> Params:
            size = min(n, halves.ACCOUNT_JOBS) if phases == "account" else n
            res = s.runner.agent(_drain_entry(entry, mode), at, phases, sizes=(size, 1),
                                 clean=clean)  # fmt: skip
            what = "clean pass done" if clean else brief(res)
            if phases == "account":
                what = f"accounting pass (MONITOR) {'ERROR' if 'error' in res else 'done'}"
            print(f"{head}  {entry.name:<14} results {mode}: {what}", flush=True)
            return res

        halves.run_halves(node, meta, alternating(tuple(MODES), run), kinds, run, one_round)


def drain_summary(node: dict[str, Any]) -> dict[str, Any]:
    """Medians of one half (results off or on) over its runs; failed runs left out."""
    timed = [r for r in node["timed"] if "error" not in r]
    clean = [r for r in node["clean"] if "error" not in r]

    def m(*path: str) -> float | None:
        return med([summary.dig(r, *path) for r in timed])

    acc = node["accounting"]
    costs = summary.redis_costs(timed, ("enqueue_bulk", "drain"), acc)
    return {
        "drain": m("drain", "rate"),
        "drain_steady": m("drain", "steady_rate"),
        "startup_s": m("drain", "startup_s"),
        "enqueue_bulk": m("enqueue_bulk", "rate"),
        "redis_clean": summary.redis_costs(clean, ("drain",), acc)["drain"],
        "redis": costs["drain"],
        "redis_bulk": costs["enqueue_bulk"],
        "ok": f"{len(timed)}+{len(clean)} of {len(node['timed'])}+{len(node['clean'])}",
        "errors": [r["error"] for r in (*node["timed"], *node["clean"]) if "error" in r]
        + ([f"accounting pass: {acc['error']}"] if acc and "error" in acc else []),
    }


def _pct(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{100 * a / b:.0f} %"


def per_run_ratios(node: dict[str, Any]) -> list[float | None]:
    """Drain with results on / off of each run (the two halves of a run are paired)."""
    pairs = zip(node["on"]["timed"], node["off"]["timed"], strict=False)
    return [
        summary.dig(on, "drain", "rate") / off["drain"]["rate"]
        if "error" not in on and "error" not in off
        else None
        for on, off in pairs
    ]


def drain_target(
    name: str, off: dict[str, Any], on: dict[str, Any], runs: list[float | None]
) -> dict[str, Any]:
    """The drain target for one taskq variant: the median over the runs of each run's own
    ratio ``runs`` (drain with results on / off), as the signing family judges. A run's two
    halves drain back to back, so load that hits one run drops out with its ratio, where a
    ratio of the medians can set one run's off half against another's on half (shown too)."""
    paired = sorted(r for r in runs if r is not None)
    value = statistics.median(paired) if paired else None
    each = ", ".join(_pct(r, 1.0) for r in runs)
    detail = (
        f"{name}: each run {each}; medians {num(on['drain'])} vs "
        f"{num(off['drain'])} jobs/s, {_pct(on['drain'], off['drain'])}; after the "
        f"1st job: {num(on['drain_steady'])} vs {num(off['drain_steady'])}, "
        f"{_pct(on['drain_steady'], off['drain_steady'])}"
    )
    return {"value": value, "pass": None if value is None else value >= DRAIN_VS_OFF,
            "detail": detail}  # fmt: skip


def render_drain(data: dict[str, Any]) -> list[str]:
    """The "drain with results on vs off" part of the section (empty if it did not run)."""
    drains = data.get("drain") or {}
    if not drains:
        return []
    meta = data["meta"].get("drain", {})
    n = data["meta"]["params"].get("drain_jobs")
    cpus = meta.get("clean_cpus")
    clean_text = (
        f"an untimed clean pass of the same drain in every run, with the worker tree and the "
        f"producer on CPU {', '.join(map(str, cpus))}, off redis-server's"
        if cpus
        else "**no clean pass** (nothing pinned): the Redis figures are the timed drain's"
    )
    labels = data["meta"]["labels"]
    rows, targets, errors = [], [], []
    for name, node in drains.items():
        label = labels.get(name, name)
        s = {mode: drain_summary(node[mode]) for mode in MODES}
        for mode in MODES:
            x = s[mode]
            c = x["redis_clean"] or x["redis"]
            rows.append([
                label, mode, num(x["drain"]), num(x["drain_steady"]),
                num(x["startup_s"], ".2f"), num(x["enqueue_bulk"]),
                "none" if x["redis_clean"] is None else halves.us_cell(x["redis_clean"]),
                halves.us_cell(x["redis"]), report.breakdown(c) if c else "n/a",
                halves.us_cell(x["redis_bulk"]), x["ok"],
            ])  # fmt: skip
            errors += [f"- {label}, results {mode}: {e}" for e in x["errors"]]
        targets.append((label, drain_target(label, s["off"], s["on"], per_run_ratios(node))))
    argv = meta.get("worker_argv", {})
    commands = "; ".join(f"results {m}: `{shlex.join(a)}`" for m, a in argv.items())
    header = ["system", "results", "drain (jobs/s)", "drain after 1st job (jobs/s)",
              "start-up (s)", "bulk enqueue (jobs/s)", "drain, clean: Redis µs/job",
              "drain, contended: Redis µs/job", "per command (µs/job, clean)",
              "bulk enqueue: Redis µs/job", "ok runs (timed+clean)"]  # fmt: skip
    t_header = ["target", "need"]
    t_row = [f"drain with results on vs off ({num(n)} jobs)", f">= {DRAIN_VS_OFF:.0%}"]
    for label, t in targets:
        t_header += [label, ""]
        t_row += [_pct(t["value"], 1.0), verdict(t["pass"])]
    t_header.append("compared")
    t_row.append("; ".join(t["detail"] for _, t in targets))
    out = [
        "### Drain with results on vs off",
        "",
        f"{num(n)} no-op jobs (the main bench's task: one record and one `INCR`, returning "
        "None), bulk-enqueued with `noop.starmap` (batches of 1,000) with no worker running, "
        "then drained by `taskq worker -c 2`, once on the plain app (results off) and once on "
        "`App(store_results=True)` (results on: a status record per job written at enqueue, "
        "take and end, the result and a done list at the end), from an empty Redis each, in "
        "the same run, alternating which goes first. The drain is the main bench's "
        "(`bench/agent.py`): from just before the worker is spawned to the last job's start, "
        'start-up included; "after 1st job" leaves start-up out. Redis µs/job as in the main '
        "bench's Redis-time table (`INFO commandstats`, the task's `INCR` left out, script "
        'time split with a `MONITOR` pass in run 1, nothing counted twice): "clean" from '
        f'{clean_text}; "contended" from the timed drain. Worker commands: {commands}.',
        "",
        md_table(t_header, [t_row]),
        "",
        md_table(header, rows),
    ]
    if errors:
        out += ["", *errors]
    return out
