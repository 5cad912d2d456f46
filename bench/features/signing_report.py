"""The signing family's section: each mode's medians over the runs, the targets (each run's
own on / off ratio, from the separate rounds or the interleaved producer loops), the check,
and the tables (targets, figures and Redis time, each run, the interleaved loops,
micro-costs).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from bench.common.report import div, md_table, med, num, pct, verdict
from bench.compare import halves, report, summary
from bench.features import section
from bench.features.agentside import Params

MODES = ("off", "on")
SIGNED_VS_OFF = 0.90  # target: each figure with signing on, share of signing off
MICRO_REPEAT = 5  # timeit repeats of the micro-costs; the least is kept
# target key -> (round kind, figure path in the round's result, what it measures). The drain
# is judged on the separate rounds (each drain needs its own worker); the two enqueue rates on
# the interleaved producer loops (JUDGED_INTERLEAVED), which pair off and on blocks a fraction
# of a second apart in one process: the separate rounds' ratios are shown beside them.
TARGETS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "drain": ("drain", ("drain", "rate"), "drain"),
    "enqueue_one": ("enqueue", ("enqueue_one", "rate"), "single-call enqueue (`delay`)"),
    "enqueue_bulk": ("drain", ("enqueue_bulk", "rate"), "bulk enqueue (`starmap`)"),
}
JUDGED_INTERLEAVED = ("enqueue_one", "enqueue_bulk")


def mode_summary(node: Params) -> Params:
    """Medians of one mode (signing off or on) over its runs; failed runs left out."""
    enq, drn, cln = (section.ok_runs(node[k]) for k in ("enqueue", "drain", "clean"))
    acc = node["accounting"]

    def m(runs: Sequence[Params], *path: str) -> float | None:
        return med([summary.dig(r, *path) for r in runs])

    drain_costs = summary.redis_costs(drn, ("enqueue_bulk", "drain"), acc)
    counts = "+".join(str(len(x)) for x in (enq, drn, cln))
    total = "+".join(str(len(node[k])) for k in ("enqueue", "drain", "clean"))
    errors = [f"{k}, run {r['run']}: {r['error']}" for k in ("enqueue", "drain", "clean")
              for r in node[k] if "error" in r]  # fmt: skip
    if acc and "error" in acc:
        errors.append(f"accounting pass: {acc['error']}")
    return {
        "enqueue_one": m(enq, "enqueue_one", "rate"),
        "enqueue_bulk": m(drn, "enqueue_bulk", "rate"),
        "drain": m(drn, "drain", "rate"),
        "drain_steady": m(drn, "drain", "steady_rate"),
        "startup_s": m(drn, "drain", "startup_s"),
        "duplicates": m(drn, "drain", "duplicates"),
        "redis_one": summary.redis_costs(enq, ("enqueue_one",), acc)["enqueue_one"],
        "redis_bulk": drain_costs["enqueue_bulk"],
        "redis_drain": drain_costs["drain"],
        "redis_clean": summary.redis_costs(cln, ("drain",), acc)["drain"],
        "ok": f"{counts} of {total}",
        "errors": errors,
    }


def per_run(
    node: Params, target: str, figure: str | None = None
) -> list[tuple[int, float | None, float | None]]:
    """(run, off, on) of one target's figure (or of another ``figure`` of its round's same
    phase, e.g. the drain's ``steady_rate``) in every run."""
    kind, path, _ = TARGETS[target]
    if figure is not None:
        path = (path[0], figure)
    by = {mode: {r["run"]: r for r in node[mode][kind]} for mode in MODES}
    runs = sorted(set(by["off"]) | set(by["on"]))

    def fig(mode: str, run: int) -> float | None:
        res = by[mode].get(run)
        return None if res is None or "error" in res else summary.dig(res, *path)

    return [(run, fig("off", run), fig("on", run)) for run in runs]


def _interleaved(data: dict[str, Any]) -> list[Params]:
    """The interleaved producer loops of the family rounds that did not fail."""
    runs = section.ok_runs(data["systems"].get("taskq", []))
    return [r["interleaved"] for r in runs if "interleaved" in r]


