"""An A/B of the drain after the first job, against the queue floor, in one run: the
target row "drain after the 1st job vs queue floor" for several checkouts of taskq (git
worktrees), alternating, so that a change is judged against its base on the same machine
state rather than across two full runs of ``run.py`` (whose spread is larger than most
changes).

Usage, from the repository root, in a venv with taskq's dependencies and msgpack::

    .venv/bin/python -m bench.compare.ab_drain --checkout . --checkout ../wt/change [--rounds 4]
        [--worker-args "--prefetch 64"] [--app taskq_results_app]

A private redis-server. Each round measures the queue floor (``raw.consume_queue_floor``,
two consumers) and then, per checkout, ``--jobs`` jobs of ``bench/peers/taskq_app.py`` (or
of the ``--app`` module: ``taskq_results_app`` stores every job's result) bulk-enqueued
with no worker and drained by ``python -m taskq worker -c 2`` and the ``--worker-args`` run
from that checkout (its own code and bench app: the checkout is the working directory and
the first entry of ``PYTHONPATH``). A drain's rate is counted from its first job's start to
its last one's, from the task's records, as the main bench's "drain after 1st job" is.
Prints each round and the medians, as rates and as shares of the floor's median.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import record
from bench.common.job import ENV_URL
from bench.common.procs import stop_tree
from bench.common.redis_server import PrivateRedis
from bench.common.redistime import Window
from bench.compare.raw import JOB, consume

POLL_S = 0.02
ENQUEUE = (
    "from bench.peers.{app} import noop\n"
    "for s in range(0, {jobs}, 1000):\n"
    "    noop.starmap([(i, 0) for i in range(s, min({jobs}, s + 1000))])"
)


def drain(
    server: PrivateRedis,
    checkout: Path,
    jobs: int,
    deadline_s: float,
    records: Path,
    worker_args: Sequence[str] = (),
    app: str = "taskq_app",
) -> float:
    """Jobs per second from the first job's start to the last one's, for one worker of
    ``checkout`` draining ``jobs`` waiting jobs (their records go to ``records``)."""
    server.flush()
    record.clear(records)
    env = {**os.environ, "PYTHONPATH": str(checkout), record.ENV_DIR: str(records)}
    code = ENQUEUE.format(jobs=jobs, app=app)
    subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, check=True)
    argv = [sys.executable, "-m", "taskq", "worker", "-A", f"bench.peers.{app}:app"]
    argv += ["-c", "2", "--loglevel", "warning", *worker_args]
    worker = subprocess.Popen(argv, cwd=checkout, env=env, start_new_session=True)
    try:
        stop = time.monotonic() + deadline_s
        while record.total_records(records) < jobs:
            if worker.poll() is not None or time.monotonic() > stop:
                raise RuntimeError(f"{checkout}: the drain did not finish")
            time.sleep(POLL_S)
    finally:
        stop_tree(worker)
    starts = sorted(t_ns for _, t_ns in record.read_records(records))
    return (len(starts) - 1) / ((starts[-1] - starts[0]) / 1e9)


def queue_floor(server: PrivateRedis, jobs: int, deadline_s: float) -> float:
    """The queue floor's rate (two consumers: decode and the bench task per message; it
    keeps its records in a directory of its own)."""
    server.flush()
    shape = argparse.Namespace(procs=2, deadline=deadline_s)
    result = consume(server.url, server.client(), Window(server.url), jobs, 100, JOB, shape)
    return float(result["rate"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkout", action="append", type=Path, required=True, help="repeatable")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--deadline", type=float, default=120.0, help="bound of each drain, s")
    p.add_argument(
        "--app", default="taskq_app", help="a module of bench/peers (taskq_results_app: results on)"
    )
    p.add_argument("--worker-args", default="", help='more worker options, e.g. "--prefetch 64"')
    args = p.parse_args(argv)
    worker_args = shlex.split(args.worker_args)
    checkouts = [c.resolve() for c in args.checkout]
    rates: dict[str, list[float]] = {"queue floor": [], **{str(c): [] for c in checkouts}}
    with PrivateRedis(Path(tempfile.mkdtemp(prefix="taskq-ab-"))) as server:
        os.environ[ENV_URL] = server.url
        records = Path(tempfile.mkdtemp(prefix="taskq-ab-records-"))
        for n in range(1, args.rounds + 1):
            rates["queue floor"].append(queue_floor(server, args.jobs, args.deadline))
            for c in checkouts:
                rate = drain(server, c, args.jobs, args.deadline, records, worker_args, args.app)
                rates[str(c)].append(rate)
            print(f"round {n}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()))
    floor = statistics.median(rates["queue floor"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name}: median {median:,.0f} jobs/s, {100 * median / floor:.1f} % of the floor")


if __name__ == "__main__":
    main()
