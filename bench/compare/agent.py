"""Run one benchmark round for one system, inside that system's venv.

Phases: ``enqueue`` (single-call enqueue rate); ``drain`` (bulk enqueue of N
jobs, then start the worker and time it until all N ran), optionally followed
by ``latency`` and ``idle`` on the same, now idle, worker. The harness runs
``enqueue`` and ``drain`` in separate agent processes so that no client-side
cache outlives the FLUSHALL between them. Every enqueue loop and every drain
is bracketed by a commandstats window (:class:`bench.common.redistime.Window`).

``account`` is the untimed accounting pass: the same single-call enqueues,
bulk enqueue and drain, with ``MONITOR`` on instead of the windows, to learn
which commands run inside scripts and MULTI/EXEC (:class:`bench.common.redistime.CommandLog`).

``--worker-cpus`` confines the worker and everything it forks to those CPUs (set
before the worker's ``exec``, so every child inherits it, and checked on the
whole tree after the drain). ``run.py`` uses it for the clean pass: a ``drain``
round with the worker tree and the producer kept off redis-server's CPU, so that
nothing preempts Redis in the middle of a command and inflates its commandstats.

Started by ``bench/run.py`` as ``python -m bench.compare.agent --module celery_app ...``
with the interpreter of the venv that has the system installed. Prints one
JSON object on the last line of stdout. Every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from redis.utils import HIREDIS_AVAILABLE

from bench.common import job, record, redistime
from bench.common.procs import (
    STALL_S,
    BenchError,
    descendants,
    format_cpus,
    parse_cpus,
    pin_self,
    rss_kb,
    start_worker,
    stop_tree,
    tree_affinity,
    tree_cpu_seconds,
)
from bench.common.report import percentile
from bench.peers.base import System

REPO = Path(__file__).resolve().parents[2]
LATENCY_BASE = 1 << 40  # job indices of latency probes, apart from drain jobs
POLL_S = 0.005
SETTLE_S = 0.5  # after the last job starts, for its ack to reach Redis before the window closes


class Meter:
    """Brackets phases with a commandstats window, or with a MONITOR segment when accounting."""

    def __init__(self, url: str, account: bool) -> None:
        self.log = redistime.CommandLog(url) if account else None
        self.window = redistime.Window(url)
        self.windows: dict[str, Any] = {}

    def start(self, phase: str) -> None:
        """The phase starts now."""
        if self.log is not None:
            self.log.mark(phase)
        else:
            self.window.start()

    def stop(self, phase: str, jobs: int) -> None:
        """The phase, which handled ``jobs`` jobs, ended."""
        if self.log is not None:
            self.log.mark(f"after-{phase}")
        else:
            self.windows[phase] = self.window.stop(jobs)

    def result(self) -> dict[str, Any]:
        """``{"redis": windows}``, or ``{"accounting": MONITOR tallies}`` when accounting."""
        if self.log is None:
            return {"redis": self.windows}
        return {"accounting": self.log.collect()}


def timed_loop(total: int, deadline_s: float, step: Callable[[int], int]) -> dict[str, Any]:
    """Call ``step(done)`` (returns jobs handled) until ``total``; jobs/s."""
    done = 0
    start = time.perf_counter()
    stop = start + deadline_s
    while done < total and time.perf_counter() < stop:
        done += step(done)
    elapsed = time.perf_counter() - start
    return {"jobs": done, "seconds": elapsed, "rate": done / elapsed, "complete": done >= total}


def enqueue_one_rate(system: System, total: int, deadline_s: float) -> dict[str, Any]:
    """Single-call enqueue from one producer: one API call per job."""

    def step(done: int) -> int:
        system.enqueue_one(done, time.time_ns())
        return 1

    return timed_loop(total, deadline_s, step)


def enqueue_bulk_rate(system: System, total: int, batch: int, deadline_s: float) -> dict[str, Any]:
    """Bulk enqueue from one producer, ``batch`` jobs per bulk call."""

    def step(done: int) -> int:
        t_ns = time.time_ns()
        items = [(i, t_ns) for i in range(done, min(done + batch, total))]
        system.enqueue_bulk(items)
        return len(items)

    return timed_loop(total, deadline_s, step)


def check_alive(worker: subprocess.Popen[bytes]) -> None:
    """Raise if the worker's master process has exited."""
    if worker.poll() is not None:
        raise BenchError(f"worker exited with status {worker.returncode}")


