"""Where a worker child's time goes per job, after its first job: cProfile of one in-process
consumer, as a child runs it (a scoreboard slot, the process title), split by cost.

Usage, from the repository root, in the project's venv::

    .venv/bin/python -m bench.compare.profile_child [--jobs 20000] [--prefetch 64] [--results]

A private redis-server; the main bench's app (``bench/peers/taskq_app.py``, or with
``--results`` ``taskq_results_app.py``: stored results) and its task (``bench.common.job``: the
record, then one ``INCR``). 200 jobs are drained first, unprofiled (connections, scripts,
caches); then ``--jobs`` jobs are enqueued and drained by the same consumer under cProfile.
Each cost is the cumulative time of the functions that do it (``ENTRIES``; what runs inside
another cost is taken out of it, ``INSIDE``), and "consumer loop" is the rest of the
consumer's ``run_sync``; the table is µs per job, under the profiler (deterministic: each
call costs more than without it, about twice, so compare rows with rows, not totals with
real rates). The clock is wall time (a CPU-time clock costs a system call per function call
here, which distorts the rows far more), so load on the machine adds to the figures: the
drain is profiled ``--repeat`` times and each cost's least value is kept. The last stdout
line is JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import os
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

# cost → the functions ("file suffix:function") whose cumulative time it is, each call made
# once per job or per batch; the costs do not nest (what nests is subtracted in ``split``)
ENTRIES: dict[str, tuple[str, ...]] = {
    "task (record + INCR)": ("bench/common/job.py:job",),
    "decode": ("worker/executor.py:prepare_ahead", "worker/executor.py:still_current"),
    "start checks": ("worker/cancels.py:check", "worker/cancels.py:fetched"),
    "scoreboard": ("worker/scoreboard.py:start", "worker/scoreboard.py:finish",
                   "worker/scoreboard.py:claim_next", "worker/scoreboard.py:list_batch"),
    "context": ("taskq/context.py:of", "taskq/context.py:set_current",
                "taskq/context.py:reset_current"),
    "results (encode)": ("taskq/results.py:encode_result",),
    "title": ("setproctitle",),
    "logging": ("worker/finish.py:log_outcome",),
    "middleware": ("taskq/middleware.py:emit",),
    "outcome record (ack queue)": ("worker/finish.py:record",),
    "run (executor)": ("worker/executor.py:execute",),
    "fetch + acks (round trip)": ("worker/consumer.py:poll",),
}  # fmt: skip
# cost → the costs that run inside it, taken out of its figure
INSIDE: dict[str, tuple[str, ...]] = {
    "outcome record (ack queue)": ("logging", "middleware"),
    "run (executor)": ("task (record + INCR)", "context", "results (encode)"),
}
TOTAL = "worker/consumer.py:run_sync"


def _cum_s(stats: pstats.Stats, entry: str) -> float:
    """Cumulative seconds of the functions matching ``file suffix:function`` (or a builtin's
    name)."""
    where, _, name = entry.rpartition(":")
    found = 0.0
    for (filename, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
        if (where and filename.endswith(where) and function == name) or (
            not where and name in function
        ):
            found += row[3]
    return found


def split(stats: pstats.Stats, jobs: int) -> dict[str, float]:
    """µs per job of each cost, "consumer loop" taking what no cost names."""
    us = {cost: sum(_cum_s(stats, e) for e in entries) * 1e6 / jobs
          for cost, entries in ENTRIES.items()}  # fmt: skip
    for cost, inner in INSIDE.items():
        us[cost] -= sum(us[i] for i in inner)
    us["consumer loop (the rest)"] = _cum_s(stats, TOTAL) * 1e6 / jobs - sum(us.values())
    return us


def child_consumer(app: Any, prefetch: int) -> Any:
    """An in-process consumer as a worker's child runs it: a scoreboard slot of its own and a
    process title set when it changes (``prefetch`` 0: adaptive)."""
    from taskq.worker.consumer import Consumer, ConsumerOptions
    from taskq.worker.executor import Executor
    from taskq.worker.lifeline import ChildTitle
    from taskq.worker.scoreboard import Scoreboard

    board = Scoreboard(1)
    board.prepare(0)
    return Consumer(
        app.broker_for(["tasks"]),
        Executor(app),
        name="profile-0",
        options=ConsumerOptions(prefetch=prefetch or None, burst=True),
        slot=board.slot(0),
        set_title=ChildTitle("taskq: child 1/1"),
    )


def profile(jobs: int, prefetch: int, results: bool, repeat: int) -> list[pstats.Stats]:
    """Drain ``jobs`` with one consumer under cProfile, ``repeat`` times (the same consumer,
    after its first jobs unprofiled)."""
    from bench.common.redis_server import PrivateRedis

    work = Path(tempfile.mkdtemp(prefix="taskq-profile-"))
    found = []
    with PrivateRedis(work) as server:
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ["BENCH_RECORD_DIR"] = str(work)
        module = importlib.import_module(
            "bench.peers." + ("taskq_results_app" if results else "taskq_app")
        )
        app, noop = module.app, module.noop
        consumer = child_consumer(app, prefetch)
        noop.starmap([(i, 0) for i in range(200)])
        consumer.run_sync()  # the first jobs, unprofiled
        for _ in range(repeat):
            for start in range(0, jobs, 1000):
                noop.starmap([(i, 0) for i in range(start, min(jobs, start + 1000))])
            profiler = cProfile.Profile()
            profiler.runcall(consumer.run_sync)
            found.append(pstats.Stats(profiler))
        consumer.leave()
        app.close()
    return found


def summary(runs: list[pstats.Stats], jobs: int, top: int) -> dict[str, Any]:
    """Each cost's least µs per job over the runs, and the top functions of the fastest run."""
    splits = [split(stats, jobs) for stats in runs]
    fastest = min(range(len(runs)), key=lambda i: sum(splits[i].values()))
    rows = sorted(runs[fastest].stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    return {
        "us_per_job": {cost: min(s[cost] for s in splits) for cost in splits[0]},
        "top": [
            (f"{Path(f).name}:{line}({fn})", round(r[2] * 1e6 / jobs, 2))
            for (f, line, fn), r in rows[:top]
        ],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--prefetch", type=int, default=64, help="0: adaptive (default settings)")
    p.add_argument("--results", action="store_true", help="stored results on")
    p.add_argument("--top", type=int, default=25, help="functions listed by own time")
    p.add_argument("--repeat", type=int, default=3, help="profiled drains; least cost kept")
    args = p.parse_args(argv)
    runs = profile(args.jobs, args.prefetch, args.results, args.repeat)
    out = summary(runs, args.jobs, args.top) | {
        "jobs": args.jobs,
        "prefetch": args.prefetch,
        "results": args.results,
        "repeat": args.repeat,
    }
    total = sum(out["us_per_job"].values())
    mode = "on" if args.results else "off"
    print(f"µs per job under cProfile ({args.jobs} jobs, --prefetch {args.prefetch}, "
          f"results {mode}): total {total:.1f}", file=sys.stderr)  # fmt: skip
    for cost, us in out["us_per_job"].items():
        print(f"  {cost:<22} {us:6.2f}", file=sys.stderr)
    print("  own time (tottime), µs per job:", file=sys.stderr)
    for name, us in out["top"]:
        print(f"    {us:6.2f}  {name}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
