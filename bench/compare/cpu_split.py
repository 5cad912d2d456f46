"""A worker's drain split by process: the CPU time of the master, of its children and of
redis-server, per job, beside the wall time. Where :mod:`bench.compare.profile_child` splits
one child's path, this says which process the drain's time goes to, and, from the CPU of
all of them against the wall time on the machine's cores, how much of the drain waits.

Usage, from the repository root, in a venv with taskq and the bench app's packages::

    .venv/bin/python -m bench.compare.cpu_split [--module taskq_results_app] [--jobs 20000]

A private redis-server; ``--jobs`` jobs of the module's ``noop`` task bulk-enqueued with no
worker, then ``taskq worker -A bench.peers.<module>:app -c 2`` spawned and timed until the
last job ran (start-up included: most of the master's CPU is its imports). ``--repeat``
drains, each from an empty Redis; CPU from ``/proc/<pid>/schedstat``. With
``BENCH_TASK_INCR=0`` the task skips its ``INCR``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import record
from bench.common.job import COUNTER, ENV_INCR, ENV_URL
from bench.common.procs import descendants, stop_tree, tree_cpu_seconds
from bench.common.redis_server import PrivateRedis

POLL_S = 0.005


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` alone (its threads), not of its children."""
    return tree_cpu_seconds(pid) - sum(tree_cpu_seconds(c) for c in descendants(pid))


def _done(server: PrivateRedis, records: Path, incr: bool) -> int:
    """Jobs run so far: the task's counter, or its records when it makes no INCR."""
    if incr:
        return int(server.client().get(COUNTER) or 0)
    return record.total_records(records)


def drain(server: PrivateRedis, module: str, jobs: int, procs: int) -> dict[str, Any]:
    """One drain of ``jobs`` waiting jobs by a fresh worker: seconds and µs per job each."""
    server.flush()
    records = Path(tempfile.mkdtemp(prefix="taskq-cpu-split-"))
    os.environ[record.ENV_DIR] = str(records)
    app = importlib.import_module(f"bench.peers.{module}")
    for start in range(0, jobs, 1000):
        app.noop.starmap([(i, 0) for i in range(start, min(jobs, start + 1000))])
    redis_pid = int(server.client().info("server")["process_id"])
    redis_cpu = _cpu_s(redis_pid)
    argv = [sys.executable, "-m", "taskq", "worker", "-A", f"bench.peers.{module}:app"]
    argv += ["-c", str(procs), "--loglevel", "warning"]
    t0 = time.perf_counter()
    worker = subprocess.Popen(argv, start_new_session=True)
    incr = os.environ.get(ENV_INCR, "1") != "0"
    try:
        while _done(server, records, incr) < jobs:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode})")
            time.sleep(POLL_S)
        seconds = time.perf_counter() - t0
        children = descendants(worker.pid)
        split = {
            "master": _cpu_s(worker.pid),
            "children": sum(tree_cpu_seconds(c) for c in children),
            "redis": _cpu_s(redis_pid) - redis_cpu,
        }
    finally:
        stop_tree(worker)
    return {"seconds": seconds, **{k: v * 1e6 / jobs for k, v in split.items()}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--module", default="taskq_app", help="a module of bench/peers")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--procs", type=int, default=2, help="worker processes")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with PrivateRedis(Path(tempfile.mkdtemp(prefix="taskq-cpu-split-"))) as server:
        os.environ[ENV_URL] = server.url
        for _ in range(args.repeat):
            d = drain(server, args.module, args.jobs, args.procs)
            print(
                f"{args.module}: wall {d['seconds']:.2f} s; CPU µs per job: master "
                f"{d['master']:.1f}, children {d['children']:.1f}, Redis {d['redis']:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
