"""Results benchmark: enqueue one job, wait for its result, one at a time.

Usage, from the repository root::

    .venv/bin/python bench/features/results_bench.py            # full: 1,000 probes, 3 runs
    .venv/bin/python bench/features/results_bench.py --quick    # 200 probes, 1 run
    .venv/bin/python bench/features/results_bench.py --only celery,raw

For each system (taskq with ``store_results=True``, Celery with the Redis result
backend, RQ, arq) on an idle worker with 2 processes: ``--probes`` round trips of
"enqueue ``add(1, 2)``, wait for its result with the system's own API", p50 and p99;
then the Redis memory per stored result over ``--memory-results`` results. The raw
floor does the same with plain redis-py: XADD of the job, worker XREADGROUP, then the
result with one RPUSH to a per-job list (and XACK+XDEL in the same round trip), which
the producer waits for with BLPOP.

For taskq also the drain with results on against results off (target: on >= 80 % of
off): ``--drain-jobs`` no-op jobs (the main bench's task, bench/job.py) drained by
``taskq worker -c 2`` on the plain app and on ``App(store_results=True)``, each in the
main bench's drain round (bench/agent.py), with its Redis time per job (bench/redistime.py:
a clean pass in every run, the MONITOR accounting pass in run 1).

Writes the "Results" section of bench/results/RESULTS-features.md; bench/README.md ("Feature
benchmarks") explains it.
"""

from __future__ import annotations

import itertools
import math
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis import Redis

from bench.common import envs
from bench.common.procs import BenchError
from bench.common.report import md_table, med, num, ratio, verdict
from bench.common.rounds import alternating
from bench.common.runner import Entry, brief
from bench.compare import report, summary
from bench.compare.run import RAW_FOR, SYSTEMS
from bench.features import agentside, family, section
from bench.features.agentside import AgentCtx, MemoryProbe, Params
from bench.features.family import Family, Size
from bench.features.section import median_of
from bench.peers.featurebase import Results

EXPECTED = 3  # add(1, 2)
WARMUP = 5  # untimed probes first: the worker is up, connections are open
IDLE_S = 1.0  # the worker idles this long before the probes
GAP_S = 0.002  # idle time before each probe
TIMEOUT_S = 5.0  # wait bound of one probe
STREAM, GROUP, RESULT = "rawres:jobs", "rawres", "rawres:result:{}"


def probe_once(system: Results, timeout_s: float) -> float:
    """One enqueue + wait for the result; milliseconds."""
    t0 = time.perf_counter()
    value = system.wait(system.submit(), timeout_s)
    elapsed = (time.perf_counter() - t0) * 1e3
    if value != EXPECTED:
        raise BenchError(f"add(1, 2) returned {value!r}")
    return elapsed


