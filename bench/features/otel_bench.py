"""OpenTelemetry benchmark: drain with tracing on (taskq.contrib.otel) as a ratio of off.

Usage, from the repository root::

    .venv/bin/python bench/features/otel_bench.py            # full: 20,000 jobs, 3 runs
    .venv/bin/python bench/features/otel_bench.py --quick    # 5,000 jobs, 1 run

taskq only, no peer and no raw floor. The app
(bench/peers/taskq_otel_app.py) has the main bench's ``noop(i)`` (one record, one ``INCR``)
on queue ``obench``; with ``BENCH_OTEL=on`` it is instrumented, and the producer and every
worker child get an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` (SDK defaults) over
an exporter that counts spans and keeps none.

Each run, two halves, each a fresh agent from an empty Redis, alternating which goes first:
**off** and **on** (``BENCH_OTEL`` set for the agent, so for its workers too).
``--drain-jobs`` (20,000) jobs are bulk-enqueued (``starmap``, batches of 1,000; with OTel
on, one enqueue span per job), then ``taskq worker -c <--procs>`` is spawned and timed from
just before the spawn until ``bench:incr`` reaches the number of jobs; the worker is stopped
(its children flush their spans as they exit) and the spans exported are counted (on: one
enqueue span and one run span per job). The family's own round measures, in one process,
the per-job costs of the hooks (``timeit``): ``App.encode`` with and without the enqueue
hook, ``around_job`` around a no-op run, and the body size.

Writes the "Otel" section of bench/results/RESULTS-features.md; bench/README.md ("Feature
benchmarks") explains it. Exit status 1 if a measurement failed, else 0.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import envs, record, rounds
from bench.common.job import counter_client
from bench.common.procs import BenchError
from bench.common.report import div, md_table, num, pct
from bench.common.rounds import fig, half_medians, half_of
from bench.common.runner import Entry
from bench.features import agentside, family
from bench.features.agentside import AgentCtx, Params
from bench.features.family import Family, Size

KEY = "otel"
ENV = "BENCH_OTEL"  # read by bench/peers/taskq_otel_app.py at import: "on" or "off"
HALVES = ("off", "on")
BATCH = 1_000  # jobs per bulk enqueue call (starmap)
MICRO_NUMBER = 5_000  # calls per timeit repeat
MICRO_REPEAT = 5  # the least of these repeats is kept


# ------------------------------------------------------------------ agent side


def _best_us(fn: Callable[[], Any]) -> float:
    return min(timeit.repeat(fn, number=MICRO_NUMBER, repeat=MICRO_REPEAT)) / MICRO_NUMBER * 1e6


def micro(ctx: AgentCtx) -> Params:
    """µs per call of the producer's encode and of a run's hook, tracing off and on, with the
    bench's provider (batch processor, counting exporter); body bytes off and on."""
    from bench.peers import taskq_otel_app as m
    from taskq import App
    from taskq.context import JobContext
    from taskq.contrib.otel import TaskqInstrumentation
    from taskq.message import Message
    from taskq.worker.outcome import OK, Outcome

    provider = m.tracer_provider()
    off = App(redis_url=ctx.url, queue=m.QUEUE)
    on = App(redis_url=ctx.url, queue=m.QUEUE)
    hook = TaskqInstrumentation(tracer_provider=provider)
    on.add_middleware(hook)
    msg = m.noop.message((12_345,), {})
    body_off, body_on = off.encode(msg), on.encode(msg)
    decoded = Message.decode(body_on)
    job = JobContext.of(decoded, 1, 3, "1-0")
    outcome = Outcome(OK, None, decoded, 1)  # type: ignore[arg-type]
    out = {
        "encode_off": _best_us(lambda: off.encode(msg)),
        "encode_on": _best_us(lambda: on.encode(msg)),
        "run_hook": _best_us(lambda: hook.around_job(job, lambda: outcome)),
        "decode_off": _best_us(lambda: Message.decode(body_off)),
        "decode_on": _best_us(lambda: Message.decode(body_on)),
    }
    provider.shutdown()
    return out | {"body_bytes_off": len(body_off), "body_bytes_on": len(body_on)}