def wait_drained(
    worker: subprocess.Popen[bytes], rec_dir: str, total: int, deadline_s: float
) -> tuple[list[int], int]:
    """Poll the records until jobs 0..total-1 all started.

    Returns each job's first start time (sorted) and the number of records.
    Gives up at the deadline, or after STALL_S seconds without a new job.
    """
    tail = record.Tail(rec_dir)
    firsts: dict[int, int] = {}
    now = time.monotonic()
    stop, last_change = now + deadline_s, now
    while time.monotonic() < stop:
        check_alive(worker)
        before = len(firsts)
        for i, t_ns in tail.new_records():
            if i < total and (i not in firsts or t_ns < firsts[i]):
                firsts[i] = t_ns
        if len(firsts) >= total:
            return sorted(firsts.values()), tail.count
        if len(firsts) != before:
            last_change = time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            raise BenchError(f"drain stalled: no new job for {STALL_S:.0f}s ({before}/{total})")
        time.sleep(POLL_S)
    raise BenchError(f"drain not finished after {deadline_s:.0f}s ({len(firsts)}/{total} jobs)")


def drain(
    worker: subprocess.Popen[bytes], t_start: int, rec_dir: str, total: int, deadline_s: float
) -> dict[str, Any]:
    """Drain figures: from worker start (and from first job) to last job."""
    starts, records = wait_drained(worker, rec_dir, total, deadline_s)
    seconds = (starts[-1] - t_start) / 1e9
    steady = (starts[-1] - starts[0]) / 1e9
    return {
        "jobs": total,
        "seconds": seconds,
        "rate": total / seconds,
        "startup_s": (starts[0] - t_start) / 1e9,
        "steady_rate": (total - 1) / steady if steady > 0 else None,
        "duplicates": records - total,
    }


def latency(
    system: System,
    worker: subprocess.Popen[bytes],
    rec_dir: str,
    samples: int,
    gap_s: float,
    deadline_s: float,
) -> dict[str, Any]:
    """Enqueue→start latency, one job at a time on an idle running worker."""
    base_count = record.total_records(rec_dir)
    sent: dict[int, int] = {}
    timeouts = 0
    stop = time.monotonic() + deadline_s
    for k in range(samples):
        if time.monotonic() > stop:
            break
        time.sleep(gap_s)
        index = LATENCY_BASE + k
        sent[index] = time.time_ns()
        system.enqueue_one(index, sent[index])
        sample_stop = min(stop, time.monotonic() + 5.0)
        while (
            record.total_records(rec_dir) < base_count + len(sent)
            and time.monotonic() < sample_stop
        ):
            time.sleep(0.0001)
        if record.total_records(rec_dir) < base_count + len(sent):
            timeouts += 1
            check_alive(worker)
    time.sleep(0.2)
    started: dict[int, int] = {}
    for i, t_ns in record.read_records(rec_dir):
        if i in sent and (i not in started or t_ns < started[i]):
            started[i] = t_ns
    lat_ms = sorted((started[i] - sent[i]) / 1e6 for i in started)
    if not lat_ms:
        raise BenchError("no latency probe ran")
    return {
        "samples": len(lat_ms),
        "lost": len(sent) - len(lat_ms),
        "timeouts": timeouts,
        "p50_ms": percentile(lat_ms, 50),
        "p99_ms": percentile(lat_ms, 99),
        "max_ms": lat_ms[-1],
    }


def idle(worker: subprocess.Popen[bytes], seconds: float) -> dict[str, Any]:
    """RSS of the worker master and children, CPU of the idle tree."""
    check_alive(worker)
    cpu0 = tree_cpu_seconds(worker.pid)
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1 = tree_cpu_seconds(worker.pid)
    elapsed = time.monotonic() - t0
    check_alive(worker)
    kids = descendants(worker.pid)
    return {
        "cpu_pct": 100 * (cpu1 - cpu0) / elapsed,
        "rss_master_kb": rss_kb(worker.pid),
        "rss_children_kb": [rss for rss in map(rss_kb, kids) if rss is not None],
    }


