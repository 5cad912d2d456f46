"""The Markdown of the peer comparison (bench/results/RESULTS.md), from the medians of
:mod:`bench.compare.summary` and the targets of :mod:`bench.compare.targets`."""

from __future__ import annotations

import shlex
from typing import Any

from bench.common.report import md_table, num, verdict
from bench.common.runner import HIREDIS_SUFFIX
from bench.compare.summary import RAW_CEILINGS, Cost, Summary, dig
from bench.compare.targets import exceeded_budgets, headline

BUSY_LOAD = 0.5
BUSY = " (**busy machine**: other processes were running, figures are noisier)"


def figures_table(labels: dict[str, str], summary: dict[str, Summary]) -> str:
    """Main figures, one row per system."""
    header = [
        "system", "enqueue 1/call (jobs/s)", "bulk enqueue (jobs/s)", "drain (jobs/s)",
        "drain after 1st job (jobs/s)", "start-up (s)", "p50 (ms)", "p99 (ms)",
        "RSS master (MB)", "RSS children (MB)", "idle CPU (%)", "ok runs (enqueue+drain)",
    ]  # fmt: skip
    rows = []
    for name, s in summary.items():
        kids = " / ".join(f"{x:.1f}" for x in s["rss_children_mb"]) or "n/a"
        master = "n/a" if s["rss_master_mb"] is None else f"{s['rss_master_mb']:.1f}"
        startup = "n/a" if s["startup_s"] is None else f"{s['startup_s']:.2f}"
        rows.append([
            labels.get(name, name), num(s["enqueue_one"]), num(s["enqueue_bulk"]),
            num(s["drain"]), num(s["drain_steady"]), startup, num(s["p50_ms"], ".2f"),
            num(s["p99_ms"], ".2f"), master, kids, num(s["idle_cpu_pct"], ".2f"), s["runs_ok"],
        ])  # fmt: skip
    return md_table(header, rows)


def raw_table(raw: dict[str, dict[str, Any]]) -> str:
    """Raw redis-py ceilings, one column per client variant."""
    header = ["raw ceiling (msgs/s)", *raw.keys()]
    rows = [[label, *(num(raw[v].get(key)) for v in raw)] for key, label in RAW_CEILINGS]
    return md_table(header, rows)


def prefetch_table(labels: dict[str, str], prefetch: dict[str, Summary]) -> str:
    """taskq drain for each --prefetch value."""
    rows = []
    for name, pf in prefetch.items():
        for value, row in pf["by_prefetch"].items():
            mark = " (best)" if value == pf["best_prefetch"] else ""
            clean = dig(row, "redis_clean", "drain", "us_per_job")
            contended = dig(row, "redis", "drain", "us_per_job")
            rows.append([labels.get(name, name), f"`--prefetch {value}`{mark}",
                         num(row["drain"]), num(row["drain_steady"]),
                         "none" if clean is None else num(clean, ".1f"),
                         num(contended, ".1f")])  # fmt: skip
    header = ["system", "worker option", "drain (jobs/s)", "drain after 1st job (jobs/s)",
              "Redis µs/job, clean", "Redis µs/job, contended"]  # fmt: skip
    return md_table(header, rows)


def _top(values: dict[str, float], n: int = 6) -> str:
    """The ``n`` largest per-command figures (0.01 µs or more), the rest summed."""
    items = [(k, v) for k, v in values.items() if v >= 0.005]
    shown = [f"{k.replace('|', ' ').upper()} {v:.2f}" for k, v in items[:n]]
    rest = sum(values.values()) - sum(v for _, v in items[:n])
    return ", ".join(shown + ([f"other {rest:.2f}"] if rest >= 0.005 else [])) or "none"


def breakdown(c: dict[str, Any]) -> str:
    """Top-level commands, then what scripts and MULTI/EXEC blocks ran (µs per job)."""
    parts = [_top(c["top_us"])]
    for key, label in (("in_scripts_us", "inside scripts: "), ("in_exec_us", "inside EXEC: ")):
        if sum(c[key].values()) >= 0.005:
            parts.append(label + _top(c[key]))
    return "; ".join(parts)


def _total(c: Cost | None) -> str:
    if not c:
        return "n/a"
    return num(c["us_per_job"], ".1f") + (" (upper bound)" if c["split"] == "upper bound" else "")


def _cost_cells(clean: Cost | None, contended: Cost | None) -> list[str]:
    """Clean and contended totals, then the details of the clean cost (else the contended)."""
    c, _ = headline(clean, contended)
    first = [_total(clean) if clean else "none", _total(contended)]
    if not c:
        return [*first, *["n/a"] * 8]
    return [
        *first, num(c["per_core"]), num(c["script_us"], ".1f"),
        num(c["inside_scripts_us"], ".1f"), num(c["exec_us"], ".1f"),
        num(c["inside_exec_us"], ".1f"), breakdown(c), num(c["cpu_us"], ".1f"),
        num(c["task_incr_us"], ".1f"),
    ]  # fmt: skip


