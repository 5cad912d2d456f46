"""Python bytecodes per job of a worker's child after its first jobs, by module, against
the queue floor's consumer loop: a count, not a time, so it is the same on every run of the
same code on any machine (a drain's rate on a shared 2-core machine moves by 10-20 % from
run to run; this does not move at all).

Usage, from the repository root, in a venv with taskq and msgpack::

    .venv/bin/python -m bench.compare.opcodes [--jobs 2000] [--prefetch 0] [--results]
        [--by-function]

A private redis-server; the main bench's app (``bench/peers/taskq_app.py``, or with
``--results`` ``taskq_results_app.py``) and its task (``bench.common.job``: its record, then
one ``INCR``). An in-process consumer as a child runs it (``profile_child.child_consumer``)
drains 100 jobs unseen, then ``--jobs`` jobs with every bytecode it runs counted by module
(``sys.settrace`` opcode events; the trace makes the drain slow, not the count wrong). The
queue floor (``raw.consume_once``: a read of up to 100 messages, per message the body's
decode and the same task, one pipelined ack and delete) drains as many messages the same
way. The last stdout line is JSON.

Bytecodes are not all alike (a call costs more than a load, C functions count as one), so
this says where a path's Python work is and whether a change shortened it; the rate it
buys is the drain's to measure (``ab_drain``).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

SITE = "site-packages/"


def module_of(filename: str) -> str:
    """``taskq/worker/consumer.py``, ``redis/client.py``: a file named from its package."""
    if SITE in filename:
        return filename.split(SITE, 1)[1]
    for top in ("taskq/", "bench/"):
        if top in filename:
            return top + filename.rsplit(top, 1)[1]
    return filename


def counted(run: Callable[[], object], by_function: bool = False) -> collections.Counter[str]:
    """The bytecodes ``run`` executes, by module (``by_function``: by module and function,
    ``taskq/worker/finish.py:record``)."""
    found: collections.Counter[str] = collections.Counter()

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        where = module_of(frame.f_code.co_filename)
        if by_function:
            where = f"{where}:{frame.f_code.co_name}"

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                found[where] += 1
            return local

        return local

    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    return found


def taskq_drain(
    jobs: int, prefetch: int, results: bool, by_function: bool = False
) -> collections.Counter[str]:
    """A child's bytecodes over ``jobs`` jobs, after 100 unseen."""
    from bench.compare.profile_child import child_consumer

    module = importlib.import_module(
        "bench.peers." + ("taskq_results_app" if results else "taskq_app")
    )
    consumer = child_consumer(module.app, prefetch)
    module.noop.starmap([(i, 0) for i in range(100)])
    consumer.run_sync()
    for start in range(0, jobs, 1000):
        module.noop.starmap([(i, 0) for i in range(start, min(jobs, start + 1000))])
    found = counted(consumer.run_sync, by_function)
    consumer.leave()
    module.app.close()
    return found


def floor_drain(url: str, jobs: int, by_function: bool = False) -> collections.Counter[str]:
    """The queue floor's bytecodes over ``jobs`` messages, after 100 unseen."""
    from redis import Redis

    from bench.compare.raw import GROUP, JOB, JOB_BODY, STREAM, consume_once

    r = Redis.from_url(url)

    def add(n: int) -> None:
        pipe = r.pipeline(transaction=False)
        for _ in range(n):
            pipe.xadd(STREAM, {"job": JOB_BODY})
        pipe.execute()

    def drain() -> None:
        while consume_once(r, "opcodes-0", 100, JOB):
            pass

    add(100)
    r.xgroup_create(STREAM, GROUP, id="0")
    drain()
    for start in range(0, jobs, 1000):
        add(min(1000, jobs - start))
    return counted(drain, by_function)


def per_job(found: collections.Counter[str], jobs: int) -> dict[str, float]:
    """Bytecodes per job by module, largest first, and the totals: all, taskq's, redis-py's."""
    rows = {m: n / jobs for m, n in found.most_common()}
    total = {
        "all": sum(rows.values()),
        "taskq": sum(v for m, v in rows.items() if m.startswith("taskq/")),
        "redis-py": sum(v for m, v in rows.items() if m.startswith("redis/")),
    }
    return {**{f"total {k}": v for k, v in total.items()}, **rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2_000)
    p.add_argument("--prefetch", type=int, default=0, help="0: adaptive (default settings)")
    p.add_argument("--results", action="store_true", help="stored results on")
    p.add_argument("--top", type=int, default=25, help="modules listed per side")
    p.add_argument("--by-function", action="store_true", help="count by module and function")
    args = p.parse_args(argv)
    from bench.common.redis_server import PrivateRedis

    work = Path(tempfile.mkdtemp(prefix="taskq-opcodes-"))
    with PrivateRedis(work) as server:
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ["BENCH_RECORD_DIR"] = str(work)
        out = {
            "taskq": per_job(
                taskq_drain(args.jobs, args.prefetch, args.results, args.by_function), args.jobs
            ),
            "queue floor": per_job(floor_drain(server.url, args.jobs, args.by_function), args.jobs),
        }
    for side, rows in out.items():
        print(f"{side}: bytecodes per job", file=sys.stderr)
        for name, n in list(rows.items())[: 3 + args.top]:
            print(f"  {n:8.1f}  {name}", file=sys.stderr)
    print(
        json.dumps({"jobs": args.jobs, "prefetch": args.prefetch, "results": args.results, **out})
    )


if __name__ == "__main__":
    main()