def targets(data: dict[str, Any]) -> dict[str, Params]:
    """Each target: the median over the runs of each run's own ratio (on / off), PASS at >=
    SIGNED_VS_OFF, from the interleaved producer loops for the enqueue rates and from the
    separate rounds for the drain; the separate rounds' figures always beside it (for the
    drain, its "after 1st job" ratio).

    Ratios are paired within a run on purpose: a burst of other load lasts seconds and hits
    one round of one pair, which the median of the pairs' ratios leaves out, while a ratio of
    medians can set the off round of one run against the on round of another."""
    node = data.get("rounds", {}).get("taskq")
    ab = [
        r["interleaved"]
        for r in section.ok_runs(data["systems"].get("taskq", []))
        if "interleaved" in r
    ]
    s = {mode: mode_summary(node[mode]) for mode in MODES} if node else None
    out = {}
    for key in TARGETS:
        t: Params = {"rounds": None, "interleaved": None}
        if node and s:
            runs = [div(on, off) for _, off, on in per_run(node, key)]
            t["rounds"] = {
                "value": med(runs), "runs": runs, "off": s["off"][key], "on": s["on"][key],
                "of_medians": div(s["on"][key], s["off"][key]),
            }  # fmt: skip
            if key == "drain":
                steady = [div(on, off) for _, off, on in per_run(node, key, "steady_rate")]
                t["steady"] = {"value": med(steady), "runs": steady}
        if key in JUDGED_INTERLEAVED and ab:
            runs = [div(r[key]["on"], r[key]["off"]) for r in ab]
            t["interleaved"] = {
                "value": med(runs), "runs": runs,
                "off": med([r[key]["off"] for r in ab]),
                "on": med([r[key]["on"] for r in ab]),
            }  # fmt: skip
        t["judged_on"] = "interleaved" if key in JUDGED_INTERLEAVED else "rounds"
        judged = t[t["judged_on"]]
        t["value"] = judged["value"] if judged else None
        t["pass"] = None if t["value"] is None else t["value"] >= SIGNED_VS_OFF
        out[key] = t
    return out


def check_results(data: dict[str, Any]) -> list[Params]:
    """The family rounds' checks (one per run that did not fail)."""
    return [r["check"] for r in section.ok_runs(data["systems"].get("taskq", []))]


def _cpu_cell(c: Params | None) -> str:
    return "n/a" if not c else f"{c['cpu_us']:.1f}"


TARGET_HEADER = ["target", "need", "judged on", "on / off (median of the runs' ratios)",
                 "verdict", "each run", "off / on (jobs/s, medians)",
                 "beside it: on / off (median; each run)"]  # fmt: skip
FIGURES_HEADER = [
    "signing", "enqueue 1/call (jobs/s)", "bulk enqueue (jobs/s)", "drain (jobs/s)",
    "drain after 1st job (jobs/s)", "start-up (s)", "enqueue 1/call: Redis µs/job",
    "bulk enqueue: Redis µs/job", "drain, clean: Redis µs/job", "drain, contended: Redis µs/job",
    "drain, clean: Redis CPU µs/job", "ok runs (enqueue+drain+clean)",
]  # fmt: skip
RUNS_HEADER = ["run", "first", "load average at the start", "enqueue 1/call off / on",
               "ratio", "bulk enqueue off / on", "ratio", "drain off / on", "ratio",
               "drain after 1st job: ratio"]  # fmt: skip
MICRO_HEADER = ["per job", "signing off (µs)", "signing on (µs)", "added (µs)", "what"]


AB_HEADER = ["producer loop, interleaved in one process", "signing off (jobs/s)",
             "signing on (jobs/s)", "on / off", "each run (on / off)",
             "producer CPU µs/job off / on", "added CPU µs/job"]  # fmt: skip