RedisRow = tuple[str, str, Cost | None, Cost | None, Cost | None, Cost | None]


def redis_rows(labels: dict[str, str], summary: dict[str, Any]) -> list[RedisRow]:
    """(system, configuration, clean drain, contended drain, enqueue 1/call, bulk) costs,
    for the Redis-time table."""
    rows: list[RedisRow] = []
    for name, s in summary["systems"].items():
        label, r = labels.get(name, name), s["redis"]
        rows.append((label, "default", dig(s, "redis_clean", "drain"), r.get("drain"),
                     r.get("enqueue_one"), r.get("enqueue_bulk")))  # fmt: skip
        for value, row in (dig(summary, "prefetch", name, "by_prefetch") or {}).items():
            r = row["redis"]
            rows.append((label, f"`--prefetch {value}`", dig(row, "redis_clean", "drain"),
                         r.get("drain"), None, r.get("enqueue_bulk")))  # fmt: skip
    floor = summary.get("floor", "consume_floor")
    config = "raw floor" if floor == "consume_floor" else "raw batched consume (no INCR)"
    for name, raw in summary["raw"].items():
        r = raw["redis"]
        rows.append((labels.get(name, name), config, dig(raw, "redis_clean", floor),
                     r.get(floor), r.get("xadd_one"), r.get("xadd_pipelined")))  # fmt: skip
    return rows


REDIS_NOTE = (
    "From `INFO commandstats` deltas around each phase: the time Redis spent executing the "
    "queue's commands, per job, start-up and the last acks included; the task's own `INCR` is "
    "left out (its column). Scripts and `EXEC` rows include the commands they ran; those "
    "commands, which Redis also counts under their own names, are counted once (split found "
    'with `MONITOR` in an untimed pass; "upper bound" where that pass is missing). '
    '"drain, clean" comes from an untimed clean pass of the same drain in which every client '
    "process (worker tree or raw consumers, and the producer) ran on CPUs other than "
    "redis-server's, so that nothing preempted Redis in the middle of a command; the budgets "
    'and the columns after "contended" use it. "drain, contended" is the timed drain\'s own '
    "window, where workers may run on redis-server's CPU: a command during which Redis was "
    "descheduled also counts the wait, which can inflate it, long commands (scripts) more "
    'than short ones. Where the clean column says "none" (no clean pass), the columns after '
    'it are the contended ones. "jobs/s per Redis core" = 1e6 / drain µs per job: the '
    "fleet's ceiling if command execution were Redis's only work. \"Redis CPU\" is the "
    "server's main-thread CPU time per job, network I/O and the task's `INCR` included. The "
    "enqueue phases run with no worker and the producer on another CPU than Redis: nothing "
    "contends with Redis there."
)


def redis_table(labels: dict[str, str], summary: dict[str, Any]) -> str:
    """Redis time per job: drain cost (clean, contended) with breakdown, ceiling, enqueues."""
    header = [
        "system", "configuration", "drain, clean: Redis µs/job",
        "drain, contended: Redis µs/job", "jobs/s per Redis core",
        "scripts µs/job (incl. inside)", "commands inside scripts", "EXEC µs/job (incl. inside)",
        "commands inside EXEC", "per command (µs/job)", "Redis CPU µs/job", "task INCR µs/job",
        "enqueue 1/call: Redis µs/job", "bulk enqueue: Redis µs/job",
    ]  # fmt: skip
    rows = []
    for label, config, clean, contended, one, bulk in redis_rows(labels, summary):
        one_us = num(one["us_per_job"], ".1f") if one else "n/a"
        bulk_us = num(bulk["us_per_job"], ".1f") if bulk else "n/a"
        rows.append([label, config, *_cost_cells(clean, contended), one_us, bulk_us])
    return md_table(header, rows)


def _shown(t: dict[str, Any]) -> str:
    value = t["value"]
    if value is None:
        return "n/a"
    if t["kind"] == "cpu":
        return f"{value:.2f} %"
    if t["kind"] == "budget":
        return f"{value:.1f} µs"
    return f"{100 * value:.0f} %" if "%" in t["need"] else f"{value:.2f}x"


