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

For taskq also the drain with results on against results off (target: on >= 90 % of
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
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis import Redis

from bench.common import envs
from bench.common.procs import BenchError
from bench.common.report import md_table, med, num, ratio
from bench.common.runner import Entry
from bench.compare.run import RAW_FOR, SYSTEMS
from bench.features import agentside, family, section
from bench.features.agentside import AgentCtx, MemoryProbe, Params
from bench.features.family import Family, Size
from bench.features.results_drain import drain_rounds, render_drain
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
