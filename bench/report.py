"""Medians, target ratios and the Markdown report (bench/RESULTS.md)."""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Sequence
from typing import Any

BUSY_LOAD = 0.5
BUSY = " (**busy machine**: other processes were running, figures are noisier)"

Run = dict[str, Any]
Summary = dict[str, Any]

# (raw ceiling key, label) in display order
RAW_CEILINGS = [
    ("xadd_one", "XADD, one per call"),
    ("xadd_pipelined", "XADD, pipelined x1000"),
    ("consume_batched", "2 procs: XREADGROUP COUNT 100 + pipelined XACK+XDEL"),
    ("consume_single", "2 procs: XREADGROUP COUNT 1 + XACK+XDEL per message"),
]


def med(values: Sequence[float | None]) -> float | None:
    """Median of the values that exist, None if there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def dig(run: Run, *path: str) -> Any:
    """run[path[0]][path[1]]..., None when any level is missing."""
    node: Any = run
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _children_mb(runs: Sequence[Run]) -> list[float]:
    """Element-wise median child RSS (MB), largest first."""
    lists = [sorted(dig(r, "idle", "rss_children_kb") or [], reverse=True) for r in runs]
    lists = [x for x in lists if x]
    if not lists:
        return []
    if len({len(x) for x in lists}) > 1:
        lists = [lists[-1]]
    return [statistics.median(col) / 1024 for col in zip(*lists, strict=True)]


def summarize_system(enqueue_runs: Sequence[Run], drain_runs: Sequence[Run]) -> Summary:
    """Median figures of one system over its runs (failed runs left out)."""
    enq = [r for r in enqueue_runs if "error" not in r]
    dr = [r for r in drain_runs if "error" not in r]

    def m(*path: str) -> float | None:
        return med([dig(r, *path) for r in dr])

    rss = m("idle", "rss_master_kb")
    return {
        "enqueue_one": med([dig(r, "enqueue_one", "rate") for r in enq]),
        "enqueue_bulk": m("enqueue_bulk", "rate"),
        "drain": m("drain", "rate"),
        "drain_steady": m("drain", "steady_rate"),
        "startup_s": m("drain", "startup_s"),
        "p50_ms": m("latency", "p50_ms"),
        "p99_ms": m("latency", "p99_ms"),
        "rss_master_mb": rss / 1024 if rss is not None else None,
        "rss_children_mb": _children_mb(dr),
        "idle_cpu_pct": m("idle", "cpu_pct"),
        "runs_ok": f"{len(enq)}+{len(dr)} of {len(enqueue_runs)}+{len(drain_runs)}",
        "errors": [r["error"] for r in [*enqueue_runs, *drain_runs] if "error" in r],
    }


def summarize_raw(runs: Sequence[Run]) -> dict[str, float | None]:
    """Median rate of each raw ceiling."""
    ok = [r for r in runs if "error" not in r]
    return {key: med([dig(r, key, "rate") for r in ok]) for key, _ in RAW_CEILINGS}


def summarize_prefetch(by_value: dict[str, list[Run]]) -> Summary:
    """Median drain per --prefetch value, and the best value."""
    rows = {
        value: {
            "drain": med([dig(r, "drain", "rate") for r in runs]),
            "drain_steady": med([dig(r, "drain", "steady_rate") for r in runs]),
        }
        for value, runs in by_value.items()
    }
    scored = [(row["drain"], value) for value, row in rows.items() if row["drain"] is not None]
    best = max(scored)[1] if scored else None
    return {
        "by_prefetch": rows,
        "best_prefetch": best,
        "best_drain": rows[best]["drain"] if best else None,
        "best_drain_steady": rows[best]["drain_steady"] if best else None,
    }


# ------------------------------------------------------------------ targets


def rate(v: float | None) -> str:
    """A rate for humans."""
    return "n/a" if v is None else f"{v:,.0f}"


def ms(v: float | None) -> str:
    """Milliseconds (or a percentage) for humans."""
    return "n/a" if v is None else f"{v:.2f}"


def _best_peer(peers: dict[str, Summary], key: str, highest: bool) -> tuple[str, float | None]:
    """(name, value) of the peer with the best ``key``."""
    vals = [(s[key], name) for name, s in peers.items() if s.get(key) is not None]
    if not vals:
        return "no peer", None
    value, name = max(vals) if highest else min(vals)
    return name, value


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def targets(
    variant: str,
    me: Summary,
    prefetch: Summary | None,
    raw: dict[str, float | None],
    peers: dict[str, Summary],
) -> list[dict[str, Any]]:
    """The issue's targets for one taskq variant, as ratios from this run.

    Each row: target, need (shown), kind ("min" ratio / "max" ratio /
    "cpu" absolute), limit, value, pass, and what was compared.
    """
    drain_peer, drain_best = _best_peer(peers, "drain", highest=True)
    celery = peers.get("celery", {}).get("drain")
    p50_peer, p50_best = _best_peer(peers, "p50_ms", highest=False)
    p99_peer, p99_best = _best_peer(peers, "p99_ms", highest=False)
    pf = prefetch or {"best_drain": None, "best_prefetch": None, "best_drain_steady": None}
    batched = raw.get("consume_batched")
    steady = _ratio(pf["best_drain_steady"], batched)
    steady_note = "n/a" if steady is None else f"{100 * steady:.0f} %"
    d, one, bulk = me.get("drain"), me.get("enqueue_one"), me.get("enqueue_bulk")
    rows: list[tuple[str, str, str, float, float | None, str]] = [
        ("drain, default settings, vs best peer", ">= 1.5x", "min", 1.5,
         _ratio(d, drain_best), f"{rate(d)} vs {drain_peer} {rate(drain_best)} jobs/s"),
        ("drain, default settings, vs Celery", ">= 4x", "min", 4.0,
         _ratio(d, celery), f"{rate(d)} vs celery {rate(celery)} jobs/s"),
        ("drain, tuned --prefetch, vs batched raw ceiling", ">= 20%", "min", 0.20,
         _ratio(pf["best_drain"], batched),
         f"--prefetch {pf['best_prefetch']}: {rate(pf['best_drain'])} vs {rate(batched)} msgs/s "
         f"(after the 1st job: {rate(pf['best_drain_steady'])}, {steady_note})"),
        ("single-call enqueue vs raw XADD per call", ">= 90%", "min", 0.90,
         _ratio(one, raw.get("xadd_one")), f"{rate(one)} vs {rate(raw.get('xadd_one'))} jobs/s"),
        ("bulk enqueue vs pipelined XADD", ">= 50%", "min", 0.50,
         _ratio(bulk, raw.get("xadd_pipelined")),
         f"{rate(bulk)} vs {rate(raw.get('xadd_pipelined'))} jobs/s"),
        ("enqueue->start p50 vs best peer p50", "<= 1x", "max", 1.0,
         _ratio(me.get("p50_ms"), p50_best),
         f"{ms(me.get('p50_ms'))} vs {p50_peer} {ms(p50_best)} ms"),
        ("enqueue->start p99 vs best peer p99", "<= 2x", "max", 2.0,
         _ratio(me.get("p99_ms"), p99_best),
         f"{ms(me.get('p99_ms'))} vs {p99_peer} {ms(p99_best)} ms"),
        ("idle worker CPU, % of one core", "< 1%", "cpu", 1.0,
         me.get("idle_cpu_pct"), "whole worker tree over the idle window"),
    ]  # fmt: skip
    out = []
    for name, need, kind, limit, value, detail in rows:
        if value is None:
            passed = None
        elif kind == "min":
            passed = value >= limit
        else:
            passed = value <= limit if kind == "max" else value < limit
        out.append({"target": name, "need": need, "kind": kind, "value": value, "pass": passed,
                    "detail": f"{variant}: {detail}"})  # fmt: skip
    return out


# ----------------------------------------------------------------- markdown


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


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
            labels.get(name, name), rate(s["enqueue_one"]), rate(s["enqueue_bulk"]),
            rate(s["drain"]), rate(s["drain_steady"]), startup, ms(s["p50_ms"]), ms(s["p99_ms"]),
            master, kids, ms(s["idle_cpu_pct"]), s["runs_ok"],
        ])  # fmt: skip
    return md_table(header, rows)


def raw_table(raw: dict[str, dict[str, float | None]]) -> str:
    """Raw redis-py ceilings, one column per client variant."""
    header = ["raw ceiling (msgs/s)", *raw.keys()]
    rows = [[label, *(rate(raw[v].get(key)) for v in raw)] for key, label in RAW_CEILINGS]
    return md_table(header, rows)


def prefetch_table(labels: dict[str, str], prefetch: dict[str, Summary]) -> str:
    """taskq drain for each --prefetch value."""
    rows = []
    for name, pf in prefetch.items():
        for value, row in pf["by_prefetch"].items():
            mark = " (best)" if value == pf["best_prefetch"] else ""
            rows.append([labels.get(name, name), f"`--prefetch {value}`{mark}",
                         rate(row["drain"]), rate(row["drain_steady"])])  # fmt: skip
    header = ["system", "worker option", "drain (jobs/s)", "drain after 1st job (jobs/s)"]
    return md_table(header, rows)


def _shown(t: dict[str, Any]) -> str:
    value = t["value"]
    if value is None:
        return "n/a"
    if t["kind"] == "cpu":
        return f"{value:.2f} %"
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
            row += [_shown(t), {True: "**PASS**", False: "**FAIL**", None: "n/a"}[t["pass"]]]
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
        "- CPU placement: "
        + (
            "redis-server pinned to one CPU, the producer to another (workers unpinned)"
            if p.get("pin")
            else "nothing pinned"
        ),
    ]
    if meta["skipped"]:
        lines.append(
            "- Not measured: " + "; ".join(f"{k} ({v})" for k, v in meta["skipped"].items())
        )
    return lines


def _versions_table(meta: dict[str, Any], labels: dict[str, str]) -> str:
    rows = []
    for name, info in meta["systems"].items():
        vers = info.get("versions", {})
        text = ", ".join(f"{k} {v}" for k, v in vers.items() if k != "hiredis_in_use" and v)
        if "hiredis_in_use" in vers:
            text += f"; hiredis {'in use' if vers['hiredis_in_use'] else 'not installed'}"
        argv = info.get("worker_argv")
        rows.append([labels.get(name, name), text, f"`{shlex.join(argv)}`" if argv else "n/a"])
    return md_table(["system", "versions", "worker command"], rows)


def render(data: dict[str, Any], labels: dict[str, str]) -> str:
    """The whole bench/RESULTS.md."""
    meta, summary = data["meta"], data["summary"]
    out = ["# taskq benchmark results", "",
           "Written by `bench/run.py`; methodology in [README.md](README.md).", "",
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
    out += ["", "## Versions and worker commands", "", _versions_table(meta, labels)]
    errors = {k: v["errors"] for k, v in summary["systems"].items() if v["errors"]}
    if errors:
        out += ["", "## Errors", ""]
        out += [f"- {labels.get(k, k)}: {'; '.join(v)}" for k, v in errors.items()]
    return "\n".join(out) + "\n"
