"""Fair queues benchmark (docs/fairness.md): what fairness costs a drain, in wall time and in
Redis's own CPU, and what it buys a small tenant behind a flood.

Usage, from the repository root::

    .venv/bin/python bench/features/fair_bench.py            # full: 3 runs, up to 100,000 keys
    .venv/bin/python bench/features/fair_bench.py --quick    # 1 run, up to 10,000 keys

Everything on one private ``redis-server`` (no AOF), ``FLUSHALL`` before each measurement,
with real ``taskq worker -A bench.features.fair_app:app -c 2`` processes (its ``noop`` task:
one ``INCR``; ``BENCH_FAIR=1`` names its queue fair):

1. **Drain.** For each number of active keys (``--keys``, default 1, 100 and 100,000):
   ``max(--jobs, keys)`` jobs, job ``i`` of key ``k<i mod keys>``, bulk-enqueued with
   ``starmap`` (pipelined) while no worker runs, then drained by one worker, timed from the
   first job's end to the last's (the counter is polled every 5 ms, so the worker's start-up
   is not in the rate). Each run drains the same jobs once on a plain queue and once on a
   fair one, alternating which goes first, ``--runs`` times. Reported per case: the median
   jobs/s of each and the median of the runs' own fair / plain ratios (back-to-back drains
   see about the same load from outside; the wall rate moves with whatever else the shared
   machine runs), and Redis's µs per job two ways: its process CPU (``INFO cpu``
   ``used_cpu_user`` + ``used_cpu_sys``, from the worker's spawn to the last job) and the
   time of its commands (``INFO commandstats`` ``usec``, minus the bench's own polling
   ``GET`` and ``INFO``), with the commands that cost most on the fair side. Nothing else
   uses that server meanwhile.
2. **Fairness.** One worker started and warmed up (one job run), then tenant ``A`` floods
   ``--flood`` jobs (``starmap``), then tenant ``B`` enqueues 10, each job carrying
   ``time.time_ns()`` at its enqueue; a ``B`` job records its wait, enqueue to start.
   ``--trials`` times on a plain queue and on a fair one, same worker settings; reported:
   p50, p99 and max of B's waits (all trials pooled).

``--fetch-only`` prints, for each case, the fetch path alone (``SlotFetcher.fetch`` in this
process, 64 jobs a call, no worker): Redis's CPU and command time per job, steadier than a
drain for comparing versions of the scripts.

Writes the "Fair queues" section of bench/results/RESULTS-features.md (``--quick``: the
-quick files), with the machine's load average at start and end.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.features import section  # noqa: E402

MODES = ("plain", "fair")
POLL_S = 0.005
B_JOBS = 10


class Bench:
    """The private server's client, the bench app's task, and the worker's environment."""

    def __init__(self, url: str) -> None:
        os.environ["BENCH_REDIS_URL"] = url
        from redis import Redis

        from bench.features import fair_app

        self.url = url
        self.r = Redis.from_url(url, protocol=2)
        self.app, self.noop = fair_app.app, fair_app.noop
        self.counter, self.waits = fair_app.COUNTER, fair_app.WAITS

    def reset(self, mode: str) -> None:
        """An empty server; the producer (this process) names the queue fair in fair mode,
        and the queue is marked fair as its first worker would, so that jobs stage."""
        from taskq.broker.fairness import claim_fairness

        self.r.flushall()
        fair = ("tasks",) if mode == "fair" else ()
        self.app.settings = self.app.settings.replace(fair_queues=fair)
        if fair:
            claim_fairness(self.app.link, ["tasks"], set(fair))

    def enqueue(self, items: list[tuple[int, str, int]]) -> None:
        for start in range(0, len(items), 2_000):
            self.noop.starmap(items[start : start + 2_000])

    def worker(self, mode: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "BENCH_"))}
        env.update(BENCH_REDIS_URL=self.url, BENCH_FAIR=str(int(mode == "fair")))
        env["PYTHONPATH"] = str(ROOT)
        argv = [sys.executable, "-m", "taskq", "worker", "-A", "bench.features.fair_app:app"]
        return subprocess.Popen([*argv, "-c", "2", "--loglevel", "warning"], cwd=ROOT, env=env)

    def done(self) -> int:
        return int(self.r.get(self.counter) or 0)

    def wait_done(self, n: int, worker: subprocess.Popen[bytes], deadline_s: float) -> float:
        """Poll the counter until ``n``; returns when it first moved (perf_counter)."""
        t0, first = time.perf_counter(), None
        while (got := self.done()) < n:
            if first is None and got > 0:
                first = time.perf_counter()
            if time.perf_counter() - t0 > deadline_s or worker.poll() is not None:
                raise RuntimeError(f"drain did not finish ({got} of {n})")
            time.sleep(POLL_S)
        return first if first is not None else time.perf_counter()

    def cpu_s(self) -> float:
        info = self.r.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def commandstats(self) -> dict[str, tuple[int, int]]:
        stats = self.r.info("commandstats")
        return {
            k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in stats.items()
        }