def versions(system: System) -> dict[str, Any]:
    """Installed versions of the system's packages, plus hiredis presence."""
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    for name in system.packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["hiredis_in_use"] = HIREDIS_AVAILABLE
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (all set by run.py)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--module", required=True, help="module in bench/peers, e.g. celery_app")
    p.add_argument("--redis-url", required=True)
    p.add_argument("--record-dir", required=True)
    p.add_argument("--worker-log", required=True)
    p.add_argument(
        "--phases",
        default="drain,latency,idle",
        help="enqueue, or drain[,latency][,idle] (bulk enqueue first), or account",
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs to drain")
    p.add_argument("--enqueue-jobs", type=int, default=10_000, help="single-call enqueues")
    p.add_argument("--batch", type=int, default=1_000, help="jobs per bulk call")
    p.add_argument("--latency-samples", type=int, default=1_000)
    p.add_argument(
        "--latency-gap", type=float, default=0.002, help="idle seconds before each probe"
    )
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--procs", type=int, default=2, help="worker processes")
    p.add_argument("--worker-args", default="", help="extra worker CLI arguments")
    p.add_argument("--deadline", type=float, default=300.0, help="bound of each phase, seconds")
    p.add_argument("--producer-cpu", type=int, default=-1, help="pin the producer (not workers)")
    p.add_argument(
        "--worker-cpus",
        type=parse_cpus,
        default=frozenset(),
        help="comma list: confine the worker tree to these CPUs (default: every CPU)",
    )
    p.add_argument("--no-incr", action="store_true", help="tasks skip their Redis INCR")
    args = p.parse_args(argv)
    if args.worker_cpus and args.producer_cpu not in args.worker_cpus:
        p.error("--producer-cpu must be one of --worker-cpus")
    return args


def enqueue_phases(
    system: System, args: argparse.Namespace, phases: set[str], meter: Meter
) -> dict[str, Any]:
    """Single-call enqueue (``enqueue``), then bulk enqueue of the jobs to drain (``drain``)."""
    out: dict[str, Any] = {}
    if "enqueue" in phases:
        system.enqueue_one(-1, time.time_ns())  # warm-up: connect, declare, load scripts
        meter.start("enqueue_one")
        out["enqueue_one"] = enqueue_one_rate(system, args.enqueue_jobs, args.deadline)
        meter.stop("enqueue_one", out["enqueue_one"]["jobs"])
    if "drain" in phases:
        meter.start("enqueue_bulk")
        out["enqueue_bulk"] = enqueue_bulk_rate(system, args.jobs, args.batch, args.deadline)
        meter.stop("enqueue_bulk", out["enqueue_bulk"]["jobs"])
        if not out["enqueue_bulk"]["complete"]:
            raise BenchError("bulk enqueue did not finish in time")
    return out


def check_confined(worker: subprocess.Popen[bytes], cpus: frozenset[int]) -> list[int]:
    """The CPUs the worker tree's threads may use; raises if any may run outside ``cpus``."""
    allowed = tree_affinity(worker.pid)
    if not allowed <= cpus:
        raise BenchError(
            f"worker tree not confined to CPUs {format_cpus(cpus)}: "
            f"its threads may run on {format_cpus(allowed)}"
        )
    return sorted(allowed)


def worker_phases(
    system: System, args: argparse.Namespace, phases: set[str], meter: Meter
) -> dict[str, Any]:
    """Drain the waiting jobs with a fresh worker, then latency and idle on it."""
    out: dict[str, Any] = {}
    record.clear(args.record_dir)
    argv = system.worker_argv(args.procs, shlex.split(args.worker_args))
    out["worker_argv"] = [Path(argv[0]).name, *argv[1:]]
    meter.start("drain")
    worker, t_start = start_worker(argv, args.worker_log, args.worker_cpus)
    try:
        out["drain"] = drain(worker, t_start, args.record_dir, args.jobs, args.deadline)
        time.sleep(SETTLE_S)  # the last acks; the worker is idle by now
        meter.stop("drain", args.jobs)
        if args.worker_cpus:
            out["worker_cpus"] = check_confined(worker, args.worker_cpus)
        if "latency" in phases:
            out["latency"] = latency(
                system,
                worker,
                args.record_dir,
                args.latency_samples,
                args.latency_gap,
                args.deadline,
            )
        if "idle" in phases:
            time.sleep(1.0)
            out["idle"] = idle(worker, args.idle_seconds)
    finally:
        stop_tree(worker)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """All requested phases for one system; returns the figures."""
    os.environ["BENCH_REDIS_URL"] = args.redis_url
    os.environ[record.ENV_DIR] = args.record_dir
    os.environ[job.ENV_INCR] = "0" if args.no_incr else "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    pin_self(args.producer_cpu)
    system: System = importlib.import_module(f"bench.peers.{args.module}").SYSTEM
    phases = set(args.phases.split(","))
    account = "account" in phases
    # The accounting pass does what an enqueue round and then a drain round do, under MONITOR.
    rounds = [{"enqueue"}, {"drain"}] if account else [phases]
    meter = Meter(args.redis_url, account)
    redis = Redis.from_url(args.redis_url)
    out: dict[str, Any] = {"system": system.name, "versions": versions(system)}
    try:
        for round_phases in rounds:
            redis.flushall()
            system.setup()
            out |= enqueue_phases(system, args, round_phases, meter)
            if "drain" in round_phases:
                out |= worker_phases(system, args, round_phases, meter)
    finally:
        with contextlib.suppress(RedisError):
            redis.flushall()
    return out | meter.result()


def exit_on_sigterm(signum: int, frame: object) -> None:
    """Turn SIGTERM into SystemExit so that ``finally`` stops the worker."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Entry point: run, print JSON (errors as {"error": ...})."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = parse_args()
    try:
        result = run(args)
    except BenchError as exc:
        result = {"error": str(exc)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
