"""The agent side of a feature bench: one round of a family inside a system's venv (``python
-m bench.features.<family>_bench agent|raw|probe ...``), and what the families' rounds use
there: the round's context, worker processes, bounded waits, latency figures, Redis memory
probes and the raw floors' forked consumers.

It imports neither taskq nor a peer: the peers' venvs run it.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib
import importlib.metadata
import json
import multiprocessing as mp
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import ForkProcess
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis import Redis
from redis.exceptions import RedisError
from redis.utils import HIREDIS_AVAILABLE

from bench.common import envs, record
from bench.common.job import COUNTER
from bench.common.procs import STALL_S, BenchError, pin_self, start_worker, stop_tree, unpin_self
from bench.common.report import percentile
from bench.common.runner import exit_on_sigterm

if TYPE_CHECKING:
    from bench.features.family import Family

MODES = ("agent", "raw", "probe")
POLL_S = 0.001
Params = dict[str, Any]


@dataclass
class AgentCtx:
    """What an agent round or a raw floor gets: Redis URL, sizes, a work directory."""

    url: str
    params: Params
    workdir: Path
    out: Params = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.params[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def record_dir(self) -> Path:
        """Where the tasks' completion records go (:mod:`bench.common.record`)."""
        path = self.workdir / "records"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def redis(self) -> Redis:
        """A plain client of the bench's Redis."""
        return Redis.from_url(self.url)


def _agent_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="one feature-benchmark round (started by the bench)")
    p.add_argument("mode", choices=MODES)
    p.add_argument("--module", default="", help="module in bench/peers (agent, probe)")
    p.add_argument("--redis-url", required=True)
    p.add_argument("--params", required=True, help="JSON object of sizes and bounds")
    p.add_argument("--producer-cpu", type=int, default=-1)
    p.add_argument("--workdir", required=True)
    return p.parse_args(argv)


def versions(packages: Sequence[str]) -> Params:
    """Installed versions of ``packages``, Python, and whether hiredis is in use."""
    out: Params = {"python": sys.version.split()[0]}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out | {"hiredis_in_use": HIREDIS_AVAILABLE}


def _round(family: Family, args: argparse.Namespace, ctx: AgentCtx) -> Params:
    """The requested mode's figures, from an empty Redis, which is emptied again after."""
    redis = ctx.redis()
    redis.flushall()
    try:
        if args.mode == "raw":
            ctx.out["versions"] = versions(("redis",))
            if family.raw is None:
                raise BenchError(f"the {family.key} family has no raw floor")
            return ctx.out | family.raw(ctx)
        module = importlib.import_module(f"bench.peers.{args.module}")
        if args.mode == "probe":
            check = getattr(module, "problem", None)
            return {"problem": check(family.key) if check else None}
        system = getattr(module, family.attr)
        ctx.out["versions"] = versions(system.packages)
        system.setup()
        try:
            figures = family.agent(system, ctx)
        finally:
            system.close()
        return ctx.out | figures
    finally:
        with contextlib.suppress(RedisError):
            redis.flushall()


def main(family: Family, argv: Sequence[str]) -> int:
    """One round of ``family`` (``argv[0]`` is the mode: agent, raw or probe); prints its JSON
    result, or its error, as the last line."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = _agent_args(argv)
    ctx = AgentCtx(args.redis_url, json.loads(args.params), Path(args.workdir))
    os.environ["BENCH_REDIS_URL"] = args.redis_url
    os.environ[record.ENV_DIR] = str(ctx.record_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(envs.REPO), os.environ.get("PYTHONPATH")])
    )
    pin_self(args.producer_cpu)
    try:
        result = _round(family, args, ctx)
    except BenchError as exc:
        result = {"error": str(exc)} | ctx.out
    except Exception as exc:  # a peer's own exception: reported as this round's error
        result = {"error": f"{type(exc).__name__}: {exc}"} | ctx.out
    print(json.dumps(result))
    return 0


@dataclass
class Workers:
    """The worker processes of a round (each the leader of its own session)."""

    procs: list[subprocess.Popen[bytes]]
    t_start: int  # time.time_ns() just before the first one was spawned

    def check_alive(self) -> None:
        """Raise BenchError if a worker process has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise BenchError(f"worker exited with status {proc.returncode}")


@contextlib.contextmanager
def workers(
    argvs: Sequence[Sequence[str]], ctx: AgentCtx, tag: str = "worker"
) -> Iterator[Workers]:
    """Start the worker command(s), each in its own session; always stop them all."""
    running = Workers([], time.time_ns())
    ctx.out["worker_argv"] = [[Path(a[0]).name, *a[1:]] for a in argvs]
    try:
        for k, argv in enumerate(argvs):
            proc, _ = start_worker(list(argv), str(ctx.workdir / f"{tag}-{k}.log"))
            running.procs.append(proc)
        yield running
        running.check_alive()
    finally:
        for proc in running.procs:
            stop_tree(proc)


