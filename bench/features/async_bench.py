"""Async benchmark: N jobs that each ``await asyncio.sleep(0.05)``, on 2 worker processes.

Usage, from the repository root::

    .venv/bin/python bench/features/async_bench.py            # full: 10,000 jobs, 3 runs
    .venv/bin/python bench/features/async_bench.py --quick    # 5,000 jobs, 1 run
    .venv/bin/python bench/features/async_bench.py --only arq,raw

For each system (taskq ``async def`` tasks with ``--async-concurrency``, arq with
``max_jobs``, taskiq-redis with ``--max-async-tasks``; ``--concurrency`` jobs in flight
per process, default 500): one producer enqueues the N jobs one await at a time
(``adelay``, ``enqueue_job``, ``kiq``) with no worker running, the async enqueue rate;
then the workers are started and drain them: time from spawning the workers to the last
job's end, and jobs/s. Raw floors with plain ``redis.asyncio``: one ``await xadd`` per
job; and 2 forked consumers, each an event loop with ``--concurrency`` sleeps in flight,
that XREADGROUP as many jobs as they have room for and XACK+XDEL the finished ones in
the same round trip. Writes the "Async" section of bench/results/RESULTS-features.md;
bench/README.md ("Feature benchmarks") explains it.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis import asyncio as aioredis

from bench.common import envs, record
from bench.common.procs import STALL_S, BenchError
from bench.common.report import md_table, num, ratio
from bench.common.runner import Entry
from bench.compare.run import RAW_FOR, SYSTEMS
from bench.features import agentside, family, section
from bench.features.agentside import AgentCtx, Params, Workers
from bench.features.family import Family, Size
from bench.features.section import median_of
from bench.peers.featurebase import NAP_S, Async

STREAM, GROUP = "rawasync:jobs", "rawasync"
BLOCK = 500
"""Enqueues per block of the interleaved producer loop."""
ENQUEUE_TARGET = 0.9
"""Target: async enqueue >= 90 % of a raw ``redis.asyncio`` XADD loop."""
FIELDS: dict[Any, Any] = {"job": b"x" * 64}  # a small job message, as in bench/raw.py


async def _enqueue_all(system: Async, n: int, deadline_s: float) -> Params:
    """One warm-up, then ``n`` enqueues, one await each; jobs/s."""
    await system.astart()
    try:
        await system.enqueue(n)  # warm-up: connect, load scripts (index n: not waited for)
        done = 0
        t0 = time.perf_counter()
        stop = t0 + deadline_s
        while done < n and time.perf_counter() < stop:
            await system.enqueue(done)
            done += 1
        seconds = time.perf_counter() - t0
    finally:
        await system.aclose()
    if done < n:
        raise BenchError(f"enqueue: {done}/{n} in {deadline_s:.0f}s")
    return {"jobs": done, "seconds": seconds, "rate": done / seconds}


def wait_finished(running: Workers, rec_dir: Path, n: int, deadline_s: float) -> list[int]:
    """Each job's end time (its record), sorted, once jobs 0..n-1 have all ended."""
    tail = record.Tail(rec_dir)
    ends: dict[int, int] = {}
    now = time.monotonic()
    stop, last_change = now + deadline_s, now
    while len(ends) < n:
        running.check_alive()
        before = len(ends)
        for i, t_ns in tail.new_records():
            if 0 <= i < n:
                ends.setdefault(i, t_ns)
        if len(ends) != before:
            last_change = time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            raise BenchError(f"drain stalled: no job ended for {STALL_S:.0f}s ({before}/{n})")
        if time.monotonic() > stop:
            raise BenchError(f"drain not finished after {deadline_s:.0f}s ({before}/{n})")
        time.sleep(agentside.POLL_S)
    return sorted(ends.values())


def drain_figures(n: int, t_start: int, ends: list[int], nap_s: float = NAP_S) -> Params:
    """Drain time from spawn to the last end, start-up, the rate after the first job."""
    seconds = (ends[-1] - t_start) / 1e9
    steady = (ends[-1] - ends[0]) / 1e9
    return {
        "jobs": n,
        "seconds": seconds,
        "rate": n / seconds,
        "startup_s": (ends[0] - t_start) / 1e9 - nap_s,
        "steady_rate": (n - 1) / steady if steady > 0 else None,
    }


