"""CPU instructions per job of a worker's child and of the queue floor's consumer, counted by
valgrind (callgrind): the same on every run of the same code, where a drain's rate on a shared
2-core machine moves 10-20 % from run to run. Unlike bytecodes (:mod:`bench.compare.opcodes`)
it counts what C does too: msgpack, the socket, redis-py's and the interpreter's own work.

Usage, from the repository root, in a venv with taskq and msgpack, with valgrind installed::

    .venv/bin/python -m bench.compare.instructions [--results] [--no-incr] [--checkout DIR]

Each side drains jobs (taskq: the main bench's app and task, ``bench/peers/taskq_app.py`` or
with ``--results`` ``taskq_results_app.py``, by an in-process consumer as a child runs it,
:func:`bench.compare.profile_child.child_consumer`; the floor: ``raw.consume_once``'s loop)
from a private redis-server, in a process under callgrind, once with ``--small`` jobs and
once with ``--large``; another process enqueued them, unseen. The difference of the two
totals over the difference of the job counts is the cost of one job, start-up and the first
jobs left out. The consumer takes ``--prefetch`` jobs a fetch (64: what adaptive prefetch
takes of these no-op jobs in a drain; adaptive prefetch itself sizes batches by time, which
valgrind stretches about fiftyfold). ``--checkout`` measures taskq from another checkout (a
git worktree: its directory first on the path). The last stdout line is JSON.

What the code decides by the clock it decides as at a fiftieth of the speed: every run is
long enough to count at its end rather than at the next fetch (:mod:`taskq.worker.runstats`),
and with ``--results`` a batch outlasts the start check's 50 ms, which then reads the
tombstones of the jobs left in it (:class:`taskq.worker.cancels.StartCheck`). Those paths
cost more here than in a drain at full speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTED = re.compile(r"Collected : (\d+)")

TASKQ = """
import importlib, os, subprocess, sys
repo, n, module, prefetch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sys.path.insert(0, repo)
from bench.compare.profile_child import child_consumer
app = importlib.import_module("bench.peers." + module)
consumer = child_consumer(app.app, prefetch)
subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {repo!r})\\n"
                f"from bench.peers.{module} import noop\\n"
                f"noop.starmap([(i, 0) for i in range({n})])"], check=True)
consumer.run_sync()
consumer.leave()
app.app.close()
"""

FLOOR = """
import os, subprocess, sys
repo, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, repo)
from redis import Redis
from bench.common.job import ENV_URL
from bench.compare.raw import JOB, consume_once
subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {repo!r})\\n"
                "import os\\nfrom redis import Redis\\n"
                "from bench.compare.raw import GROUP, JOB_BODY, STREAM\\n"
                "r = Redis.from_url(os.environ['BENCH_REDIS_URL'])\\n"
                "p = r.pipeline(transaction=False)\\n"
                f"for _ in range({n}): p.xadd(STREAM, {{'job': JOB_BODY}})\\n"
                "p.execute()\\nr.xgroup_create(STREAM, GROUP, id='0')"], check=True)
r = Redis.from_url(os.environ[ENV_URL])
while consume_once(r, "instructions-0", 100, JOB):
    pass
"""


def collected(program: str, argv: list[str], env: dict[str, str]) -> int:
    """Instructions callgrind counted in one process running ``program`` (not its children)."""
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-c", program, *argv],
        capture_output=True, text=True, check=True, env=env, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    found = COLLECTED.search(run.stderr)
    if found is None:
        raise RuntimeError(f"no callgrind total in: {run.stderr[-400:]}")
    return int(found.group(1))


def per_job(program: str, argv: list[str], small: int, large: int) -> float:
    """Instructions per job: the difference of a large and a small drain, each from an empty
    private Redis."""
    from bench.common.redis_server import PrivateRedis

    totals = []
    for n in (small, large):
        work = Path(tempfile.mkdtemp(prefix="taskq-instructions-"))
        with PrivateRedis(work) as server:
            env = dict(os.environ, BENCH_REDIS_URL=server.url, BENCH_RECORD_DIR=str(work))
            env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts: ±0.1 % (else ±2 %)
            totals.append(collected(program, [*argv[:1], str(n), *argv[1:]], env))
    return (totals[1] - totals[0]) / (large - small)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", action="store_true", help="stored results on")
    p.add_argument("--no-incr", action="store_true", help="the task without its INCR")
    p.add_argument("--checkout", default=str(REPO), help="the taskq checkout to measure")
    p.add_argument(
        "--prefetch",
        type=int,
        default=64,
        help="jobs per fetch (0: adaptive, which under "
        "valgrind's slowdown takes a few jobs at a time, not a drain's 64)",
    )
    p.add_argument("--small", type=int, default=500)
    p.add_argument("--large", type=int, default=2_500)
    args = p.parse_args(argv)
    os.environ["BENCH_TASK_INCR"] = "0" if args.no_incr else "1"
    module = "taskq_results_app" if args.results else "taskq_app"
    checkout = str(Path(args.checkout).resolve())
    taskq = per_job(TASKQ, [checkout, module, str(args.prefetch)], args.small, args.large)
    floor = per_job(FLOOR, [str(REPO)], args.small, args.large)
    print(f"instructions per job: taskq {taskq:,.0f}, queue floor {floor:,.0f}", file=sys.stderr)
    out = {"checkout": checkout, "results": args.results, "incr": not args.no_incr,
           "prefetch": args.prefetch, "taskq": round(taskq),
           "queue_floor": round(floor)}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