def agent(system: Any, ctx: AgentCtx) -> Params:
    """A drain half (``BENCH_OTEL`` set by the orchestrator), else the micro-costs."""
    half = half_of(ENV, HALVES)
    if half:
        if system.on != (half == "on"):
            raise BenchError(f"{ENV}={half} but the app was loaded with tracing {system.on}")
        return drain_half(system, ctx, half)
    costs = micro(ctx)
    return {"figures": {k: costs[k] for k in ("encode_off", "encode_on", "run_hook")}} | {
        "micro": costs
    }


def drain_half(system: Any, ctx: AgentCtx, half: str) -> Params:
    """Bulk enqueue, then the worker spawned and timed until the counter reaches the jobs."""
    from bench.peers.taskq_otel_app import spans_exported

    n = ctx.drain_jobs
    client = counter_client(ctx.url)
    t0 = time.perf_counter()
    system.enqueue_noop(n, BATCH)
    enqueue_s = time.perf_counter() - t0
    system.flush()
    with agentside.workers(system.worker_argvs(ctx.procs), ctx, f"drain-{half}") as running:
        done_ns = agentside.wait_counter(client, n, running, ctx.deadline)
    starts = sorted(ns for i, ns in record.read_records(ctx.record_dir))
    if len(starts) < n:
        raise BenchError(f"{half}: {len(starts)} start records for {n} jobs")
    counts = spans_exported(ctx.record_dir)
    producer = counts.pop(os.getpid(), 0)
    drain_s = (done_ns - running.t_start) / 1e9
    steady_s = (starts[n - 1] - starts[0]) / 1e9
    return {
        "figures": {
            "rate": n / drain_s, "steady_rate": (n - 1) / steady_s if steady_s > 0 else None,
            "enqueue_rate": n / enqueue_s,
        },
        "half": half,
        "jobs": n,
        "enqueue_s": enqueue_s,
        "drain_s": drain_s,
        "startup_s": (starts[0] - running.t_start) / 1e9,
        "steady_s": steady_s,
        "spans": {"producer": producer, "workers": sum(counts.values()),
                  "worker_processes": len(counts)},
    }  # fmt: skip


# ------------------------------------------------------------------ orchestrator side


def drain_rounds(s: family.Session, systems: Sequence[Entry], run: int) -> None:
    """Run ``run`` of the drain: off and on, each a fresh agent from an empty Redis."""
    family.halves_rounds(s, systems, run, ENV, HALVES, "drain, otel")


# ------------------------------------------------------------------ report


HEADER = [
    "run", "order", "drain off (jobs/s)", "drain on (jobs/s)", "on / off",
    "after 1st job: off", "after 1st job: on", "after 1st job: on / off",
    "bulk enqueue off / on (jobs/s)", "start-up off / on (s)",
    "spans exported, on: producer + workers",
]  # fmt: skip


def _row(run: int, off: Params | None, on: Params | None) -> list[str]:
    order = "off first" if (off or {}).get("order") == 1 else "on first"
    startup = [num(None if r is None or "error" in r else r["startup_s"], ".2f") for r in (off, on)]
    spans = "n/a"
    if on is not None and "error" not in on:
        sp = on["spans"]
        spans = f"{sp['producer']:,} + {sp['workers']:,} ({sp['worker_processes']} children)"
    return [
        str(run), order, num(fig(off, "rate")), num(fig(on, "rate")),
        pct(div(fig(on, "rate"), fig(off, "rate"))), num(fig(off, "steady_rate")),
        num(fig(on, "steady_rate")),
        pct(div(fig(on, "steady_rate"), fig(off, "steady_rate"))),
        f"{num(fig(off, 'enqueue_rate'))} / {num(fig(on, 'enqueue_rate'))}",
        " / ".join(startup), spans,
    ]  # fmt: skip