def _ab_rows(data: dict[str, Any]) -> list[list[str]]:
    """The interleaved producer loops: medians of each mode's rate, their ratio, each run's."""
    runs = [
        r["interleaved"]
        for r in section.ok_runs(data["systems"].get("taskq", []))
        if "interleaved" in r
    ]
    if not runs:
        return []
    rows = []
    for key, what in (("enqueue_one", "single-call enqueue (`delay`), blocks of {block}"),
                      ("enqueue_bulk", "bulk enqueue (`starmap`), one batch of {batch} per "
                       "block")):  # fmt: skip
        off = med([r[key]["off"] for r in runs])
        on = med([r[key]["on"] for r in runs])
        each = ", ".join(pct(div(r[key]["on"], r[key]["off"])) for r in runs)
        label = what.format(block=runs[0]["one_block"], batch=f"{runs[0]['bulk_batch']:,}")
        cpu = {mode: med([r[key].get(f"cpu_us_{mode}") for r in runs]) for mode in MODES}
        added = None if None in cpu.values() else cpu["on"] - cpu["off"]  # type: ignore[operator]
        rows.append([f"{label}, {runs[0][key]['jobs']:,} jobs per mode", num(off), num(on),
                     pct(div(on, off)), each,
                     f"{num(cpu['off'], '.1f')} / {num(cpu['on'], '.1f')}",
                     num(added, ".1f")])  # fmt: skip
    return rows


def _micro_med(data: dict[str, Any]) -> Params:
    runs = [r["micro"] for r in section.ok_runs(data["systems"].get("taskq", [])) if "micro" in r]
    if not runs:
        return {}
    return {k: med([r.get(k) for r in runs]) for k in runs[0]}


def _micro_rows(mc: Params) -> list[list[str]]:
    if not mc:
        return []

    def added(a: str, b: str) -> str:
        return num(None if mc[a] is None or mc[b] is None else mc[b] - mc[a], ".2f")

    return [
        ["encode (`App.encode`: the producer's, per job)", num(mc["encode_off"], ".2f"),
         num(mc["encode_on"], ".2f"), added("encode_off", "encode_on"),
         "msgpack of the map; on: + `Signer.sign` (HMAC-SHA256, hex, msgpack trailer, concat)"],
        ["decode (`Message.decode`: the worker's, per job)", num(mc["decode_off"], ".2f"),
         num(mc["decode_on"], ".2f"), added("decode_off", "decode_on"),
         "on: the plain trailer split off (or, for any other body, found after the map), then "
         "`Signer.verify`"],
        ["`Signer.sign(body)`", "", num(mc["sign"], ".2f"), "", "the trailer, appended"],
        ["`Signer.verify(body, trailer)`", "", num(mc["verify"], ".2f"), "",
         "unpack the trailer, slice the map, HMAC, `compare_digest`"],
        ["`hmac.digest(key, map, 'sha256')`", "", num(mc["hmac_digest"], ".2f"), "",
         "the MAC alone (OpenSSL one-shot HMAC, key set up on every call)"],
        ["`hmac.digest(...).hex()`", "", num(mc["hmac_hex"], ".2f"), "",
         "the MAC as the trailer carries it"],
    ]  # fmt: skip


def _expected(mc: Params, off: Params, procs: int) -> list[str]:
    """What the micro-costs alone predict for each ratio at the measured off rates."""
    if not mc or mc.get("encode_on") is None:
        return []

    def pred(rate: float | None, added_us: float, share: float) -> str:
        if rate is None:
            return "n/a"
        return pct(1 / (1 + added_us * rate / (share * 1e6)))

    enc = mc["encode_on"] - mc["encode_off"]
    dec = mc["decode_on"] - mc["decode_off"]
    return [
        f"- Expected from the micro-costs alone (one producer process; the drain's {procs} "
        f"worker processes each pay the decode cost on their share of the jobs): single-call "
        f"enqueue {pred(off['enqueue_one'], enc, 1)}, bulk enqueue "
        f"{pred(off['enqueue_bulk'], enc, 1)}, drain {pred(off['drain'], dec, procs)}."
    ]


def _check_lines(checks: Sequence[Params]) -> list[str]:
    if not checks:
        return ["- Check: not run (the family's round failed)."]
    bad = [c for c in checks if not c["ok"]]
    c = checks[0]
    if bad:
        return [f"- Check: **FAIL** in {len(bad)} of {len(checks)} run(s): {json.dumps(bad[0])}"]
    return [
        f"- Check ({len(checks)} of {len(checks)} runs ok): a job enqueued by "
        "`App(signing_keys=[key])` is signed in the stream and one enqueued by the plain app "
        "is not; a worker started with only `TASKQ_SIGNING_KEYS` (the command of the on "
        f"rounds, `-c 1`) ran the signed job and dead-lettered the other (`{c['reasons'][0]}`)."
    ]


