"""Redis Cluster against one server, same workers: jobs/s and the Redis CPU per job.

Each round enqueues N no-op jobs spread over three queues (``{b0}``, ``{b1}``, ``{b2}``: on the
cluster, one per master) with the same ``taskq worker -c 2``, once on one redis-server and
once on a 6-node cluster (3 masters, 3 replicas), back to back, alternating which goes first.
It reports jobs/s of each and their ratio (target: the cluster >= 85 % of one server), and
the Redis CPU each job costs the master that serves it: the commands' own time (``INFO
commandstats``, ``usec``) and the server process's CPU (``INFO cpu``, user + sys, which adds
the network I/O), deltas over the drain divided by the jobs of that master's queue. On this
2-core machine the workers, not Redis, bound the throughput, so wall time says nothing about
shard scaling; the CPU per job per shard does.

    PYTHONPATH=. python bench/features/cluster_bench.py [--jobs 30000] [--rounds 3] [--partitioned]

``--partitioned``: one queue in three partitions (``partitions={"w": 3}``, each partition on
its own master) instead of three queues, on both topologies.

Exit status 2 when the median ratio misses the target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.common.rounds import alternating
from bench.peers.taskq_cluster_app import QUEUES, app, noop
from taskq import App
from taskq.keys import partition_names
from tests.redis_server import RedisServer
from tests.topologies import RedisCluster

ROOT = Path(__file__).resolve().parents[2]
TARGET = 0.85


def node_stats(port: int) -> dict[str, float]:
    """usec of every command, and the process's CPU seconds, of the server on ``port``."""
    with redis.Redis(port=port) as r:
        stats = r.info("commandstats")
        cpu = r.info("cpu")
    usec = sum(float(v["usec"]) for v in stats.values())
    return {"usec": usec, "cpu_s": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])}


@dataclass(frozen=True)
class Layout:
    """What the jobs go to: the queues the worker is given (``-Q``), the queues they are in
    Redis, and the partitions setting that maps the one to the other."""

    read: tuple[str, ...]
    physical: tuple[str, ...]
    partitions: dict[str, int]


QUEUES_LAYOUT = Layout(QUEUES, QUEUES, {})


def partitioned_layout(cluster: RedisCluster) -> Layout:
    """One queue in three partitions, each on its own master."""
    for base in ("w", *(f"w{i}" for i in range(100))):
        names = partition_names(base, 3)
        if len({cluster.master_of(f"{n}:high").port for n in names}) == 3:
            return Layout((base,), names, {base: 3})
    raise RuntimeError("no partition names on three masters")