def agent(system: Async, ctx: AgentCtx) -> Params:
    """One system's round: enqueue the jobs (no worker), then the workers drain them."""
    n = ctx.jobs
    enqueue = asyncio.run(_enqueue_all(system, n, ctx.deadline))
    ctx.out["enqueue"] = enqueue
    record.clear(ctx.record_dir)
    os.environ["BENCH_ASYNC_CONCURRENCY"] = str(ctx.concurrency)  # arq reads it at import
    argvs = system.worker_argvs(ctx.procs, ctx.concurrency)
    with agentside.workers(argvs, ctx) as running:
        drain = drain_figures(
            n, running.t_start, wait_finished(running, ctx.record_dir, n, ctx.deadline)
        )
    out = {"figures": figures(enqueue, drain), "enqueue": enqueue, "drain": drain}
    if hasattr(system, "noop_argvs"):  # taskq: the no-op drain, async def against sync
        argv = ctx.out["worker_argv"]
        noop = {kind: _noop_drain(system, ctx, kind) for kind in ("async", "sync")}
        ctx.out["worker_argv"] = argv
        out["noop"] = noop
        out["figures"] |= {f"noop_{k}_rate": v["steady_rate"] for k, v in noop.items()}
        ctx.redis().flushall()
        mixed = asyncio.run(_interleaved(system, ctx.url, n, ctx.deadline))
        out["interleaved"] = mixed
        out["figures"]["interleaved_ratio"] = mixed["ratio"]
        ctx.redis().flushall()
    return out