def probes(system: Results, ctx: AgentCtx) -> Params:
    """Warm-up, idle, then ``ctx.probes`` sequential probes bounded by the deadline."""
    start = time.monotonic()
    probe_once(system, ctx.deadline)  # the worker starts up meanwhile
    startup_s = time.monotonic() - start
    for _ in range(WARMUP - 1):
        probe_once(system, TIMEOUT_S)
    time.sleep(IDLE_S)
    lat_ms: list[float] = []
    errors: list[str] = []
    stop = time.monotonic() + ctx.deadline
    for _ in range(ctx.probes):
        if time.monotonic() > stop or len(errors) > max(10, ctx.probes // 10):
            break
        time.sleep(GAP_S)
        try:
            lat_ms.append(probe_once(system, TIMEOUT_S))
        except BenchError:
            raise
        except Exception as exc:  # a timeout or a peer's error: a lost probe
            errors.append(f"{type(exc).__name__}: {exc}")
    return {
        **agentside.latency_figures(lat_ms, len(lat_ms) + len(errors)),
        "first_result_s": startup_s,
        "errors": errors[:3],
    }


def memory(system: Results, ctx: AgentCtx) -> Params:
    """Redis memory retained by ``ctx.memory_results`` stored results of ``add(1, 2)``."""
    n = ctx.memory_results
    mem = MemoryProbe(ctx.redis(), system.result_keys)
    mem.start()
    stop = time.monotonic() + ctx.deadline
    handles: list[Any] = []
    for _ in range(n):
        if time.monotonic() > stop:
            raise BenchError(f"memory: {len(handles)}/{n} submitted in {ctx.deadline:.0f}s")
        handles.append(system.submit())
    for h in handles:
        if system.wait(h, max(TIMEOUT_S, stop - time.monotonic())) != EXPECTED:
            raise BenchError("memory: wrong result")
    time.sleep(0.5)  # the last acks
    return mem.stop(n)


def figures(lat: Params, mem: Params) -> Params:
    """The scalar figures of one round (medians across runs are taken of these)."""
    return {
        "p50_ms": lat["p50_ms"],
        "p99_ms": lat["p99_ms"],
        "result_key_bytes": mem["result_key_bytes"],
        "result_keys_bytes": mem["result_keys_bytes_per_result"],
        "new_keys_bytes": mem["new_keys_bytes_per_result"],
        "used_memory_bytes": mem["used_memory_delta_per_result"],
    }


def measure(system: Results, ctx: AgentCtx, running: AbstractContextManager[Any]) -> Params:
    """Probes, then memory, while ``running`` (the workers) is entered; always stopped."""
    with running:
        lat = probes(system, ctx)
        ctx.out["latency"] = lat
        if isinstance(system, RawResults):
            system.keep = True
        mem = memory(system, ctx)
    return {"figures": figures(lat, mem), "latency": lat, "memory": mem}


def agent(system: Results, ctx: AgentCtx) -> Params:
    """One system's round, in its venv: its worker CLI with ``procs`` processes."""
    return measure(system, ctx, agentside.workers(system.worker_argvs(ctx.procs), ctx))


# ------------------------------------------------------------------ raw floor


class RawResults(Results):
    """The floor's producer: XADD the job, BLPOP its per-job result list.

    With ``keep`` (the memory phase) it waits with ``BLMOVE key key``, which leaves the
    result stored.
    """

    name = "raw"
    result_keys = RESULT.format("*")

    def __init__(self, r: Redis) -> None:
        self.r = r
        self.ids = itertools.count()
        self.keep = False

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return []

    def submit(self) -> int:
        i = next(self.ids)
        self.r.xadd(STREAM, {"id": i, "a": 1, "b": 2})
        return i

    def wait(self, handle: Any, timeout_s: float) -> Any:
        key = RESULT.format(handle)
        if self.keep:
            value = self.r.blmove(key, key, math.ceil(timeout_s), "LEFT", "RIGHT")
        else:
            reply: Any = self.r.blpop([key], timeout=timeout_s)
            value = reply[1] if reply else None
        if value is None:
            raise TimeoutError(f"no result after {timeout_s:g}s")
        return int(value)


def _raw_worker(k: int, stop: Any, url: str) -> None:
    """XREADGROUP one job, then RPUSH its result + XACK + XDEL in one round trip."""
    r = Redis.from_url(url)
    while not stop.is_set():
        reply: Any = r.xreadgroup(GROUP, f"w{k}", {STREAM: ">"}, count=1, block=100)
        for msg_id, fields in reply[0][1] if reply else ():
            pipe = r.pipeline(transaction=False)
            pipe.rpush(RESULT.format(fields[b"id"].decode()), int(fields[b"a"]) + int(fields[b"b"]))
            pipe.xack(STREAM, GROUP, msg_id)
            pipe.xdel(STREAM, msg_id)
            pipe.execute()


def raw(ctx: AgentCtx) -> Params:
    """The raw floor: ``procs`` forked consumers, the same probes and memory phase."""
    r = ctx.redis()
    r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    running = agentside.forked(_raw_worker, ctx.procs, (ctx.url,))
    return measure(RawResults(r), ctx, running)


# ------------------------------------------------------------------ drain, results on vs off

DRAIN_VS_OFF = 0.80  # target: drain with results on, share of the drain with results off
MODES = {"off": "taskq_app", "on": "taskq_results_app"}  # bench/peers module of each half
ACCOUNT_JOBS = 2_000  # jobs of the untimed MONITOR accounting pass (as run.py's default)
# What run.Runner.agent reads from the options besides this family's own: the main bench's
# bulk batch, and the task's INCR (the standard shape); no latency or idle phase here.
AGENT_OPTIONS = {"batch": 1_000, "latency_samples": 0, "idle_seconds": 0.0, "incr": True}


def _drain_entry(entry: Entry, mode: str) -> Entry:
    """The bench.compare.agent round of taskq variant ``entry`` with results ``mode`` (off, on)."""
    return Entry(f"{entry.name}-results-{mode}", MODES[mode], entry.venv,
                 f"{entry.label}, results {mode}", True)  # fmt: skip


def drain_rounds(s: family.Session, systems: Sequence[Entry], run: int) -> None:
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
    for key, value in AGENT_OPTIONS.items():
        vars(s.args).setdefault(key, value)
    meta = s.data["meta"].setdefault("drain", {})
    meta.setdefault("clean_cpus", s.runner.clean_cpus)
    modes = alternating(("off", "on"), run)
    head = f"run {run}/{s.args.runs}"
    for entry in variants:
        node = s.data.setdefault("drain", {}).setdefault(
            entry.name, {m: {"timed": [], "clean": [], "accounting": None} for m in MODES}
        )
        for clean in (False, True) if s.runner.clean_cpus else (False,):
            for mode in modes:
                res = s.runner.agent(_drain_entry(entry, mode), run, "drain", sizes=(n, 1),
                                     clean=clean)  # fmt: skip
                node[mode]["clean" if clean else "timed"].append(res)
                if res.get("worker_argv"):
                    meta.setdefault("worker_argv", {})[mode] = res["worker_argv"]
                what = "clean pass done" if clean else brief(res)
                print(f"{head}  {entry.name:<14} results {mode}: {what}", flush=True)
        if run == 1:
            for mode in modes:
                sizes = (min(n, ACCOUNT_JOBS), 1)
                res = s.runner.agent(_drain_entry(entry, mode), 0, "account", sizes=sizes)
                node[mode]["accounting"] = {k: res[k] for k in ("accounting", "error") if k in res}
                print(f"{head}  {entry.name:<14} results {mode}: accounting pass (MONITOR) "
                      f"{'ERROR' if 'error' in res else 'done'}", flush=True)  # fmt: skip


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
    """The issue's target for one taskq variant: the median over the runs of each run's own
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


def _us_cell(c: dict[str, Any] | None) -> str:
    if not c:
        return "n/a"
    bound = " (upper bound)" if c["split"] == "upper bound" else ""
    return f"{c['us_per_job']:.1f}{bound}"


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
                "none" if x["redis_clean"] is None else _us_cell(x["redis_clean"]),
                _us_cell(x["redis"]), report.breakdown(c) if c else "n/a",
                _us_cell(x["redis_bulk"]), x["ok"],
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


# ------------------------------------------------------------------ report


def _row(label: str, runs: list[Params], floor: list[Params]) -> list[str]:
    def m(key: str) -> float | None:
        return median_of(runs, key)

    return [
        label, num(m("p50_ms"), ".2f"), num(m("p99_ms"), ".2f"),
        ratio(m("p50_ms"), median_of(floor, "p50_ms")),
        ratio(m("p99_ms"), median_of(floor, "p99_ms")),
        num(m("result_key_bytes")), num(m("result_keys_bytes")), num(m("new_keys_bytes")),
        num(m("used_memory_bytes")), f"{len(section.ok_runs(runs))}/{len(runs)}",
    ]  # fmt: skip


HEADER = [
    "system", "p50 (ms)", "p99 (ms)", "p50 vs raw floor", "p99 vs raw floor",
    "result key (bytes)", "result keys per result (bytes)", "all new keys per result (bytes)",
    "used_memory Δ per result (bytes)", "ok runs",
]  # fmt: skip


def _vs_best_peer(data: dict[str, Any]) -> list[str]:
    """taskq against the best peer, per figure (lower is better for all of them)."""
    peers = [n for n, e in ENTRIES.items() if not e.is_taskq and n in data["systems"]]
    return [
        line
        for name in data["systems"]
        if ENTRIES[name].is_taskq
        for key, what in (("p50_ms", "p50"), ("p99_ms", "p99"), ("used_memory_bytes", "memory"))
        if (line := section.vs_best_peer(data, name, key, what, peers, highest=False))
    ]


def _kinds_line(label: str, runs: list[Params]) -> str | None:
    """The memory phase's new keys of one system by kind: median bytes, keys per result."""
    found: dict[str, list[dict[str, float]]] = {}
    for r in section.ok_runs(runs):
        for kind, v in (r.get("memory", {}).get("kinds") or {}).items():
            found.setdefault(kind, []).append(v)
    parts = []
    for kind, vs in found.items():
        per = med([v["keys_per_result"] for v in vs]) or 0.0
        if per >= 0.01:
            size = med([v["median_bytes"] for v in vs])
            parts.append(f"`{kind}` {num(size)} B x {per:.2f}")
    return f"- {label}: {', '.join(parts)}" if parts else None


def render(data: dict[str, Any]) -> list[str]:
    """The section body: one table, every ratio from this run."""
    rows = [
        _row(section.label(data, n), runs, data["raw"].get(RAW_FOR.get(n, "raw"), []))
        for group in ("systems", "raw")
        for n, runs in data[group].items()
    ]
    rows += section.not_available_rows(data, len(HEADER))
    out = [
        "Enqueue `add(1, 2)`, wait for its result with the system's own API, one probe at a "
        "time on an idle worker with 2 processes; latency from just before the enqueue to the "
        "result in hand. Memory per stored result over the memory phase's results: `MEMORY "
        "USAGE` of the new keys that match the system's result-key pattern (median key, then "
        "their sum per result), of all new keys, and the `used_memory` delta. Ratios: each "
        "system's latency over the raw floor's, measured in this run (taskq + hiredis against "
        "the hiredis floor).",
        "",
        md_table(HEADER, rows),
    ]
    best = _vs_best_peer(data)
    kinds = [
        line
        for group in ("systems", "raw")
        for n, runs in data[group].items()
        if (line := _kinds_line(section.label(data, n), runs))
    ]
    if kinds:
        kinds.insert(0, "New keys of the memory phase by kind (ids shown as `*`): `MEMORY USAGE` "
                     "of the median key of the kind, x keys of the kind per result:")  # fmt: skip
    drain = render_drain(data)
    return [*out, *(["", *best] if best else []), *(["", *kinds] if kinds else []),
            *(["", *drain] if drain else [])]  # fmt: skip


ENTRIES = {
    e.name: e
    for e in [
        *(Entry(s.name, "taskq_results_app", s.venv, s.label, True) for s in SYSTEMS if s.is_taskq),
        Entry("celery", "celery_results_app", envs.PEERS_VENV, "Celery"),
        Entry("rq", "rq_results_app", envs.PEERS_VENV, "RQ"),
        Entry("arq", "arq_app", envs.ARQ_VENV, "arq"),
    ]
}

FAMILY = Family(
    key="results",
    title="Results",
    module="bench.features.results_bench",
    attr="RESULTS",
    systems=list(ENTRIES.values()),
    sizes=[
        Size("probes", 1_000, 200, "enqueue+wait probes per run"),
        Size("memory_results", 10_000, 10_000, "stored results of the memory phase"),
        Size("drain_jobs", 20_000, 5_000, "jobs of each drain with results on/off; 0: none"),
    ],
    agent=agent,
    raw=raw,
    render=render,
    extra=drain_rounds,
)


if __name__ == "__main__":
    sys.exit(family.main(FAMILY))