def render(data: dict[str, Any]) -> list[str]:
    """The section body: targets, figures and Redis time, each run, micro-costs, the check."""
    params = data["meta"]["params"]
    node = data.get("rounds", {}).get("taskq")
    meta = data["meta"].get("rounds", {})
    if not node:
        return ["taskq: not available yet; nothing measured."] if data["meta"]["skipped"] else []
    n, m, procs = params["drain_jobs"], params["enqueue_jobs"], params["procs"]
    s = {mode: mode_summary(node[mode]) for mode in MODES}
    t = targets(data)
    cpus = meta.get("clean_cpus")
    clean_text = (
        f"an untimed clean pass of the same drain in every run (worker tree and producer on "
        f"CPU {', '.join(map(str, cpus))}, off redis-server's)"
        if cpus
        else "**no clean pass** (nothing pinned): the Redis figures are the timed drain's"
    )
    argv = meta.get("worker_argv", {}).get("on") or meta.get("worker_argv", {}).get("off")
    command = f"`{shlex.join(argv)}`" if argv else "n/a"
    loads = meta.get("loadavg", {})
    busy = any(float(v.split()[0]) > report.BUSY_LOAD for v in loads.values())
    lines = [
        f"taskq only. Each run, for signing off and on, each round in a fresh agent from an "
        f"empty Redis on the main bench's app (`bench/peers/taskq_app.py`: the `noop` task, "
        f"one record and one `INCR`): {m:,} single-call enqueues (`noop.delay(i, t)`, one "
        f"round trip each, no worker), then {n:,} jobs bulk-enqueued with `noop.starmap` "
        f"(`app.enqueue_many`, batches of 1,000) and drained by {command} ({procs} worker "
        "processes), timed from just before the spawn to the last job's start (start-up "
        'included; "after 1st job" leaves it out): the main bench\'s rounds '
        f"(`bench/agent.py`). **Signing on** is the same round with `TASKQ_SIGNING_KEYS` set "
        "in its environment: the producer's `App` signs every body (HMAC-SHA256 trailer) and "
        "the worker, which inherits it, checks every body before running it. The off and on "
        "rounds of each kind run back to back, alternating which goes first from one run to "
        f"the next. Targets: each figure with signing on ≥ {SIGNED_VS_OFF:.0%} of "
        "off, judged on the median over the runs of each run's own ratio (its off and on "
        "halves ran close together, so a burst of other load that hits one half of one run "
        "drops out): the drain on these rounds, the two enqueue rates on the producer loops "
        "interleaved in one process (below), whose off and on blocks are a fraction of a "
        "second apart; the separate enqueue rounds' ratios are shown beside them. Redis "
        "µs/job as in "
        "the main bench's Redis-time table (`INFO commandstats`, the task's `INCR` left out, "
        f'script time split with a `MONITOR` pass in run 1): "clean" from {clean_text}; '
        '"contended" from the timed drain.',
        "",
        md_table(TARGET_HEADER, [_target_row(key, t[key], n, m) for key in TARGETS]),
        "",
        md_table(FIGURES_HEADER, [_figures_row(mode, s[mode]) for mode in MODES]),
        "",
        md_table(RUNS_HEADER, _runs_rows(node, loads)),
        "",
    ]
    if busy:
        lines.append(
            f"- **Busy machine**: the 1-minute load average was above {report.BUSY_LOAD:g} at "
            "the start of a run (other work shares the 2 cores); the off and on rounds of "
            "each kind ran back to back, so the ratios are steadier than the rates."
        )
    for mode in MODES:
        for key, what in (("redis_clean", "drain, clean"), ("redis_bulk", "bulk enqueue"),
                          ("redis_one", "enqueue 1/call")):  # fmt: skip
            c = s[mode][key]
            if c:
                lines.append(f"- signing {mode}, {what}, per command (µs/job): "
                             f"{report.breakdown(c)}")  # fmt: skip
    mc = _micro_med(data)
    if mc:
        lines += [
            f"- Body of the bench's job: {mc['body_bytes_off']:.0f} bytes unsigned, "
            f"{mc['body_bytes_on']:.0f} signed (+{mc['body_bytes_on'] - mc['body_bytes_off']:.0f}"
            ": the trailer `[key id, hex MAC]`)."
        ]
        lines += _expected(mc, s["off"], procs)
    lines += _check_lines(check_results(data))
    ab = _ab_rows(data)
    if ab:
        lines += [
            "",
            "The producer's loops again, interleaved in one process (the family's own round, "
            "with no worker running): signing off and on in alternating blocks (off, on, on, "
            "off, ...) on the same app and connection, `app.settings` swapped between blocks. "
            "The two modes then share every moment of the machine's load, so these ratios are "
            "steadier than the separate rounds', and the enqueue targets are judged on them. "
            "The CPU columns are the producer process's own CPU time per job "
            "(`time.process_time`), which time taken by other processes does not inflate.",
            "",
            md_table(AB_HEADER, ab),
        ]
    errors = [f"- signing {mode}, {e}" for mode in MODES for e in s[mode]["errors"]]
    if errors:
        lines += ["", "Errors:", "", *errors]
    if mc:
        lines += [
            "",
            "Micro-costs (`timeit` in the agent on its CPU clock, the least of "
            f"{MICRO_REPEAT} repeats of {int(mc['number']):,} calls, median over the runs) of "
            "the bench's job (`noop(i, t)`): where signing's time goes.",
            "",
            md_table(MICRO_HEADER, _micro_rows(mc)),
        ]
    return lines


