"""Medians, target ratios, Redis budgets and the Markdown report (bench/results/RESULTS.md)."""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Sequence
from typing import Any

from bench.common.redistime import cost, median_cost
from bench.common.report import md_table, med, verdict

# ---- pass/fail thresholds; bench/README.md "Targets" explains each one
DRAIN_VS_BEST_PEER = 2.5  # drain at default settings, times the best peer's drain
FLOOR_PREFETCH = "64"  # the --prefetch value held to the raw floor
DRAIN_VS_FLOOR = 0.85  # drain at --prefetch FLOOR_PREFETCH, share of the raw floor
ENQUEUE_ONE_VS_XADD = 0.95  # single-call enqueue, share of the raw one-XADD-per-call loop
BULK_VS_PIPELINED = 0.70  # bulk enqueue, share of pipelined XADD
P50_VS_BEST_PEER = 0.8  # enqueue->start p50, times the best peer's p50
P99_VS_BEST_PEER = 1.0  # enqueue->start p99, times the best peer's p99
IDLE_CPU_PCT = 1.0  # idle worker tree, % of one core (strictly below)
# Redis budget: queue-side Redis µs per job in the drain (INFO commandstats, the task's INCR
# left out, nothing counted twice), per taskq configuration, from the clean pass (no client
# process on redis-server's CPU; the timed drain's contended figure when there is no clean
# pass). run.py exits non-zero, with a BUDGET EXCEEDED line, when one is exceeded.
REDIS_BUDGET_US: dict[str, float] = {"default": 15.0, "--prefetch 1": 15.0, "--prefetch 64": 5.0}

BUSY_LOAD = 0.5
BUSY = " (**busy machine**: other processes were running, figures are noisier)"

Run = dict[str, Any]
Summary = dict[str, Any]
Cost = dict[str, Any]  # redistime.cost / median_cost of one window

# (raw ceiling key, label) in display order
RAW_CEILINGS = [
    ("xadd_one", "XADD, one per call"),
    ("xadd_pipelined", "XADD, pipelined x1000"),
    ("consume_floor", "raw floor: 2 procs: XREADGROUP COUNT 100 + INCR per message + "
     "pipelined XACK+XDEL"),
    ("consume_queue_floor", "queue floor: the raw floor, but per message a msgpack decode of "
     "the job body and the bench task itself (its record + INCR on its own connection)"),
    ("consume_batched", "2 procs: XREADGROUP COUNT 100 + pipelined XACK+XDEL"),
    ("consume_single", "2 procs: XREADGROUP COUNT 1 + XACK+XDEL per message"),
]  # fmt: skip
ENQUEUE_WINDOWS = ("enqueue_one",)  # measured in the enqueue round; the rest in the drain round
DRAIN_WINDOWS = ("enqueue_bulk", "drain")


def prefetch_config(value: str) -> str:
    """Configuration name of a --prefetch value (REDIS_BUDGET_US keys, accounting passes)."""
    return f"--prefetch {value}"


def budget_prefetch_values() -> list[str]:
    """The --prefetch values that the budgets and the floor target need measured."""
    values = [k.split()[1] for k in REDIS_BUDGET_US if k.startswith("--prefetch ")]
    return sorted({*values, FLOOR_PREFETCH}, key=int)


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


def redis_costs(
    runs: Sequence[Run], windows: Sequence[str], accounting: Run | None
) -> dict[str, Any]:
    """Median Redis cost per job of each window over ``runs``, split with ``accounting``."""
    acc = (accounting or {}).get("accounting")
    out = {}
    for w in windows:
        costs = [
            cost(r["redis"][w], acc.get(w) if acc else None) for r in runs if dig(r, "redis", w)
        ]
        out[w] = median_cost(costs)
    return out


def summarize_system(
    enqueue_runs: Sequence[Run],
    drain_runs: Sequence[Run],
    accounting: Run | None = None,
    clean_runs: Sequence[Run] = (),
) -> Summary:
    """Median figures of one system over its runs (failed runs left out).

    ``redis`` holds the timed rounds' Redis costs (the drain's is contended), ``redis_clean``
    the drain's from the clean passes (``clean_runs``).
    """
    enq = [r for r in enqueue_runs if "error" not in r]
    dr = [r for r in drain_runs if "error" not in r]
    clean = [r for r in clean_runs if "error" not in r]

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
        "redis": redis_costs(enq, ENQUEUE_WINDOWS, accounting)
        | redis_costs(dr, DRAIN_WINDOWS, accounting),
        "redis_clean": redis_costs(clean, ("drain",), accounting),
        "runs_ok": f"{len(enq)}+{len(dr)} of {len(enqueue_runs)}+{len(drain_runs)}",
        "errors": [r["error"] for r in [*enqueue_runs, *drain_runs] if "error" in r]
        + [f"clean pass: {r['error']}" for r in clean_runs if "error" in r],
    }