def bounded(what: str, timeout_s: float, done: Callable[[], bool]) -> float:
    """Poll ``done()`` until it is true; seconds waited. Raises BenchError at the timeout."""
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout_s:
            raise BenchError(f"{what}: not done after {timeout_s:.0f}s")
        time.sleep(POLL_S)
    return time.monotonic() - start


def wait_counter(client: Any, n: int, running: Workers, deadline_s: float) -> int:
    """Poll ``bench:incr`` until it reaches ``n``; ``time.time_ns()`` when it was seen there."""
    start = time.monotonic()
    last, moved, polls = -1, start, 0
    while True:
        count = int(client.get(COUNTER) or 0)
        now = time.monotonic()
        if count >= n:
            return time.time_ns()
        if count != last:
            last, moved = count, now
        if now - moved > STALL_S:
            raise BenchError(f"drain stalled at {count:,} of {n:,} jobs for {STALL_S:.0f}s")
        if now - start > deadline_s:
            raise BenchError(f"drain: {count:,} of {n:,} jobs after {deadline_s:.0f}s")
        polls += 1
        if polls % 200 == 0:
            running.check_alive()
        time.sleep(POLL_S)


def latency_figures(lat_ms: list[float], sent: int) -> Params:
    """p50, p99, max and counts of a list of latencies."""
    if not lat_ms:
        raise BenchError("no probe completed")
    lat_ms = sorted(lat_ms)
    return {
        "samples": len(lat_ms),
        "lost": sent - len(lat_ms),
        "p50_ms": percentile(lat_ms, 50),
        "p99_ms": percentile(lat_ms, 99),
        "max_ms": lat_ms[-1],
    }


def key_names(r: Redis) -> set[bytes]:
    """Every key name in the database (SCAN)."""
    return set(r.scan_iter(count=1000))


def used_memory(r: Redis) -> int:
    """Redis's ``used_memory`` (bytes allocated)."""
    return int(r.info("memory")["used_memory"])


def memory_usage(r: Redis, keys: Sequence[bytes]) -> list[int]:
    """``MEMORY USAGE key SAMPLES 0`` of each key, pipelined in chunks of 1,000."""
    out: list[int] = []
    for i in range(0, len(keys), 1000):
        pipe = r.pipeline(transaction=False)
        for key in keys[i : i + 1000]:
            pipe.memory_usage(key, samples=0)
        out += [int(v or 0) for v in pipe.execute()]
    return out


@dataclass
class MemoryProbe:
    """Redis memory retained by ``n`` results: key set and ``used_memory`` before and after."""

    r: Redis
    pattern: str
    keys_before: set[bytes] = field(default_factory=set)
    used_before: int = 0

    def start(self) -> None:
        """Snapshot before the jobs are submitted."""
        self.keys_before = key_names(self.r)
        self.used_before = used_memory(self.r)

    def stop(self, n: int) -> Params:
        """Per result: MEMORY USAGE of new result keys, of all new keys, used_memory delta."""
        used_after = used_memory(self.r)
        new = sorted(key_names(self.r) - self.keys_before)
        sizes = dict(zip(new, memory_usage(self.r, new), strict=True))
        result = [v for k, v in sizes.items() if fnmatch.fnmatchcase(k.decode(), self.pattern)]
        return {
            "results": n,
            "result_key_pattern": self.pattern,
            "result_keys": len(result),
            "result_key_bytes": statistics.median(result) if result else None,
            "result_keys_bytes_per_result": sum(result) / n,
            "new_keys": len(new),
            "new_keys_bytes_per_result": sum(sizes.values()) / n,
            "used_memory_delta_per_result": (used_after - self.used_before) / n,
            "example_keys": [k.decode(errors="replace") for k in new[:3]],
            "kinds": kinds(sizes, n),
        }


_ID = re.compile(r"[0-9a-fA-F-]{8,}|[0-9]+")  # a uuid, hex id or number inside a key name


def kinds(sizes: dict[bytes, int], n: int) -> Params:
    """New keys by kind (the name with its ids as ``*``): keys per result, median bytes."""
    groups: dict[str, list[int]] = {}
    for key, size in sizes.items():
        groups.setdefault(_ID.sub("*", key.decode(errors="replace")), []).append(size)
    return {
        kind: {"keys_per_result": len(v) / n, "median_bytes": statistics.median(v)}
        for kind, v in sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    }


# ------------------------------------------------------------------ raw floors


@contextlib.contextmanager
def forked(
    target: Callable[..., None], procs: int, args: Sequence[Any] = ()
) -> Iterator[tuple[list[ForkProcess], Event]]:
    """``procs`` forked raw-floor consumers running ``target(k, stop, *args)``; always stopped.

    Consumers are unpinned (like workers). The stop event is set on the way out; any that
    lingers is terminated, then killed.
    """
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    children = [
        ctx.Process(target=_unpinned, args=(target, k, stop, *args), daemon=True)
        for k in range(procs)
    ]
    try:
        for child in children:
            child.start()
        yield children, stop
    finally:
        stop.set()
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.terminate()
                child.join(timeout=5)
            if child.is_alive():
                child.kill()
                child.join(timeout=5)


def _unpinned(target: Callable[..., None], *args: Any) -> None:
    unpin_self()
    target(*args)
