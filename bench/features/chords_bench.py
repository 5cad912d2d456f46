"""Chords benchmark: a chord of N trivial header jobs and one body that gets their results.

Usage, from the repository root::

    .venv/bin/python bench/features/chords_bench.py            # full: 10,000 headers, 3 runs
    .venv/bin/python bench/features/chords_bench.py --quick    # 2,000 headers, 1 run
    .venv/bin/python bench/features/chords_bench.py --only celery,raw

On an idle worker with 2 processes, each system submits
``chord(group(add.s(i, i) for i in range(N)), tsum.s())`` and waits for the body's
result: the time from submit to the body's result in hand. taskq (``store_results=True``,
``from taskq import chord, group``) also drains N plain ``add`` jobs with results on,
the chord's reference. The raw floor does both with plain redis-py: pipelined XADDs, 2
consumers reading 100 at a time that store each batch's results with one RPUSH and
count them with one INCRBY (plus XACK+XDEL) in one round trip, and the consumer whose
INCRBY reaches N enqueues the body, which reads the list with LRANGE and pushes the sum
that the producer waits for with BLPOP. Writes the "Chords" section of
bench/results/RESULTS-features.md; bench/README.md ("Feature benchmarks") explains it.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import multiprocessing as mp

from redis import Redis

from bench.common import envs
from bench.common.procs import BenchError
from bench.common.report import md_table, num, ratio, vs_line
from bench.common.runner import Entry
from bench.compare.run import RAW_FOR, SYSTEMS
from bench.features import agentside, family, section
from bench.features.agentside import AgentCtx, Params
from bench.features.family import Family, Size
from bench.features.section import median_of
from bench.peers.featurebase import Chords, tsum_expected

WARMUP_N = 10  # an untimed chord of this size first: the worker is up
REPEATS, REPEAT_S = 5, 2.0  # a timed chord is repeated while the repeats total under 2 s
IDLE_S = 1.0
BATCH = 1_000  # XADDs per pipelined round trip (raw floor)
COUNT = 100  # messages per XREADGROUP (raw floor)
STREAM, GROUP = "rawchord:jobs", "rawchord"


def timed_chord(system: Chords, n: int, timeout_s: float) -> Params:
    """Submit a chord of ``n`` headers, wait for the body; seconds."""
    t0 = time.perf_counter()
    handle = system.submit_chord(n)
    t_submit = time.perf_counter()
    value = system.wait_chord(handle, timeout_s)
    t1 = time.perf_counter()
    if value != tsum_expected(n):
        raise BenchError(f"chord of {n}: body returned {value!r}, not {tsum_expected(n)}")
    return {"headers": n, "seconds": t1 - t0, "submit_s": t_submit - t0, "rate": n / (t1 - t0)}


def timed_plain(system: Chords, n: int, timeout_s: float) -> Params | None:
    """Submit ``n`` plain jobs with results, wait until all are stored; None if unsupported."""
    try:
        t0 = time.perf_counter()
        handles = system.submit_plain(n)
    except NotImplementedError:
        return None
    t_submit = time.perf_counter()
    system.wait_plain(handles, timeout_s)
    t1 = time.perf_counter()
    values = system.plain_results(handles, timeout_s)
    if values != [2 * i for i in range(n)]:
        raise BenchError(f"plain drain of {n}: wrong results")
    return {"jobs": n, "seconds": t1 - t0, "submit_s": t_submit - t0, "rate": n / (t1 - t0)}


def repeated(timed: Callable[[], Params | None]) -> Params | None:
    """``timed()`` once, or up to REPEATS times while they total under REPEAT_S; the median.

    Short measurements (the raw floor's take well under a second) are noisy alone.
    """
    first = timed()
    if first is None:
        return None
    runs, total = [first], first["seconds"]
    while len(runs) < REPEATS and total < REPEAT_S:
        time.sleep(0.2)
        runs.append(cast(Params, timed()))
        total += runs[-1]["seconds"]
    middle = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {**middle, "repeats": [r["seconds"] for r in runs]}


def measure(system: Chords, ctx: AgentCtx, running: AbstractContextManager[Any]) -> Params:
    """Warm-up chord, idle, the timed chord, then the plain reference drain."""
    n, deadline = ctx.chord_size, ctx.deadline
    with running:
        start = time.monotonic()
        timed_chord(system, WARMUP_N, deadline)
        startup_s = time.monotonic() - start
        time.sleep(IDLE_S)
        chord = cast(Params, repeated(lambda: timed_chord(system, n, deadline)))
        ctx.out["chord"] = chord
        time.sleep(IDLE_S)
        plain = repeated(lambda: timed_plain(system, n, deadline))
    figures = {
        "chord_s": chord["seconds"],
        "chord_rate": chord["rate"],
        "submit_s": chord["submit_s"],
        "plain_s": plain["seconds"] if plain else None,
        "plain_rate": plain["rate"] if plain else None,
        "chord_vs_plain": chord["seconds"] / plain["seconds"] if plain else None,
    }
    return {"figures": figures, "chord": chord, "plain": plain, "first_chord_s": startup_s}


def agent(system: Chords, ctx: AgentCtx) -> Params:
    """One system's round, in its venv: its worker CLI with ``procs`` processes."""
    return measure(system, ctx, agentside.workers(system.worker_argvs(ctx.procs), ctx))


# ------------------------------------------------------------------ raw floor


class RawChords(Chords):
    """The floor's producer: pipelined XADDs; BLPOP of the body's result."""

    name = "raw"

    def __init__(self, r: Redis, done: Synchronized[int]) -> None:
        self.r = r
        self.done = done  # plain jobs finished, counted by the consumers
        self.ids = itertools.count()

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return []

    def _xadd_all(self, jobs: list[dict[Any, Any]]) -> None:
        for i in range(0, len(jobs), BATCH):
            pipe = self.r.pipeline(transaction=False)
            for fields in jobs[i : i + BATCH]:
                pipe.xadd(STREAM, fields)
            pipe.execute()

    def submit_chord(self, n: int) -> str:
        cid = f"c{next(self.ids)}"
        self._xadd_all([{"chord": cid, "n": n, "a": i, "b": i} for i in range(n)])
        return cid

    def wait_chord(self, handle: Any, timeout_s: float) -> Any:
        reply: Any = self.r.blpop([f"rawchord:{handle}:result"], timeout=timeout_s)
        if reply is None:
            raise BenchError(f"raw chord: no body result after {timeout_s:.0f}s")
        return int(reply[1])

    def submit_plain(self, n: int) -> int:
        self.done.value = 0
        self._xadd_all([{"id": i, "a": i, "b": i} for i in range(n)])
        return n

    def wait_plain(self, handles: Any, timeout_s: float) -> None:
        agentside.bounded("raw plain drain", timeout_s, lambda: self.done.value >= handles)

    def plain_results(self, handles: Any, timeout_s: float) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for i in range(handles):
            pipe.lindex(f"rawchord:result:{i}", 0)
        return [int(v) for v in pipe.execute()]


def _headers(r: Redis, msgs: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
    """A batch of one chord's headers: results RPUSHed, counted, acked in one round trip."""
    f0 = msgs[0][1]
    cid, n = f0[b"chord"].decode(), int(f0[b"n"])
    ids = [m for m, _ in msgs]
    pipe = r.pipeline(transaction=False)
    pipe.rpush(f"rawchord:{cid}:results", *(int(f[b"a"]) + int(f[b"b"]) for _, f in msgs))
    pipe.incrby(f"rawchord:{cid}:count", len(msgs))
    pipe.xack(STREAM, GROUP, *ids)
    pipe.xdel(STREAM, *ids)
    count: Any = pipe.execute()[1]
    if count == n:  # the last header: enqueue the body
        r.xadd(STREAM, {"body": cid})


def _body(r: Redis, msg_id: bytes, cid: str) -> None:
    """The body: the header results (LRANGE), their sum pushed for the producer."""
    values: Any = r.lrange(f"rawchord:{cid}:results", 0, -1)
    pipe = r.pipeline(transaction=False)
    pipe.rpush(f"rawchord:{cid}:result", sum(int(v) for v in values))
    pipe.delete(f"rawchord:{cid}:results", f"rawchord:{cid}:count")
    pipe.xack(STREAM, GROUP, msg_id)
    pipe.xdel(STREAM, msg_id)
    pipe.execute()


def _plain(r: Redis, msgs: list[tuple[bytes, dict[bytes, bytes]]], done: Any) -> None:
    """A batch of plain jobs: one RPUSH of each job's result, acked, in one round trip."""
    ids = [m for m, _ in msgs]
    pipe = r.pipeline(transaction=False)
    for _, f in msgs:
        pipe.rpush(f"rawchord:result:{f[b'id'].decode()}", int(f[b"a"]) + int(f[b"b"]))
    pipe.xack(STREAM, GROUP, *ids)
    pipe.xdel(STREAM, *ids)
    pipe.execute()
    with done.get_lock():
        done.value += len(msgs)


def _raw_worker(k: int, stop: Any, url: str, done: Any) -> None:
    """XREADGROUP COUNT 100; headers, bodies and plain jobs each as above."""
    r = Redis.from_url(url)
    while not stop.is_set():
        reply: Any = r.xreadgroup(GROUP, f"w{k}", {STREAM: ">"}, count=COUNT, block=100)
        msgs = reply[0][1] if reply else []
        headers = [m for m in msgs if b"chord" in m[1]]
        if headers:
            _headers(r, headers)
        for msg_id, f in msgs:
            if b"body" in f:
                _body(r, msg_id, f[b"body"].decode())
        plain = [m for m in msgs if b"id" in m[1]]
        if plain:
            _plain(r, plain, done)


def raw(ctx: AgentCtx) -> Params:
    """The raw floor: ``procs`` forked consumers, the same chord and plain drain."""
    r = ctx.redis()
    r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    done = mp.get_context("fork").Value("q", 0)
    running = agentside.forked(_raw_worker, ctx.procs, (ctx.url, done))
    return measure(RawChords(r, done), ctx, running)


# ------------------------------------------------------------------ report

HEADER = [
    "system", "chord: submit → body done (s)", "header jobs/s", "of which submit (s)",
    "chord vs raw floor chord", "plain drain with results (s)", "plain jobs/s",
    "chord / plain drain", "ok runs",
]  # fmt: skip


def _row(label: str, runs: list[Params], floor: list[Params]) -> list[str]:
    def m(key: str) -> float | None:
        return median_of(runs, key)

    return [
        label, num(m("chord_s"), ".3f"), num(m("chord_rate")), num(m("submit_s"), ".3f"),
        ratio(m("chord_s"), median_of(floor, "chord_s")), num(m("plain_s"), ".3f"),
        num(m("plain_rate")), num(m("chord_vs_plain"), ".2f"),
        f"{len(section.ok_runs(runs))}/{len(runs)}",
    ]  # fmt: skip


def render(data: dict[str, Any]) -> list[str]:
    """The section body: one table, every ratio from this run."""
    n = data["meta"]["params"]["chord_size"]
    rows = [
        _row(section.label(data, name), runs, data["raw"].get(RAW_FOR.get(name, "raw"), []))
        for group in ("systems", "raw")
        for name, runs in data[group].items()
    ]
    rows += section.not_available_rows(data, len(HEADER))
    celery = median_of(data["systems"].get("celery", []), "chord_s")
    lines = [
        f"A chord of {n:,} headers `add(i, i)` and the body `tsum(results)` on an idle worker "
        "with 2 processes: time from the submit call to the body's result in hand (the submit "
        'call\'s own share shown apart); "plain drain with results" is the same '
        f"{n:,} `add` jobs without the chord, submitted in bulk with results stored, until the "
        'last one\'s result is there (taskq and the raw floor only). "vs raw floor": chord '
        "time over the raw floor's chord time in this run (taskq + hiredis against the "
        "hiredis floor). Lower is better everywhere.",
        "",
        md_table(HEADER, rows),
    ]
    for name in (x for x in data["systems"] if ENTRIES[x].is_taskq):
        mine = median_of(data["systems"][name], "chord_s")
        lines.append("\n" + vs_line(section.label(data, name), "chord", "Celery", mine, celery))
    return lines


ENTRIES = {
    e.name: e
    for e in [
        *(Entry(s.name, "taskq_results_app", s.venv, s.label, True) for s in SYSTEMS if s.is_taskq),
        Entry("celery", "celery_results_app", envs.PEERS_VENV, "Celery"),
    ]
}

FAMILY = Family(
    key="chords",
    title="Chords",
    module="bench.features.chords_bench",
    attr="CHORDS",
    systems=list(ENTRIES.values()),
    sizes=[Size("chord_size", 10_000, 2_000, "header jobs of the chord (and plain jobs)")],
    agent=agent,
    raw=raw,
    render=render,
)


if __name__ == "__main__":
    sys.exit(family.main(FAMILY))
