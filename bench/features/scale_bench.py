"""What the autoscaling signal costs Redis: per refresh, and per second of polling.

On a private redis-server it fills the queue ``tasks`` with W waiting jobs (W = 1,000 and
100,000: the cost must not grow with W), registers K worker records (K = 1 and 20), and
measures one :class:`~taskq.worker.scaling.Scaler` refresh: round trips (counted on the
link), the commands Redis ran and their own time (``INFO commandstats`` deltas), and the
wall time. Then it polls ``signals()`` as fast as it can for a few seconds, as a hot
autoscaler or many scrapes would, and counts the refreshes Redis saw (target: at most one
per second per queue), and the waiting-mix read on its own (an XRANGE of at most 200 entries
per stream). Finally the master's side: the time of one duration sample (taken once per
supervision tick, never per job; 4 and 16 children, each running a job), of one window sum
at a heartbeat with 32 tasks, and the bytes the duration fields add to each heartbeat
record (32 tasks carried).

    PYTHONPATH=. python bench/features/scale_bench.py [--poll-s 5]

Exit status 2 when polling refreshed more than once a second.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from taskq import App
from taskq.broker.link import Link
from taskq.broker.reads import Reader
from taskq.broker.workers import WorkerRegistry
from taskq.message import Message
from taskq.worker.durations import CARRIED_TASKS, DurationMeter, TaskTime
from taskq.worker.outcome import JobCounts
from taskq.worker.record import WorkerRecord
from taskq.worker.scaling import Scaler, waiting_mix
from taskq.worker.slotview import Running, SlotView
from tests.redis_server import RedisServer

QUEUE = "tasks"


class CountingLink:
    """A link that counts its round trips (a pipeline or a script is one)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.round_trips = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.link, name)
        if name in ("call", "pipeline", "script"):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.round_trips += 1
                return attr(*args, **kwargs)

            return counted
        return attr


def command_stats(r: redis.Redis) -> tuple[int, int]:
    """Commands run and their usec, summed over every command, so far."""
    stats = r.info("commandstats")
    return sum(int(s["calls"]) for s in stats.values()), sum(int(s["usec"]) for s in stats.values())


def fill(app: App, waiting: int) -> None:
    app.link.call("DEL", *(f"{QUEUE}:{p}" for p in ("high", "normal", "low")))
    app.broker_for([QUEUE]).ensure_groups()
    msgs = (Message(f"bench.task{i % 40}", (i,), {}, queue=QUEUE) for i in range(waiting))
    app.enqueue_many(msgs)


def register(app: App, r: redis.Redis, workers: int) -> None:
    """Exactly ``workers`` live records on the queue (long-lived: the bench never beats)."""
    r.delete(f"{QUEUE}:workers", *r.keys(f"{QUEUE}:worker:*"))
    registry = WorkerRegistry(app.link, [QUEUE])
    for i in range(workers):
        record = WorkerRecord(
            f"host:{i}:bench", "host", i, "bench", "app", 1_000, 30_000, 4, (QUEUE,), (),
            JobCounts(), 0.0, (), recent_jobs=600, recent_busy_ms=60_000, recent_tasks=TASKS,
        )  # fmt: skip
        fields = record.to_fields()
        registry.heartbeat(record.id, fields, ttl_ms=600_000, visibility_timeout_ms=30_000)


TASKS = {f"bench.task{i}": TaskTime(600, 60_000) for i in range(CARRIED_TASKS)}


def mix_read(app: App, r: redis.Redis) -> dict[str, float]:
    """The waiting-mix read alone: round trips, commands, Redis µs, wall ms."""
    counting = CountingLink(app.link)
    streams = Reader(app.link).queue(QUEUE).streams
    calls0, usec0 = command_stats(r)
    started = time.perf_counter()
    waiting_mix(Reader(counting), streams)  # type: ignore[arg-type]
    wall_ms = (time.perf_counter() - started) * 1000
    calls1, usec1 = command_stats(r)
    return {
        "round_trips": counting.round_trips,
        "commands": calls1 - calls0 - 1,
        "redis_usec": usec1 - usec0,
        "wall_ms": round(wall_ms, 2),
    }


