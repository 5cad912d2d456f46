"""The peer comparison's medians: each system's, each raw ceiling's and each ``--prefetch``
value's figures over the runs, with the Redis cost per job of each window
(bench/common/redistime.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.common.redistime import cost, median_cost
from bench.common.report import med

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


def summarize_startup(runs: list[dict[str, Any]]) -> Summary:
    """Median over the runs of each start-up command's median seconds (bench/compare/startup.py)."""
    ok = [r for r in runs if "error" not in r]
    names = {name for r in ok for name in r.get("median_s", {})}
    return {
        "median_s": {n: med([dig(r, "median_s", n) for r in ok]) for n in sorted(names)},
        "rounds": sum(r.get("rounds", 0) for r in ok),
        "errors": [r["error"] for r in runs if "error" in r],
    }
