"""Queue-side Redis time per job of one in-process consumer (``INFO commandstats``, the
task's ``INCR`` left out), results off or on: a quick, load-tolerant check of what a change to
the fetch costs Redis, next to the full bench's clean-pass figures.

Usage, from the repository root, in the project's venv::

    .venv/bin/python -m bench.compare.redis_per_job [--results] [--prefetch 64] [--jobs 10000]

A private redis-server; the main bench's app (``bench/peers/taskq_app.py``, or with
``--results`` ``taskq_results_app.py``) and its task. 200 jobs are drained first; then
``--repeat`` times: ``--jobs`` jobs enqueued, ``CONFIG RESETSTAT``, the same consumer drains
them (burst mode), ``INFO commandstats``. Per drain: the µs per job of each command. A
script's row (``evalsha``) includes the commands it ran, which Redis counts under their own
names too: which ran inside is for the reader to tell (the full bench's ``MONITOR`` pass
splits them, bench/common/redistime.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from pathlib import Path

import redis

from bench.common.redis_server import PrivateRedis
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor

LEFT_OUT = {"incr", "info", "config"}  # the task's own command, and the harness's


def drain(results: bool, prefetch: int, jobs: int, repeat: int) -> list[dict[str, float]]:
    """µs per job of each command, for each drain."""
    work = Path(tempfile.mkdtemp(prefix="taskq-redis-per-job-"))
    out = []
    with PrivateRedis(work) as server:
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ["BENCH_RECORD_DIR"] = str(work)
        module = importlib.import_module(
            "bench.peers." + ("taskq_results_app" if results else "taskq_app")
        )
        consumer = Consumer(
            module.app.broker_for(["tasks"]),
            Executor(module.app),
            name="redis-per-job",
            options=ConsumerOptions(prefetch=prefetch or None, burst=True),
        )
        module.noop.starmap([(i, 0) for i in range(200)])
        consumer.run_sync()
        client = redis.Redis.from_url(server.url)
        for _ in range(repeat):
            for start in range(0, jobs, 1000):
                module.noop.starmap([(i, 0) for i in range(start, min(jobs, start + 1000))])
            client.config_resetstat()
            consumer.run_sync()
            stats = client.info("commandstats")
            rows = {k.removeprefix("cmdstat_"): v["usec"] / jobs for k, v in stats.items()}
            out.append({k: v for k, v in rows.items() if k not in LEFT_OUT})
        consumer.leave()
        module.app.close()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", action="store_true", help="stored results on")
    p.add_argument("--prefetch", type=int, default=64, help="0: adaptive (default settings)")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    for rows in drain(args.results, args.prefetch, args.jobs, args.repeat):
        shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(rows.items()) if v >= 0.05)
        print(f"Redis µs per job: {shown}")


if __name__ == "__main__":
    main()
