"""Raw redis-py ceilings, measured the same way on the same private Redis.

* ``xadd_one``: one XADD per call, one round trip each (single producer).
* ``xadd_pipelined``: XADD in pipelines of ``--batch`` (single producer).
* ``consume_batched``: N messages waiting; 2 processes loop XREADGROUP
  COUNT 100 then one pipelined XACK+XDEL per batch.
* ``consume_floor``: the drain's raw floor: ``consume_batched`` plus, per
  message, the benchmark task's one ``INCR`` round trip (:mod:`bench.common.job`).
* ``consume_queue_floor``: ``consume_batched`` plus, per message, what any
  queue's worker must do at the least: decode the message's msgpack job body
  and call the benchmark task itself (:func:`bench.common.job.job`: its record and its
  ``INCR`` on its own connection). The least a Python queue can do for the
  same jobs, against which the raw floor's share is read.
* ``consume_single``: the same as ``consume_batched`` with COUNT 1 and one
  XACK+XDEL round trip per message.

Consumers are started and connected first, then released together; the time
runs from the release to the last acknowledgement. Every loop is bracketed by
a commandstats window (:class:`bench.common.redistime.Window`), so each ceiling also
reports its Redis time per message. The consumers may use every CPU, as workers
do. With ``--clean-cpus``, the three consume ceilings are then run once more
(under ``"clean"``) with the consumers confined to those CPUs, which run.py
picks so that nothing preempts redis-server: the clean Redis time per message.
Prints one JSON object.
Run as ``python -m bench.compare.raw --redis-url URL`` (run.py does this).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import msgpack
from redis import Redis
from redis.utils import HIREDIS_AVAILABLE

from bench.common.job import COUNTER, ENV_URL, job
from bench.common.procs import confine_self, parse_cpus, pin_self, unpin_self
from bench.common.record import ENV_DIR
from bench.common.redistime import Window

STREAM = "raw:stream"
GROUP = "raw"
FIELDS = {"job": b"x" * 64}  # about the size of a small job message
JOB_BODY = msgpack.packb(
    {"v": 1, "id": "0" * 32, "task": "bench.peers.taskq_app.noop", "args": [0, 0], "kwargs": {},
     "queue": "tasks", "priority": "normal", "created_ms": 0, "retries": 0}
)  # fmt: skip
"""A job body as a queue would write it (taskq's shape), for the queue floor."""
NOTHING, INCR, JOB = "nothing", "incr", "job"
CONSUMES = {  # consume ceiling -> (XREADGROUP COUNT, what runs per message)
    "consume_batched": (100, NOTHING),
    "consume_floor": (100, INCR),
    "consume_queue_floor": (100, JOB),
    "consume_single": (1, NOTHING),
}


def rate(jobs: int, seconds: float) -> dict[str, Any]:
    """Figures of one measurement."""
    return {"jobs": jobs, "seconds": seconds, "rate": jobs / seconds}


def xadd_one(r: Redis, jobs: int, deadline_s: float) -> dict[str, Any]:
    """One XADD round trip per message."""
    done = 0
    start = time.perf_counter()
    stop = start + deadline_s
    while done < jobs and time.perf_counter() < stop:
        r.xadd(STREAM, FIELDS)
        done += 1
    return rate(done, time.perf_counter() - start)


def xadd_pipelined(
    r: Redis, jobs: int, batch: int, deadline_s: float, fields: dict[str, bytes] = FIELDS
) -> dict[str, Any]:
    """XADD in non-transactional pipelines of ``batch`` messages."""
    done = 0
    start = time.perf_counter()
    stop = start + deadline_s
    while done < jobs and time.perf_counter() < stop:
        pipe = r.pipeline(transaction=False)
        n = min(batch, jobs - done)
        for _ in range(n):
            pipe.xadd(STREAM, fields)
        pipe.execute()
        done += n
    return rate(done, time.perf_counter() - start)


def _consumer(
    url: str,
    name: str,
    count: int,
    work: str,
    barrier: Barrier,
    out: Queue[tuple[int, int]],
    deadline_s: float,
    cpus: frozenset[int],
) -> None:
    """Read/(work)/ack/delete until the stream has nothing new; report (n, end_ns).

    Runs on ``cpus``, or, like workers, on every CPU when that is empty.
    """
    if cpus:
        confine_self(cpus)
    else:
        unpin_self()
    r = Redis.from_url(url)
    r.ping()
    barrier.wait()  # connected
    barrier.wait()  # released
    done = 0
    stop = time.monotonic() + deadline_s
    while time.monotonic() < stop:
        took = consume_once(r, name, count, work)
        if not took:
            break
        done += took
    out.put((done, time.time_ns()))


def consume_once(r: Redis, name: str, count: int, work: str) -> int:
    """One turn of a consume ceiling's loop: read up to ``count`` messages, do ``work`` for
    each, ack and delete them; returns how many it took (0: the stream had nothing new)."""
    resp = r.xreadgroup(GROUP, name, {STREAM: ">"}, count=count)
    if not resp:
        return 0
    ids = [msg_id for msg_id, _ in resp[0][1]]
    if work == INCR:
        for _ in ids:
            r.execute_command("INCR", COUNTER)  # the benchmark task's one Redis call
    elif work == JOB:
        for _, fields in resp[0][1]:
            job(msgpack.unpackb(fields[b"job"])["args"][0])
    pipe = r.pipeline(transaction=False)
    pipe.xack(STREAM, GROUP, *ids)
    pipe.xdel(STREAM, *ids)
    pipe.execute()
    return len(ids)


def consume(
    url: str,
    r: Redis,
    window: Window,
    jobs: int,
    count: int,
    work: str,
    args: argparse.Namespace,
    cpus: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """``args.procs`` consumer processes (on ``cpus``, if any) drain ``jobs`` waiting messages."""
    xadd_pipelined(r, jobs, 1000, args.deadline, {"job": JOB_BODY} if work == JOB else FIELDS)
    r.xgroup_create(STREAM, GROUP, id="0")
    records = tempfile.mkdtemp(prefix="bench-raw-records-")
    os.environ[ENV_DIR], os.environ[ENV_URL] = records, url  # for the forked consumers' job()
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(args.procs + 1)
    out: Queue[tuple[int, int]] = ctx.Queue()
    workers = [
        ctx.Process(
            target=_consumer,
            args=(url, f"c{k}", count, work, barrier, out, args.deadline, cpus),
        )
        for k in range(args.procs)
    ]
    for w in workers:
        w.start()
    barrier.wait(timeout=30)  # all connected
    window.start()
    barrier.wait(timeout=30)
    t0 = time.time_ns()
    results = [out.get(timeout=args.deadline + 30) for _ in workers]
    for w in workers:
        w.join(timeout=10)
    shutil.rmtree(records, ignore_errors=True)
    done = sum(n for n, _ in results)
    seconds = (max(end for _, end in results) - t0) / 1e9
    return {**rate(done, seconds), "complete": done == jobs, "redis": window.stop(done)}


def parse_args() -> argparse.Namespace:
    """Command-line options (all set by run.py)."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--redis-url", required=True)
    p.add_argument(
        "--jobs", type=int, default=20_000, help="messages for pipelined/consume ceilings"
    )
    p.add_argument(
        "--enqueue-jobs", type=int, default=10_000, help="messages for the one-per-call loop"
    )
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--deadline", type=float, default=120.0, help="bound of each loop, seconds")
    p.add_argument("--producer-cpu", type=int, default=-1, help="pin the producer (not consumers)")
    p.add_argument(
        "--clean-cpus",
        type=parse_cpus,
        default=frozenset(),
        help="comma list: also run the consume ceilings with the consumers on these CPUs only",
    )
    return p.parse_args()


def main() -> None:
    """Run every ceiling once, each on an empty Redis; print JSON."""
    args = parse_args()
    pin_self(args.producer_cpu)
    url = args.redis_url
    r = Redis.from_url(url)
    window = Window(url)
    out: dict[str, Any] = {"hiredis_in_use": HIREDIS_AVAILABLE}

    def enqueue(loop: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        window.start()
        res = loop()
        return {**res, "redis": window.stop(res["jobs"])}

    def drain(count: int, work: str, cpus: frozenset[int]) -> dict[str, Any]:
        return consume(url, r, window, args.jobs, count, work, args, cpus)

    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "xadd_one": lambda: enqueue(lambda: xadd_one(r, args.enqueue_jobs, args.deadline)),
        "xadd_pipelined": lambda: enqueue(
            lambda: xadd_pipelined(r, args.jobs, args.batch, args.deadline)
        ),
        **{name: partial(drain, *shape, frozenset()) for name, shape in CONSUMES.items()},
    }
    for name, step in steps.items():
        r.flushall()
        out[name] = step()
    if args.clean_cpus:
        out["clean"] = {}
        for name, shape in CONSUMES.items():
            r.flushall()
            out["clean"][name] = drain(*shape, args.clean_cpus)
    r.flushall()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
