"""The peer comparison's targets and Redis budgets: the thresholds (top of the file), each
target as a ratio from this run, and which budgets were exceeded.
"""

from __future__ import annotations

from typing import Any

from bench.common.report import best, num
from bench.compare.summary import Cost, Summary, dig

# ---- pass/fail thresholds; bench/README.md "Targets" explains each one
DRAIN_VS_BEST_PEER = 2.5  # drain at default settings, times the best peer's drain
FLOOR_PREFETCH = "64"  # the --prefetch value held to the queue floor besides default settings
DRAIN_VS_QUEUE_FLOOR = 0.85  # drain after the 1st job (default, --prefetch 64), share of the
# queue floor (raw.py: decode + the bench task per message, no queue machinery); the drain's
# share of the raw floor is kept as a figure in that row, not as a target
STARTUP_VS_PEER = "huey"  # worker start-up (spawn to first job) is held to this peer's
STARTUP_VS_PEER_MAX = 1.0  # ... times its start-up
IMPORT_VS_REDIS = 1.2  # `python -c "import taskq"` and `taskq --version`, times `import redis`
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

Row = tuple[str, str, str, float, float | None, str]
"""A target before judging: name, need (shown), kind, limit, value, what was compared."""


def budget_prefetch_values() -> list[str]:
    """The --prefetch values that the budgets and the floor target need measured."""
    values = [k.split()[1] for k in REDIS_BUDGET_US if k.startswith("--prefetch ")]
    return sorted({*values, FLOOR_PREFETCH}, key=int)


def _best_peer(peers: dict[str, Summary], key: str, highest: bool) -> tuple[str, float | None]:
    """(name, value) of the peer with the best ``key``."""
    return best({name: s.get(key) for name, s in peers.items()}, highest) or ("no peer", None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


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
    startup: Summary | None = None,
) -> list[dict[str, Any]]:
    """The targets for one taskq variant, as ratios from this run, then its budgets.

    ``startup``: the variant's start-up medians (``summary.summarize_startup``), if measured.

    Each row: target, need (shown), kind ("min" ratio / "max" ratio / "cpu" absolute /
    "budget" µs per job), limit, value, pass, and what was compared.
    """
    drain_peer, drain_best = _best_peer(peers, "drain", highest=True)
    p50_peer, p50_best = _best_peer(peers, "p50_ms", highest=False)
    p99_peer, p99_best = _best_peer(peers, "p99_ms", highest=False)
    pf = dig(prefetch or {}, "by_prefetch", FLOOR_PREFETCH) or {}
    d, one, bulk = me.get("drain"), me.get("enqueue_one"), me.get("enqueue_bulk")
    rows: list[Row] = [
        ("drain, default settings, vs best peer", f">= {DRAIN_VS_BEST_PEER:g}x", "min",
         DRAIN_VS_BEST_PEER, _ratio(d, drain_best),
         f"{num(d)} vs {drain_peer} {num(drain_best)} jobs/s"),
        _queue_floor_row("default settings", me, raw, floor_key),
        _queue_floor_row(f"--prefetch {FLOOR_PREFETCH}", pf, raw, floor_key),
        _startup_row(me, peers),
        *_import_rows(startup),
        ("single-call enqueue vs raw XADD per call", f">= {ENQUEUE_ONE_VS_XADD:.0%}", "min",
         ENQUEUE_ONE_VS_XADD, _ratio(one, raw.get("xadd_one")),
         f"{num(one)} vs {num(raw.get('xadd_one'))} jobs/s"),
        ("bulk enqueue vs pipelined XADD", f">= {BULK_VS_PIPELINED:.0%}", "min",
         BULK_VS_PIPELINED, _ratio(bulk, raw.get("xadd_pipelined")),
         f"{num(bulk)} vs {num(raw.get('xadd_pipelined'))} jobs/s"),
        ("enqueue->start p50 vs best peer p50", f"<= {P50_VS_BEST_PEER:g}x", "max",
         P50_VS_BEST_PEER, _ratio(me.get("p50_ms"), p50_best),
         f"{num(me.get('p50_ms'), '.2f')} vs {p50_peer} {num(p50_best, '.2f')} ms"),
        ("enqueue->start p99 vs best peer p99", f"<= {P99_VS_BEST_PEER:g}x", "max",
         P99_VS_BEST_PEER, _ratio(me.get("p99_ms"), p99_best),
         f"{num(me.get('p99_ms'), '.2f')} vs {p99_peer} {num(p99_best, '.2f')} ms"),
        ("idle worker CPU, % of one core", f"< {IDLE_CPU_PCT:g}%", "cpu", IDLE_CPU_PCT,
         me.get("idle_cpu_pct"), "whole worker tree over the idle window"),
    ]  # fmt: skip
    rows += _budget_rows(me, prefetch)
    return [
        {"target": name, "need": need, "kind": kind, "limit": limit, "value": value,
         "pass": _judge(kind, limit, value), "detail": f"{variant}: {detail}"}
        for name, need, kind, limit, value, detail in rows
    ]  # fmt: skip