def master_costs() -> None:
    """Per tick and per heartbeat, on the master: never per job."""
    for children in (4, 16):
        meter = DurationMeter()
        slots = [
            ((i, 1000 + i), SlotView(1000 + i, 0, 0, 0, 0, running=(running(i % 40),)))
            for i in range(children)
        ]
        sample_ns = per_call_ns(functools.partial(meter.sample, slots), number=20_000)
        print(f"master, per tick: DurationMeter.sample, {children} children {sample_ns:,.0f} ns")
    meter = DurationMeter()
    for n in range(CARRIED_TASKS):  # 32 tasks measured, each job ending after one tick
        meter.sample([((0, 1), SlotView(1, n, 0, 0, 0, running=(running(n, seq=n + 1),)))])
    meter.sample([((0, 1), SlotView(1, CARRIED_TASKS, 0, 0, 0))])
    recent_us = per_call_ns(meter.recent, number=2_000) / 1000
    print(f"master, per heartbeat: DurationMeter.recent, 32 tasks {recent_us:,.1f} µs")


def running(task: int, seq: int = 1) -> Running:
    return Running(0, seq, 0.0, 0.0, 0, 0.0, "1-0", f"bench.task{task}", "job")


def register_fields() -> dict[str, str | int | float]:
    return WorkerRecord(
        "w", "host", 1, "bench", "app", 0, 0, 4, (QUEUE,), (), JobCounts(), 0.0, (),
        recent_jobs=19_200, recent_busy_ms=1_920_000, recent_tasks=TASKS,
    ).to_fields()  # fmt: skip


def one_refresh(app: App, r: redis.Redis) -> dict[str, float]:
    counting = CountingLink(app.link)
    scaler = Scaler(Reader(counting), [QUEUE], app.settings)  # type: ignore[arg-type]
    calls0, usec0 = command_stats(r)
    started = time.perf_counter()
    signal = scaler.signals()[0]
    wall_ms = (time.perf_counter() - started) * 1000
    calls1, usec1 = command_stats(r)
    return {
        "desired": signal.desired_processes,
        "round_trips": counting.round_trips,
        "commands": calls1 - calls0 - 1,  # less the INFO itself
        "redis_usec": usec1 - usec0,
        "wall_ms": round(wall_ms, 2),
    }


def poll(app: App, r: redis.Redis, seconds: float) -> tuple[int, float]:
    """Refreshes Redis saw while ``signals()`` was called in a loop, and calls per second."""
    scaler = Scaler(Reader(app.link), [QUEUE], app.settings)
    before = int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    calls, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        scaler.signals()
        calls += 1
    after = int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    return after - before, calls / seconds  # one queue_stats script per refresh


def per_call_ns(fn: Callable[[], object], number: int = 100_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poll-s", type=float, default=5.0)
    args = parser.parse_args()
    with RedisServer(Path(tempfile.mkdtemp(prefix="taskq-scale-bench-"))) as server:
        app = App(server.url, queue=QUEUE)
        r = redis.Redis(port=server.port)
        print(
            "| waiting | worker records | round trips | commands | Redis µs | wall ms | desired |"
        )
        print("|---|---|---|---|---|---|---|")
        for waiting in (1_000, 100_000):
            fill(app, waiting)
            for workers in (1, 20):
                register(app, r, workers)
                one_refresh(app, r)  # the first loads the scripts
                row = one_refresh(app, r)
                print(
                    f"| {waiting:,} | {workers} | {row['round_trips']:.0f} | {row['commands']:.0f} "
                    f"| {row['redis_usec']:.0f} | {row['wall_ms']} | {row['desired']:.0f} |"
                )
        refreshes, rate = poll(app, r, args.poll_s)
        per_s = refreshes / args.poll_s
        print(
            f"\npolling signals() for {args.poll_s:g} s: {rate:,.0f} calls/s, "
            f"{refreshes} refreshes ({per_s:.2f}/s; target <= 1/s per queue)"
        )
        print("\n| waiting | mix read: round trips | commands | Redis µs | wall ms |")
        print("|---|---|---|---|---|")
        for waiting in (1_000, 100_000):
            fill(app, waiting)
            row = mix_read(app, r)
            print(
                f"| {waiting:,} | {row['round_trips']:.0f} | {row['commands']:.0f} "
                f"| {row['redis_usec']:.0f} | {row['wall_ms']} |"
            )
        master_costs()
        fields = register_fields()
        extra = sum(len(k) + len(str(fields[k])) for k in fields if k.startswith("recent_"))
        print(f"heartbeat record: +{extra} bytes of duration fields (32 tasks)")
        r.close()
        app.close()
    return 0 if per_s <= 1.0 + 1.0 / args.poll_s else 2


if __name__ == "__main__":
    sys.exit(main())