def stop(worker: subprocess.Popen[bytes]) -> float:
    """Stop the worker; returns the CPU seconds of its tree (master and reaped children)."""
    worker.terminate()
    try:
        _, status, usage = os.wait4(worker.pid, 0)
    except ChildProcessError:
        return 0.0
    worker.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------ drain


def drain_once(b: Bench, mode: str, keys: int, jobs: int) -> dict[str, Any]:
    b.reset(mode)
    b.enqueue([(i, f"k{i % keys}", 0) for i in range(jobs)])
    b.r.config_resetstat()
    cpu0 = b.cpu_s()
    worker = b.worker(mode)
    try:
        first = b.wait_done(jobs, worker, 600)
        elapsed_s = time.perf_counter() - first
        cpu_s = b.cpu_s() - cpu0
        stats = b.commandstats()
    finally:
        worker_cpu_s = stop(worker)
    ours = {"get", "info", "config|resetstat"}
    usec = sum(u for name, (_c, u) in stats.items() if name not in ours)
    top = sorted(((u, name, c) for name, (c, u) in stats.items() if name not in ours), reverse=True)
    return {
        "rate": (jobs - 1) / elapsed_s if elapsed_s > 0 else float("inf"),
        "cpu_us": cpu_s / jobs * 1e6,
        "cmd_us": usec / jobs,
        "worker_us": worker_cpu_s / jobs * 1e6,
        "top": [(name, c / jobs, u / jobs) for u, name, c in top[:6]],
    }


def drains(b: Bench, keys: int, jobs: int, runs: int) -> dict[str, Any]:
    got: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for run in range(runs):
        for mode in MODES if run % 2 == 0 else MODES[::-1]:
            d = drain_once(b, mode, keys, jobs)
            got[mode].append(d)
            print(
                f"keys {keys:,} run {run + 1} {mode}: {d['rate']:,.0f} jobs/s, Redis CPU "
                f"{d['cpu_us']:.1f} us/job, commands {d['cmd_us']:.1f} us/job, worker CPU "
                f"{d['worker_us']:.1f} us/job",
                flush=True,
            )
    pairs = list(zip(got["plain"], got["fair"], strict=True))
    out: dict[str, Any] = {"keys": keys, "jobs": jobs}
    for mode in MODES:
        out[mode] = {
            "rates": [d["rate"] for d in got[mode]],
            "cpu_us": statistics.median(d["cpu_us"] for d in got[mode]),
            "cmd_us": statistics.median(d["cmd_us"] for d in got[mode]),
            "worker_us": statistics.median(d["worker_us"] for d in got[mode]),
            "top": got[mode][-1]["top"],
        }
    out["ratio"] = statistics.median(f["rate"] / p["rate"] for p, f in pairs)
    out["ratios"] = [f["rate"] / p["rate"] for p, f in pairs]
    return out


def fetch_loop(b: Bench, mode: str, keys: int, jobs: int) -> str:
    """The fetch path alone, in this process (no worker, no job run): the same jobs taken
    64 at a time by ``SlotFetcher.fetch`` with the last batch's acks, as a worker's child
    does; Redis's µs per job and its costliest commands. Steadier than a drain for comparing
    versions of the scripts."""
    from taskq.broker.fetching import SlotFetcher

    b.reset(mode)
    b.enqueue([(i, f"k{i % keys}", 0) for i in range(jobs)])
    fetcher = SlotFetcher(b.app.link, ["tasks"], fair=b.app.settings.fair_queues)
    fetcher.ensure_groups()
    b.r.config_resetstat()
    cpu0, t0 = b.cpu_s(), time.perf_counter()
    acks: list[Any] = []
    while True:
        acks = list(fetcher.fetch("bench", 64, acks, fence_acks=False).deliveries)
        if not acks:
            break
    wall_us = (time.perf_counter() - t0) / jobs * 1e6
    cpu_us = (b.cpu_s() - cpu0) / jobs * 1e6
    stats = b.commandstats()
    top = sorted(
        ((u, n, c) for n, (c, u) in stats.items() if n not in {"info", "get"}), reverse=True
    )
    costs = ", ".join(f"{n} {c / jobs:.2f}/{u / jobs:.2f}" for u, n, c in top[:6])
    return f"{wall_us:.1f} us/job in all, Redis CPU {cpu_us:.1f} us/job; calls/us per job: {costs}"


# ------------------------------------------------------------------ fairness


def flood_trial(b: Bench, mode: str, flood: int) -> list[float]:
    """One flood of tenant A then B's jobs: B's waits, ms."""
    b.reset(mode)
    worker = b.worker(mode)
    try:
        b.noop.delay(-1, "warm", time.time_ns())
        b.wait_done(1, worker, 60)
        now = time.time_ns()
        b.enqueue([(i, "A", now) for i in range(flood)])
        b.noop.starmap([(i, "B", time.time_ns()) for i in range(B_JOBS)])
        b.wait_done(1 + flood + B_JOBS, worker, 600)
    finally:
        stop(worker)
    return [int(x) / 1e6 for x in b.r.lrange(b.waits, 0, -1)]


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))]