async def _interleaved(system: Async, url: str, n: int, deadline_s: float) -> Params:
    """The enqueue target's judge: the system's enqueue and the raw ``await r.xadd(...)``
    loop in alternating blocks of :data:`BLOCK` in this one process and event loop (raw,
    system, system, raw, ...), so both share every moment of the machine's load; the
    median of the block pairs' rate ratios. (Separate rounds a few seconds apart swung
    0.66x-1.49x on this shared machine.)"""
    r = aioredis.Redis.from_url(url)
    await system.astart()
    try:
        await system.enqueue(n)
        await r.xadd(STREAM, FIELDS)
        ratios, times = [], {"system": 0.0, "raw": 0.0}
        stop = time.perf_counter() + deadline_s
        for b in range(max(2, n // BLOCK)):
            order = ("raw", "system") if b % 2 == 0 else ("system", "raw")
            took = {}
            for who in order:
                t0 = time.perf_counter()
                for i in range(BLOCK):
                    if who == "raw":
                        await r.xadd(STREAM, FIELDS)
                    else:
                        await system.enqueue(b * BLOCK + i)
                took[who] = time.perf_counter() - t0
                times[who] += took[who]
            ratios.append(took["raw"] / took["system"])
            if time.perf_counter() > stop:
                raise BenchError("interleaved enqueue: past the deadline")
    finally:
        await system.aclose()
        await r.aclose()
    jobs = len(ratios) * BLOCK
    return {
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "system_rate": jobs / times["system"],
        "raw_rate": jobs / times["raw"],
    }


def _noop_drain(system: Any, ctx: AgentCtx, kind: str) -> Params:
    """``jobs`` no-op jobs of ``kind`` enqueued in bulk, then drained by ``procs`` workers;
    the rate after the first job (start-up aside: it is the same code for both kinds)."""
    ctx.redis().flushall()
    record.clear(ctx.record_dir)
    system.noop_enqueue(kind, ctx.jobs)
    argvs = system.noop_argvs(kind, ctx.procs, ctx.concurrency)
    with agentside.workers(argvs, ctx, tag=f"noop-{kind}") as running:
        ends = wait_finished(running, ctx.record_dir, ctx.jobs, ctx.deadline)
        return drain_figures(ctx.jobs, running.t_start, ends, nap_s=0.0)


def figures(enqueue: Params, drain: Params) -> Params:
    """The scalar figures of one round (medians across runs are taken of these)."""
    return {
        "enqueue_rate": enqueue["rate"],
        "drain_s": drain["seconds"],
        "drain_rate": drain["rate"],
        "steady_rate": drain["steady_rate"],
        "startup_s": drain["startup_s"],
    }


# ------------------------------------------------------------------ raw floors


async def _xadd_all(url: str, n: int, deadline_s: float) -> Params:
    """The async enqueue floor: ``await r.xadd(...)``, one per job, after one warm-up.

    The messages stay: the consume floor drains them.
    """
    r = aioredis.Redis.from_url(url)
    try:
        await r.xadd(STREAM, FIELDS)
        await r.xtrim(STREAM, maxlen=0)
        done = 0
        t0 = time.perf_counter()
        stop = t0 + deadline_s
        while done < n and time.perf_counter() < stop:
            await r.xadd(STREAM, FIELDS)
            done += 1
        seconds = time.perf_counter() - t0
    finally:
        await r.aclose()
    return {"jobs": done, "seconds": seconds, "rate": done / seconds}


class _Consumer:
    """One process's event loop: ``concurrency`` sleeps in flight, acks batched with reads."""

    def __init__(self, r: aioredis.Redis, name: str, concurrency: int) -> None:
        self.r, self.name, self.concurrency = r, name, concurrency
        self.inflight: set[asyncio.Task[None]] = set()
        self.acks: list[bytes] = []
        self.ends: list[int] = []
        self.wake = asyncio.Event()

    async def _job(self, msg_id: bytes) -> None:
        await asyncio.sleep(NAP_S)
        self.ends.append(time.time_ns())
        self.acks.append(msg_id)
        self.wake.set()

    async def _round_trip(self, read: bool) -> bool:
        """Ack the finished jobs and (if ``read``) fetch as many as there is room for."""
        acks, self.acks = self.acks, []
        pipe = self.r.pipeline(transaction=False)
        if acks:
            pipe.xack(STREAM, GROUP, *acks)
            pipe.xdel(STREAM, *acks)
        if read:
            free = self.concurrency - len(self.inflight)
            pipe.xreadgroup(GROUP, self.name, {STREAM: ">"}, count=free)
        replies = await pipe.execute()
        msgs = replies[-1][0][1] if read and replies[-1] else []
        for msg_id, _ in msgs:
            task = asyncio.create_task(self._job(msg_id))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
        return bool(msgs)

    async def run(self, deadline_s: float) -> None:
        """Until the stream has nothing new and every job has ended (bounded)."""
        more = True  # the last read returned jobs: the stream may have more
        stop = time.monotonic() + deadline_s
        while time.monotonic() < stop and (more or self.inflight or self.acks):
            read = more and len(self.inflight) < self.concurrency
            if read or self.acks:
                got = await self._round_trip(read)
                more = got or not read
                continue
            self.wake.clear()  # nothing to do until a job ends (no await since the check)
            await asyncio.wait_for(self.wake.wait(), timeout=5.0)


def _raw_consumer(k: int, stop: Any, ctx: AgentCtx, barrier: Any, out: Any) -> None:
    """A forked floor consumer: connect, wait for the release, drain, report its end times."""

    async def main() -> None:
        r = aioredis.Redis.from_url(ctx.url)
        await r.ping()
        barrier.wait()  # connected
        barrier.wait()  # released
        consumer = _Consumer(r, f"c{k}", ctx.concurrency)
        await consumer.run(ctx.deadline)
        await r.aclose()
        out.put((len(consumer.ends), min(consumer.ends, default=0), max(consumer.ends, default=0)))

    asyncio.run(main())


def _consume(ctx: AgentCtx) -> Params:
    """The async drain floor: the enqueue floor's messages, ``procs`` forked event loops."""
    r = ctx.redis()
    r.xgroup_create(STREAM, GROUP, id="0")
    fork = mp.get_context("fork")
    barrier, out = fork.Barrier(ctx.procs + 1), fork.Queue()
    with agentside.forked(_raw_consumer, ctx.procs, (ctx, barrier, out)):
        barrier.wait(timeout=30)
        barrier.wait(timeout=30)
        t0 = time.time_ns()
        results = [out.get(timeout=ctx.deadline + 30) for _ in range(ctx.procs)]
    done = sum(n for n, _, _ in results)
    first, last = min(f for n, f, _ in results if n), max(e for _, _, e in results)
    if done != ctx.jobs:
        raise BenchError(f"raw consume: {done}/{ctx.jobs} jobs")
    return {
        "jobs": done,
        "seconds": (last - t0) / 1e9,
        "rate": done / ((last - t0) / 1e9),
        "steady_rate": (done - 1) / ((last - first) / 1e9),
        "startup_s": (first - t0) / 1e9 - NAP_S,
    }


def raw(ctx: AgentCtx) -> Params:
    """Both floors: the async XADD loop, then the async consumers."""
    enqueue = asyncio.run(_xadd_all(ctx.url, ctx.jobs, ctx.deadline))
    ctx.out["enqueue"] = enqueue
    drain = _consume(ctx)
    return {"figures": figures(enqueue, drain), "enqueue": enqueue, "drain": drain}


# ------------------------------------------------------------------ report

HEADER = [
    "system", "enqueue, 1 await/job (jobs/s)", "enqueue vs raw XADD floor", "drain (s)",
    "drain (jobs/s)", "drain vs sleep bound", "drain vs raw consume floor",
    "drain after 1st job (jobs/s)", "start-up (s)", "ok runs",
]  # fmt: skip


def _row(label: str, runs: list[Params], floor: list[Params], bound: float) -> list[str]:
    def m(key: str) -> float | None:
        return median_of(runs, key)

    return [
        label, num(m("enqueue_rate")), ratio(m("enqueue_rate"), median_of(floor, "enqueue_rate")),
        num(m("drain_s"), ".3f"), num(m("drain_rate")), ratio(m("drain_rate"), bound),
        ratio(m("drain_rate"), median_of(floor, "drain_rate")), num(m("steady_rate")),
        num(m("startup_s"), ".2f"), f"{len(section.ok_runs(runs))}/{len(runs)}",
    ]  # fmt: skip


def render(data: dict[str, Any]) -> list[str]:
    """The section body: one table, every ratio from this run."""
    p = data["meta"]["params"]
    bound = p["procs"] * p["concurrency"] / NAP_S  # jobs/s if only the sleeps took time
    rows = [
        _row(section.label(data, n), runs, data["raw"].get(RAW_FOR.get(n, "raw"), []), bound)
        for group in ("systems", "raw")
        for n, runs in data[group].items()
    ]
    rows += section.not_available_rows(data, len(HEADER))
    peers = [n for n, e in ENTRIES.items() if not e.is_taskq and n in data["systems"]]
    out = [
        f"{p['jobs']:,} jobs that each `await asyncio.sleep({NAP_S})`, {p['procs']} worker "
        f"processes with {p['concurrency']} jobs in flight each. Enqueue: one producer, one "
        "await per job, no worker running. Drain: from spawning the workers (start-up "
        "included) to the last job's end. Sleep bound: "
        f"{p['procs']} x {p['concurrency']} / {NAP_S} s = {bound:,.0f} jobs/s, the rate if only "
        "the sleeps took time. Ratios from this run (taskq + hiredis against the hiredis "
        "floors); higher is better.",
        "",
        md_table(HEADER, rows),
    ]
    for name in (x for x in data["systems"] if ENTRIES[x].is_taskq):
        runs = data["systems"][name]
        a, s = median_of(runs, "noop_async_rate"), median_of(runs, "noop_sync_rate")
        if a and s:
            out.append(
                f"\n- {section.label(data, name)} no-op drain after the first job, "
                f"{p['procs']} processes: `async def` tasks ({p['concurrency']} in flight per "
                f"process) {a:,.0f} jobs/s, sync tasks (one at a time per process, adaptive "
                f"prefetch) {s:,.0f} jobs/s: async/sync {ratio(a, s)}"
            )
        mixed = median_of(runs, "interleaved_ratio")
        if mixed:
            each = ", ".join(f"{r['figures']['interleaved_ratio']:.2f}x" for r in runs)
            verdict = "PASS" if mixed >= ENQUEUE_TARGET else "**FAIL**"
            out.append(
                f"\n- {section.label(data, name)} enqueue vs the raw `redis.asyncio` XADD loop, "
                f"interleaved in one process (blocks of {BLOCK}, median of the block pairs' "
                f"ratios; target >= {ENQUEUE_TARGET:.0%}): **{mixed:.2f}x** {verdict} (each "
                f"run: {each}); the table's enqueue column is from separate rounds"
            )
        for key, what in (("enqueue_rate", "enqueue"), ("drain_rate", "drain")):
            line = section.vs_best_peer(data, name, key, what, peers, highest=True)
            if line:
                out.append("\n" + line)
    return out


ENTRIES = {
    e.name: e
    for e in [
        *(Entry(s.name, "taskq_async_app", s.venv, s.label, True) for s in SYSTEMS if s.is_taskq),
        Entry("arq", "arq_app", envs.ARQ_VENV, "arq"),
        Entry("taskiq", "taskiq_async_app", envs.PEERS_VENV, "taskiq-redis"),
    ]
}

FAMILY = Family(
    key="async",
    title="Async",
    module="bench.features.async_bench",
    attr="ASYNC",
    systems=list(ENTRIES.values()),
    sizes=[
        Size("jobs", 10_000, 5_000, "async jobs enqueued and drained per run"),
        Size("concurrency", 500, 500, "async jobs in flight per worker process"),
    ],
    agent=agent,
    raw=raw,
    render=render,
)


if __name__ == "__main__":
    sys.exit(family.main(FAMILY))