def _queue_floor_row(config: str, drain: Summary, raw: dict[str, Any], floor_key: str) -> Row:
    """The drain after the 1st job against the queue floor; the whole drain's share of the raw
    floor (``floor_key``) shown beside it, as a figure."""
    queue_floor, floor = raw.get("consume_queue_floor"), raw.get(floor_key)
    steady = drain.get("drain_steady")
    whole = _ratio(drain.get("drain"), floor)
    whole_note = "n/a" if whole is None else f"{100 * whole:.0f} %"
    return (f"drain after the 1st job, {config}, vs queue floor",
            f">= {DRAIN_VS_QUEUE_FLOOR:.0%}", "min", DRAIN_VS_QUEUE_FLOOR,
            _ratio(steady, queue_floor),
            f"{config}: {num(steady)} vs {num(queue_floor)} jobs/s (figure, not a target: the "
            f"whole drain {num(drain.get('drain'))} jobs/s, start-up included, is {whole_note} "
            f"of the raw floor {num(floor)})")  # fmt: skip


def _startup_row(me: Summary, peers: dict[str, Summary]) -> Row:
    peer = peers.get(STARTUP_VS_PEER, {}).get("startup_s")
    mine = me.get("startup_s")
    return (f"worker start-up vs {STARTUP_VS_PEER}", f"<= {STARTUP_VS_PEER_MAX:g}x", "max",
            STARTUP_VS_PEER_MAX, _ratio(mine, peer),
            f"spawn to 1st job {num(mine, '.3f')} vs {num(peer, '.3f')} s")  # fmt: skip


IMPORT_COMMANDS = (("import_taskq", "`import taskq`"), ("taskq_version", "`taskq --version`"))


def _import_rows(startup: Summary | None) -> list[Row]:
    medians = (startup or {}).get("median_s", {})
    base = medians.get("import_redis")
    return [
        (f"{shown} vs `import redis`", f"<= {IMPORT_VS_REDIS:g}x", "max", IMPORT_VS_REDIS,
         _ratio(medians.get(key), base),
         f"{num(_ms(medians.get(key)), '.0f')} vs {num(_ms(base), '.0f')} ms (median of "
         f"{(startup or {}).get('rounds', 'n/a')} spawns)")
        for key, shown in IMPORT_COMMANDS
    ]  # fmt: skip


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


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


def _budget_rows(me: Summary, prefetch: Summary | None) -> list[Row]:
    rows = []
    for config, limit in REDIS_BUDGET_US.items():
        clean, contended = config_costs(config, me, prefetch)
        found, basis = headline(clean, contended)
        c = found or {}
        also = f" (contended {num(contended['us_per_job'], '.1f')})" if clean and contended else ""
        detail = (
            f"{config}: {basis} {num(c.get('us_per_job'), '.1f')} µs/job{also}, scripts "
            f"{num(c.get('script_us'), '.1f')} of which commands inside "
            f"{num(c.get('inside_scripts_us'), '.1f')} ({c.get('split', 'n/a')})"
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