def start_worker(url: str, log: Path, layout: Layout) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(PYTHONPATH=str(ROOT), TASKQ_REDIS_URL=url, TASKQ_BLOCK_MS="100")
    env["TASKQ_PARTITIONS"] = ",".join(f"{q}={n}" for q, n in layout.partitions.items())
    cmd = [sys.executable, "-m", "taskq", "worker", "-A", "bench.peers.taskq_cluster_app:app"]
    cmd += ["-Q", ",".join(layout.read), "-c", "2", "--loglevel", "warning"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def drained(producer: App, layout: Layout) -> bool:
    for q in layout.physical:
        snap = producer.reader.queue(q)
        if any(s.waiting or s.pending for s in snap.streams):
            return False
    return True


def worker_cpu_s(pid: int) -> float:
    """CPU seconds (user + sys) of the worker's master and its children so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        pids += [int(c) for c in (task / "children").read_text().split()]
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def delivered(producer: App, layout: Layout) -> int:
    """Entries the consumer group read, over every stream of the queues."""
    total = 0
    for q in layout.physical:
        for p in ("high", "normal", "low"):
            for g in producer.link.call("XINFO", "GROUPS", f"{q}:{p}"):
                fields = dict(zip(g[::2], g[1::2], strict=True))
                total += int(fields.get(b"entries-read") or 0)
    return total


def one_round(
    url: str, masters: list[int], jobs: int, workdir: Path, layout: Layout
) -> dict[str, Any]:
    """Enqueue ``jobs`` jobs, then time a worker on ``url`` draining them (from its first
    delivery to the last ack); the Redis costs on ``masters`` over that time."""
    producer = App(url, layout.physical[0], partitions=layout.partitions)
    app.settings = app.settings.replace(partitions=layout.partitions)  # (noop's routing)
    share = len(layout.physical)
    n = jobs // share * share
    producer.broker_for(layout.read).ensure_groups()
    for q in layout.read:  # an equal share on each queue (or partition: round robin)
        each = n // len(layout.read)
        producer.enqueue_many(noop.message((i,), {}, queue=q) for i in range(each))
    before = {p: node_stats(p) for p in masters}
    worker = start_worker(url, workdir / "worker.log", layout)
    try:
        while not (first := delivered(producer, layout)):
            time.sleep(0.002)
        started, cpu_before = time.perf_counter(), worker_cpu_s(worker.pid)
        while not drained(producer, layout):
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        worker_cpu = worker_cpu_s(worker.pid) - cpu_before
        after = {p: node_stats(p) for p in masters}
        got = delivered(producer, layout)
        assert got >= n, f"only {got} of {n} jobs delivered"
    finally:
        worker.terminate()
        worker.wait(30)
        producer.link.call("FLUSHALL")
        producer.close()
    served = n // len(masters)  # the jobs of each master's queue(s)
    return {
        "jobs_s": (n - first) / elapsed,
        "worker_cpu_us": worker_cpu * 1e6 / (n - first),
        "usec_per_job": [(after[p]["usec"] - before[p]["usec"]) / served for p in masters],
        "cpu_us_per_job": [
            (after[p]["cpu_s"] - before[p]["cpu_s"]) * 1e6 / served for p in masters
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--partitioned", action="store_true", help="one queue in 3 partitions, not 3 queues"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="taskq-cluster-bench-"))
    single = RedisServer(base / "single", appendonly=True)  # AOF everysec, as the cluster nodes
    single.start()
    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    try:
        with RedisCluster(base / "cluster") as cluster:
            layout = partitioned_layout(cluster) if args.partitioned else QUEUES_LAYOUT
            masters = [cluster.master_of(f"{q}:high").port for q in layout.physical]
            assert len(set(masters)) == len(masters), masters  # one queue per master
            for k in range(args.rounds):
                order = alternating(("single", "cluster"), k + 1)
                got: dict[str, dict[str, Any]] = {}
                for which in order:
                    url, ports = (
                        (single.url, [single.port]) if which == "single" else (cluster.url, masters)
                    )
                    got[which] = one_round(url, ports, args.jobs, base, layout)
                rows.append((order[0], got["single"], got["cluster"]))
                print(report_row(k + 1, *rows[-1]), flush=True)
    finally:
        single.kill()
    ratios = [c["jobs_s"] / s["jobs_s"] for _, s, c in rows]
    median = statistics.median(ratios)
    print(summary(rows, median))
    return 0 if median >= TARGET else 2


def report_row(k: int, first: str, s: dict[str, Any], c: dict[str, Any]) -> str:
    per_shard = " / ".join(f"{x:.1f}" for x in c["usec_per_job"])
    per_cpu = " / ".join(f"{x:.1f}" for x in c["cpu_us_per_job"])
    return (
        f"| {k} | {first} | {s['jobs_s']:,.0f} | {c['jobs_s']:,.0f} | "
        f"{c['jobs_s'] / s['jobs_s']:.1%} | "
        f"{s['worker_cpu_us']:.0f} / {c['worker_cpu_us']:.0f} | "
        f"{s['worker_cpu_us'] / c['worker_cpu_us']:.1%} | "
        f"{s['usec_per_job'][0]:.1f} | {per_shard} | "
        f"{sum(c['usec_per_job']):.1f} | {s['cpu_us_per_job'][0]:.1f} | {per_cpu} |"
    )


def summary(rows: list[tuple[str, dict[str, Any], dict[str, Any]]], median: float) -> str:
    single_cpu = statistics.median(s["cpu_us_per_job"][0] for _, s, _ in rows)
    shard_cpu = statistics.median(statistics.mean(c["cpu_us_per_job"]) for _, _, c in rows)
    verdict = "PASS" if median >= TARGET else "MISS"
    cpu_ratio = statistics.median(s["worker_cpu_us"] / c["worker_cpu_us"] for _, s, c in rows)
    return (
        f"median cluster / single: {median:.1%} ({verdict}, target {TARGET:.0%}); by worker CPU "
        f"per job: {cpu_ratio:.1%}; "
        f"Redis CPU per job served: single server {single_cpu:.1f} µs, cluster master "
        f"{shard_cpu:.1f} µs (jobs/s per Redis core: {1e6 / single_cpu:,.0f} single, "
        f"{1e6 / shard_cpu:,.0f} per cluster master)"
    )


if __name__ == "__main__":
    sys.exit(main())