def _target_row(key: str, t: Params, n: int, m: int) -> list[str]:
    _, _, what = TARGETS[key]
    size = f"{m:,} jobs" if key == "enqueue_one" else f"{n:,} jobs"
    cell = verdict(t["pass"])
    judged = t[t["judged_on"]] or {"runs": [], "off": None, "on": None}
    source = {"interleaved": "interleaved producer loop", "rounds": "separate rounds"}
    other = t.get("steady") if key == "drain" else t["rounds"]
    other_what = "after 1st job" if key == "drain" else "separate rounds"
    beside = "n/a"
    if other:
        each = ", ".join(pct(r) for r in other["runs"])
        beside = f"{other_what}: {pct(other['value'])} ({each})"
    return [f"{what}, {size}", f"≥ {SIGNED_VS_OFF:.0%}", source[t["judged_on"]],
            f"**{pct(t['value'])}**", cell, ", ".join(pct(r) for r in judged["runs"]),
            f"{num(judged['off'])} / {num(judged['on'])}", beside]  # fmt: skip


def _figures_row(mode: str, x: Params) -> list[str]:
    return [
        mode, num(x["enqueue_one"]), num(x["enqueue_bulk"]), num(x["drain"]),
        num(x["drain_steady"]), num(x["startup_s"], ".2f"), halves.us_cell(x["redis_one"]),
        halves.us_cell(x["redis_bulk"]),
        "none" if x["redis_clean"] is None else halves.us_cell(x["redis_clean"]),
        halves.us_cell(x["redis_drain"]), _cpu_cell(x["redis_clean"]), x["ok"],
    ]  # fmt: skip


def _runs_rows(node: Params, loads: dict[str, str]) -> list[list[str]]:
    """One row per run: which mode went first, the load, each figure off / on and its ratio."""
    pairs = {key: {run: (off, on) for run, off, on in per_run(node, key)} for key in TARGETS}
    steady = {run: (off, on) for run, off, on in per_run(node, "drain", "steady_rate")}
    rows = []
    for run in sorted(pairs["drain"] | pairs["enqueue_one"]):
        first = next((r["order"] for r in node["on"]["drain"] if r["run"] == run), None)
        cells = [str(run), "on" if first == 1 else "off", loads.get(str(run), "n/a")]
        for key in ("enqueue_one", "enqueue_bulk", "drain"):
            off, on = pairs[key].get(run, (None, None))
            cells += [f"{num(off)} / {num(on)}", pct(div(on, off))]
        off, on = steady.get(run, (None, None))
        cells.append(pct(div(on, off)))
        rows.append(cells)
    return rows