def _median_row(m: Params) -> list[str]:
    return [
        "**median**", "", num(m["off_rate"]), num(m["on_rate"]), f"**{pct(m['rate_ratio'])}**",
        num(m["off_steady_rate"]), num(m["on_steady_rate"]), pct(m["steady_rate_ratio"]),
        f"{num(m['off_enqueue_rate'])} / {num(m['on_enqueue_rate'])} "
        f"({pct(m['enqueue_rate_ratio'])})",
        "", "",
    ]  # fmt: skip


def _micro_lines(runs: Sequence[Params]) -> list[str]:
    ok = [r["micro"] for r in runs if "error" not in r]
    if not ok:
        return ["Per-job costs: not measured (the family's round failed)."]
    c = {k: statistics.median(float(r[k]) for r in ok) for k in ok[0]}
    return [
        f"Per-job costs in one process (`timeit`, best of {MICRO_REPEAT} × {MICRO_NUMBER:,} "
        f"calls, median over {len(ok)} run(s)): `App.encode` {c['encode_off']:.1f} µs off, "
        f"{c['encode_on']:.1f} µs on (the enqueue span and the injection: "
        f"+{c['encode_on'] - c['encode_off']:.1f} µs); `around_job` around a no-op run "
        f"(extract, the run span, its attributes and end): {c['run_hook']:.1f} µs; decode "
        f"{c['decode_off']:.1f} µs off, {c['decode_on']:.1f} µs on; body "
        f"{c['body_bytes_off']:.0f} bytes off, {c['body_bytes_on']:.0f} on (the `headers` "
        "map with `traceparent`). The batch processor's export thread runs besides (here it "
        "only counts: a real exporter also encodes and sends).",
    ]


def render(data: dict[str, Any]) -> list[str]:
    """The section body: what was run, the drain table, per-job costs, notes."""
    params = data["meta"]["params"]
    n, procs = params["drain_jobs"], params["procs"]
    node = data.get("drain", {}).get("taskq", {})
    m = half_medians(node, HALVES, ("rate", "steady_rate", "enqueue_rate"))
    lines = [
        f"{n:,} jobs of the main bench's `noop(i)` (one record, one `INCR`) on queue `obench`, "
        f"bulk-enqueued (`starmap`, batches of {BATCH:,}), then drained by `taskq worker -A "
        f"bench.peers.taskq_otel_app:app -c {procs}`, timed from just before the spawn until "
        '`bench:incr` reaches the number of jobs (start-up included; "after 1st job" leaves '
        "it out). **off**: the plain app; **on**: `taskq.contrib.otel.instrument(app)`, the "
        "producer and each worker child with an SDK `TracerProvider`, a `BatchSpanProcessor` "
        "(SDK defaults) and an exporter that counts the spans and keeps none, so every job has "
        "an enqueue span (producer) and a run span (worker) and carries a `traceparent` header. "
        "Each half in a fresh agent from an empty Redis, alternating which goes first; the "
        "ratio is of the medians (each run's own shown).",
        "",
        md_table(HEADER, [*(_row(*p) for p in rounds.pairs(node, HALVES)), _median_row(m)]),
        "",
        *_micro_lines(data["systems"].get("taskq", [])),
    ]
    errors = rounds.errors(node, HALVES, "drain")
    if errors:
        lines += ["", "Drain errors:", "", *errors]
    if data["meta"]["skipped"]:
        lines += ["", "taskq: not available yet; nothing measured."]
    return lines


ENTRIES = [Entry("taskq", "taskq_otel_app", envs.PROJECT_VENV, "taskq", is_taskq=True)]

FAMILY = Family(
    key=KEY,
    title="Otel",
    module="bench.features.otel_bench",
    attr="OTEL",
    systems=ENTRIES,
    sizes=[Size("drain_jobs", 20_000, 5_000, "jobs of each drain half")],
    agent=agent,
    render=render,
    raws=(),
    extra=drain_rounds,
)


if __name__ == "__main__":
    sys.exit(family.main(FAMILY))