def fairness(b: Bench, flood: int, trials: int) -> dict[str, Any]:
    out: dict[str, Any] = {"flood": flood, "trials": trials}
    for mode in MODES:
        waits: list[float] = []
        for _ in range(trials):
            waits += flood_trial(b, mode, flood)
        out[mode] = {"p50": quantile(waits, 0.5), "p99": quantile(waits, 0.99), "max": max(waits)}
        print(f"fairness {mode}: {out[mode]}", flush=True)
    return out


# ------------------------------------------------------------------ report


def markdown(d: dict[str, Any]) -> str:
    load, end = d["load"], d["load_end"]
    lines = [
        "## Fair queues",
        "",
        f"`{d['command']}`, {d['date']}; load average at start {load[0]:.2f} / {load[1]:.2f} / "
        f"{load[2]:.2f} (1 / 5 / 15 min), at end {end[0]:.2f} / {end[1]:.2f} / {end[2]:.2f} "
        "(a shared 2-core machine: other work ran beside it). One private `redis-server`, "
        "`FLUSHALL` before each measurement, `taskq worker -c 2`, no-op jobs (one `INCR`).",
        "",
        "| active keys | jobs | plain jobs/s (runs) | fair jobs/s (runs) | fair / plain "
        "(median of runs; runs) | Redis CPU µs/job plain / fair | Redis command µs/job "
        "plain / fair | worker CPU µs/job plain / fair |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in d["drain"]:
        p, f = c["plain"], c["fair"]
        lines.append(
            f"| {c['keys']:,} | {c['jobs']:,} | {statistics.median(p['rates']):,.0f} "
            f"({', '.join(f'{x:,.0f}' for x in p['rates'])}) | "
            f"{statistics.median(f['rates']):,.0f} ({', '.join(f'{x:,.0f}' for x in f['rates'])})"
            f" | **{c['ratio']:.0%}** ({', '.join(f'{x:.0%}' for x in c['ratios'])}) | "
            f"{p['cpu_us']:.1f} / {f['cpu_us']:.1f} | {p['cmd_us']:.1f} / {f['cmd_us']:.1f} | "
            f"{p['worker_us']:.0f} / {f['worker_us']:.0f} |"
        )
    target = next((c for c in d["drain"] if c["keys"] == 100), None)
    if target:
        verdict = "PASS" if target["ratio"] >= 0.8 else "FAIL"
        lines += ["", f"Target (100 active keys: fair ≥ 80 % of plain): **{verdict}**."]
    lines += [
        "",
        "Where the fair side's Redis command time goes (last run; calls and µs per job):",
        "",
    ]
    for c in d["drain"]:
        top = ", ".join(f"`{n}` {calls:.2f} / {us:.1f}" for n, calls, us in c["fair"]["top"])
        lines.append(f"- {c['keys']:,} keys: {top}")
    fa = d["fairness"]
    lines += [
        "",
        f"Fairness: tenant A floods {fa['flood']:,} jobs, then tenant B enqueues {B_JOBS}; "
        f"B's wait from enqueue to start, {fa['trials']} trials pooled:",
        "",
        "| queue | p50 ms | p99 ms | max ms |",
        "|---|---|---|---|",
    ]
    for mode in MODES:
        w = fa[mode]
        lines.append(f"| {mode} | {w['p50']:.1f} | **{w['p99']:.1f}** | {w['max']:.1f} |")
    lines += [
        "",
        "Drain rates are timed from the first job's end to the last's; Redis CPU is the whole "
        "process's (start-up of the worker included, a few hundred commands); command µs is "
        "`INFO commandstats` without the bench's own `GET`/`INFO` (a script's inner commands "
        "count both in its `evalsha` line and their own).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = section.bench_parser(__doc__)
    parser.add_argument("--keys", help="comma-separated numbers of active keys")
    parser.add_argument("--flood", type=int)
    parser.add_argument("--trials", type=int)
    parser.add_argument("--no-fairness", action="store_true", help="drains only (no file written)")
    parser.add_argument("--no-drain", action="store_true", help="fairness only (no file written)")
    parser.add_argument(
        "--fetch-only", action="store_true", help="the fetch path in-process, printed only"
    )
    args = parser.parse_args()
    jobs, runs = section.sizes(args, quick_jobs=10_000)
    keys = [
        int(k) for k in (args.keys or ("1,100,10000" if args.quick else "1,100,100000")).split(",")
    ]
    flood = args.flood or (5_000 if args.quick else 20_000)
    trials = args.trials or (1 if args.quick else 3)
    load = os.getloadavg()
    with section.private_redis("fair") as url:
        b = Bench(url)
        if args.fetch_only:
            for k in keys:
                for mode in MODES * runs:
                    print(f"keys {k:,} {mode}: {fetch_loop(b, mode, k, max(jobs, k))}", flush=True)
            return 0
        result = section.new_result("fair", args.quick, load)
        if not args.no_drain:
            result["drain"] = [drains(b, k, max(jobs, k), runs) for k in keys]
        if not args.no_fairness:
            result["fairness"] = fairness(b, flood, trials)
        if args.no_drain or args.no_fairness:
            return 0
    return section.finish("fair", result, args.quick, markdown)


if __name__ == "__main__":
    sys.exit(main())