def summarize_raw(runs: Sequence[Run]) -> dict[str, Any]:
    """Median rate of each raw ceiling, its Redis cost per message (contended for the consume
    ceilings), and the consume ceilings' clean Redis cost (``redis_clean``)."""
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {key: med([dig(r, key, "rate") for r in ok]) for key, _ in RAW_CEILINGS}
    for out_key, path in (("redis", ()), ("redis_clean", ("clean",))):
        out[out_key] = {
            key: median_cost(
                [cost(w, None) for r in ok if (w := dig(r, *path, key, "redis")) is not None]
            )
            for key, _ in RAW_CEILINGS
        }
    return out


def summarize_prefetch(
    by_value: dict[str, list[Run]],
    accounting: dict[str, Run],
    clean: dict[str, list[Run]] | None = None,
) -> Summary:
    """Median drain and Redis cost per --prefetch value, and the best value.

    ``clean``: the clean passes per configuration ("--prefetch N").
    """
    rows = {}
    for value, runs in by_value.items():
        config = prefetch_config(value)
        ok = [r for r in runs if "error" not in r]
        clean_ok = [r for r in (clean or {}).get(config, []) if "error" not in r]
        rows[value] = {
            "drain": med([dig(r, "drain", "rate") for r in ok]),
            "drain_steady": med([dig(r, "drain", "steady_rate") for r in ok]),
            "redis": redis_costs(ok, DRAIN_WINDOWS, accounting.get(config)),
            "redis_clean": redis_costs(clean_ok, ("drain",), accounting.get(config)),
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


def _us(v: float | None) -> str:
    """Microseconds for humans."""
    return "n/a" if v is None else f"{v:.1f}"


def _judge(kind: str, limit: float, value: float | None) -> bool | None:
    if value is None:
        return None
    if kind == "min":
        return value >= limit
    return value < limit if kind == "cpu" else value <= limit


def targets(
    variant: str,
    me: Summary,
    prefetch: Summary | None,
    raw: dict[str, Any],
    peers: dict[str, Summary],
    floor_key: str = "consume_floor",
) -> list[dict[str, Any]]:
    """The issue's targets for one taskq variant, as ratios from this run, then its budgets.

    Each row: target, need (shown), kind ("min" ratio / "max" ratio / "cpu" absolute /
    "budget" µs per job), limit, value, pass, and what was compared.
    """
    drain_peer, drain_best = _best_peer(peers, "drain", highest=True)
    p50_peer, p50_best = _best_peer(peers, "p50_ms", highest=False)
    p99_peer, p99_best = _best_peer(peers, "p99_ms", highest=False)
    pf = dig(prefetch or {}, "by_prefetch", FLOOR_PREFETCH) or {}
    floor = raw.get(floor_key)
    steady = _ratio(pf.get("drain_steady"), floor)
    steady_note = "n/a" if steady is None else f"{100 * steady:.0f} %"
    least = _ratio(raw.get("consume_queue_floor"), floor) if floor_key == "consume_floor" else None
    least_note = "" if least is None else f"; the queue floor: {100 * least:.0f} %"
    d, one, bulk = me.get("drain"), me.get("enqueue_one"), me.get("enqueue_bulk")
    rows: list[tuple[str, str, str, float, float | None, str]] = [
        ("drain, default settings, vs best peer", f">= {DRAIN_VS_BEST_PEER:g}x", "min",
         DRAIN_VS_BEST_PEER, _ratio(d, drain_best),
         f"{rate(d)} vs {drain_peer} {rate(drain_best)} jobs/s"),
        (f"drain, --prefetch {FLOOR_PREFETCH}, vs raw floor", f">= {DRAIN_VS_FLOOR:.0%}", "min",
         DRAIN_VS_FLOOR, _ratio(pf.get("drain"), floor),
         f"{rate(pf.get('drain'))} vs {rate(floor)} jobs/s "
         f"(after the 1st job: {rate(pf.get('drain_steady'))}, {steady_note}{least_note})"),
        ("single-call enqueue vs raw XADD per call", f">= {ENQUEUE_ONE_VS_XADD:.0%}", "min",
         ENQUEUE_ONE_VS_XADD, _ratio(one, raw.get("xadd_one")),
         f"{rate(one)} vs {rate(raw.get('xadd_one'))} jobs/s"),
        ("bulk enqueue vs pipelined XADD", f">= {BULK_VS_PIPELINED:.0%}", "min",
         BULK_VS_PIPELINED, _ratio(bulk, raw.get("xadd_pipelined")),
         f"{rate(bulk)} vs {rate(raw.get('xadd_pipelined'))} jobs/s"),
        ("enqueue->start p50 vs best peer p50", f"<= {P50_VS_BEST_PEER:g}x", "max",
         P50_VS_BEST_PEER, _ratio(me.get("p50_ms"), p50_best),
         f"{ms(me.get('p50_ms'))} vs {p50_peer} {ms(p50_best)} ms"),
        ("enqueue->start p99 vs best peer p99", f"<= {P99_VS_BEST_PEER:g}x", "max",
         P99_VS_BEST_PEER, _ratio(me.get("p99_ms"), p99_best),
         f"{ms(me.get('p99_ms'))} vs {p99_peer} {ms(p99_best)} ms"),
        ("idle worker CPU, % of one core", f"< {IDLE_CPU_PCT:g}%", "cpu", IDLE_CPU_PCT,
         me.get("idle_cpu_pct"), "whole worker tree over the idle window"),
    ]  # fmt: skip
    rows += _budget_rows(me, prefetch)
    return [
        {"target": name, "need": need, "kind": kind, "limit": limit, "value": value,
         "pass": _judge(kind, limit, value), "detail": f"{variant}: {detail}"}
        for name, need, kind, limit, value, detail in rows
    ]  # fmt: skip


def config_costs(
    config: str, me: Summary, prefetch: Summary | None
) -> tuple[Cost | None, Cost | None]:
    """(clean, contended) median drain Redis cost of one taskq configuration.

    ``config`` is "default" or "--prefetch N".
    """
    node: Summary | None = me
    if config != "default":
        node = dig(prefetch or {}, "by_prefetch", config.removeprefix("--prefetch "))
    node = node or {}
    return dig(node, "redis_clean", "drain"), dig(node, "redis", "drain")


def headline(clean: Cost | None, contended: Cost | None) -> tuple[Cost | None, str]:
    """The cost that the figures and budgets use, and its basis: the clean pass's, or the
    timed drain's ("contended") when there is no clean figure."""
    return (clean, "clean") if clean else (contended, "contended")


def _budget_rows(
    me: Summary, prefetch: Summary | None
) -> list[tuple[str, str, str, float, float | None, str]]:
    rows = []
    for config, limit in REDIS_BUDGET_US.items():
        clean, contended = config_costs(config, me, prefetch)
        found, basis = headline(clean, contended)
        c = found or {}
        also = f" (contended {_us(contended['us_per_job'])})" if clean and contended else ""
        detail = (
            f"{config}: {basis} {_us(c.get('us_per_job'))} µs/job{also}, scripts "
            f"{_us(c.get('script_us'))} of which commands inside "
            f"{_us(c.get('inside_scripts_us'))} ({c.get('split', 'n/a')})"
        )
        rows.append((f"Redis time per job, {config}", f"<= {limit:g} µs", "budget", limit,
                     c.get("us_per_job"), detail))  # fmt: skip
    return rows


def exceeded_budgets(by_variant: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per exceeded Redis budget (empty when every budget holds)."""
    return [
        f"BUDGET EXCEEDED: {t['target']}: {t['value']:.1f} µs > {t['limit']:g} µs ({t['detail']})"
        for rows in by_variant.values()
        for t in rows
        if t["kind"] == "budget" and t["pass"] is False
    ]


# ----------------------------------------------------------------- markdown


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


def raw_table(raw: dict[str, dict[str, Any]]) -> str:
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
            clean = dig(row, "redis_clean", "drain", "us_per_job")
            contended = dig(row, "redis", "drain", "us_per_job")
            rows.append([labels.get(name, name), f"`--prefetch {value}`{mark}",
                         rate(row["drain"]), rate(row["drain_steady"]),
                         "none" if clean is None else _us(clean), _us(contended)])  # fmt: skip
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
    return _us(c["us_per_job"]) + (" (upper bound)" if c["split"] == "upper bound" else "")


def _cost_cells(clean: Cost | None, contended: Cost | None) -> list[str]:
    """Clean and contended totals, then the details of the clean cost (else the contended)."""
    c, _ = headline(clean, contended)
    first = [_total(clean) if clean else "none", _total(contended)]
    if not c:
        return [*first, *["n/a"] * 8]
    return [
        *first, rate(c["per_core"]), _us(c["script_us"]), _us(c["inside_scripts_us"]),
        _us(c["exec_us"]), _us(c["inside_exec_us"]), breakdown(c), _us(c["cpu_us"]),
        _us(c["task_incr_us"]),
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
        one_us = _us(one["us_per_job"]) if one else "n/a"
        bulk_us = _us(bulk["us_per_job"]) if bulk else "n/a"
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