def targets_table(by_variant: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> str:
    """One row per target: value and PASS/FAIL for each taskq variant."""
    variants = list(by_variant)
    header = ["target", "need"]
    for v in variants:
        header += [labels.get(v, v), ""]
    header.append("compared")
    rows = []
    for i, first in enumerate(by_variant[variants[0]]):
        row = [first["target"], first["need"]]
        details = []
        for v in variants:
            t = by_variant[v][i]
            fail = "**BUDGET EXCEEDED**" if t["kind"] == "budget" else "**FAIL**"
            row += [_shown(t), fail if t["pass"] is False else verdict(t["pass"])]
            details.append(t["detail"])
        rows.append([*row, "; ".join(details)])
    return md_table(header, rows)


def _header(meta: dict[str, Any]) -> list[str]:
    m, p = meta["machine"], meta["params"]
    lines = [
        f"- Date: {meta['started']} (took {meta['elapsed_s'] / 60:.1f} min)",
        f"- Command, from the repository root: `{meta['command']}`",
        f"- Machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gib']} GiB RAM, {m['os']}, "
        f"Linux {m['kernel']}; producer, workers and Redis share these cores",
        f"- Load average before / after: {meta['loadavg_before']} / {meta['loadavg_after']}"
        + (BUSY if float(meta["loadavg_before"].split()[0]) > BUSY_LOAD else ""),
        f"- Redis: private `redis-server` {meta['redis_version']} on 127.0.0.1, no persistence, "
        "FLUSHALL before every measurement",
        f"- Sizes: {p['jobs']:,} jobs per drain and per bulk enqueue (batches of {p['batch']:,}), "
        f"{p['enqueue_jobs']:,} single-call enqueues, {p['latency_samples']:,} latency probes, "
        f"{p['idle_seconds']:g} s idle window, {p['procs']} worker processes; "
        f"medians of {p['runs']} run(s)",
        "- CPU placement: " + _placement(p, meta.get("clean", {})),
    ]
    if meta["skipped"]:
        lines.append(
            "- Not measured: " + "; ".join(f"{k} ({v})" for k, v in meta["skipped"].items())
        )
    return lines


def _placement(params: dict[str, Any], clean: dict[str, Any]) -> str:
    """The header's CPU placement line: pinning, and where the clean passes ran."""
    text = (
        "redis-server pinned to one CPU, the producer to another (workers unpinned)"
        if params.get("pin")
        else "nothing pinned"
    )
    if "client_cpus" in clean:
        runs = "run 1" if clean["runs"] == 1 else f"runs 1-{clean['runs']}"
        cpus = ", ".join(map(str, clean["client_cpus"]))
        return (
            f"{text}; clean passes ({runs}): redis-server alone on CPU {clean['redis_cpu']}, "
            f"every client process (worker tree, raw consumers, producer) on CPU {cpus}"
        )
    reason = clean.get("skipped", "not recorded")
    return f"{text}; **no clean pass** ({reason}): the Redis time figures are contended"


def _versions_table(meta: dict[str, Any], labels: dict[str, str]) -> str:
    rows = []
    for name, info in meta["systems"].items():
        vers = info.get("versions", {})
        text = ", ".join(f"{k} {v}" for k, v in vers.items() if k != "hiredis_in_use" and v)
        if "hiredis_in_use" in vers:
            text += f"; hiredis {'in use' if vers['hiredis_in_use'] else 'not installed'}"
            if name.endswith(HIREDIS_SUFFIX) and not vers["hiredis_in_use"]:
                text += " (**FAILED: this row is not what its name says**)"
        argv = info.get("worker_argv")
        rows.append([labels.get(name, name), text, f"`{shlex.join(argv)}`" if argv else "n/a"])
    return md_table(["system", "versions", "worker command"], rows)


def render(data: dict[str, Any], labels: dict[str, str]) -> str:
    """The whole bench/results/RESULTS.md."""
    meta, summary = data["meta"], data["summary"]
    out = ["# taskq benchmark results", "",
           "Written by `bench/run.py`; methodology in [README.md](../README.md). Feature "
           "benchmarks (stored results, chords, async tasks): "
           "[RESULTS-features.md](RESULTS-features.md).", "",
           *_header(meta), "", "## Targets", ""]  # fmt: skip
    if summary["targets"]:
        out += [
            "Ratios from this run. `taskq` uses redis-py's pure-Python parser, like the peers; it "
            "is the configuration the targets are for. `taskq + hiredis` is an extra, held against "
            "the raw ceilings measured with hiredis.",
            "",
            targets_table(summary["targets"], labels),
        ]
    else:
        out.append("No taskq figures in this run, so no targets were evaluated.")
    out += ["", "## Figures (medians)", "", figures_table(labels, summary["systems"])]
    if summary["prefetch"]:
        out += [
            "",
            "### taskq drain with `--prefetch`",
            "",
            prefetch_table(labels, summary["prefetch"]),
        ]
    if summary["raw"]:
        raw = {labels.get(k, k): v for k, v in summary["raw"].items()}
        out += ["", "## Raw redis-py ceilings (medians)", "", raw_table(raw)]
    out += ["", "## Redis time per job (medians)", "", REDIS_NOTE, "", redis_table(labels, summary)]
    out += ["", "## Versions and worker commands", "", _versions_table(meta, labels)]
    exceeded = exceeded_budgets(summary["targets"])
    if exceeded:
        out += ["", "## Redis budget exceeded", "", *(f"- {line}" for line in exceeded)]
    errors = {k: v["errors"] for k, v in summary["systems"].items() if v["errors"]}
    if errors:
        out += ["", "## Errors", ""]
        out += [f"- {labels.get(k, k)}: {'; '.join(v)}" for k, v in errors.items()]
    return "\n".join(out) + "\n"
