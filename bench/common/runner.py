"""The orchestrator's side of a bench run: which system runs where, the bounded subprocess
rounds (``bench.compare.agent``, ``bench.compare.raw`` or a feature bench's own agent) against
the private Redis with the producer and redis-server pinned apart, and the machine facts every
report opens with. The peer comparison and every feature bench run their rounds through it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import envs
from bench.common.procs import format_cpus

if TYPE_CHECKING:  # imported where it is used: it imports taskq, which the peers' venvs lack
    from bench.common.redis_server import PrivateRedis

REPO = envs.REPO


@dataclass(frozen=True)
class Entry:
    """A benchmarked system: its bench/peers module and the venv it runs in."""

    name: str
    module: str
    venv: Path
    label: str
    is_taskq: bool = False


RAWS = {"raw": envs.PEERS_VENV, "raw-hiredis": envs.HIREDIS_VENV}
HIREDIS_SUFFIX = "-hiredis"
"""A row whose name ends so is measured only where redis-py uses hiredis."""


def machine() -> dict[str, Any]:
    """Facts about this machine for the report."""

    def field(path: str, prefix: str, sep: str) -> str:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(sep, 1)[1].strip().strip('"')
        return "unknown"

    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "nproc": os.cpu_count(),
        "cpu": field("/proc/cpuinfo", "model name", ":"),
        "memory_gib": round(mem_kb / 2**20, 1),
        "os": field("/etc/os-release", "PRETTY_NAME=", "="),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def loadavg() -> str:
    """The 1, 5 and 15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def stop_agent(proc: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM an agent (it then stops its worker), SIGKILL it if it lingers."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: agents, workers and redis-server get stopped."""
    raise SystemExit(128 + signum)


class Runner:
    """Runs bench subprocesses (agent, raw) against the private Redis."""

    def __init__(self, args: argparse.Namespace, server: PrivateRedis, workdir: Path) -> None:
        self.args = args
        self.server = server
        self.workdir = workdir
        (workdir / "logs").mkdir(exist_ok=True)
        self.failures = 0
        self.producer_cpu = -1
        self.redis_cpu = -1
        self.clean_cpus: list[int] = []  # every CPU but redis-server's, when it is pinned
        cpus = sorted(os.sched_getaffinity(0))
        if args.pin and len(cpus) >= 2:
            # Producer and Redis on different CPUs: a fixed, cross-core round trip.
            self.producer_cpu = cpus[0]
            self.redis_cpu = cpus[-1]
            self.clean_cpus = cpus[:-1]
            server.pin(self.redis_cpu)
            print(f"redis-server pinned to CPU {cpus[-1]}, producers to CPU {cpus[0]}")
        elif args.pin:
            print(f"only {len(cpus)} CPU: redis-server and the producers are not pinned")

    def call(self, argv: list[str], log: Path, timeout: float) -> dict[str, Any]:
        """Run a bench subprocess, bounded; its last stdout line is JSON."""
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with open(log, "ab") as err:
            proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err)
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                out = stop_agent(proc)
            except BaseException:  # interrupted: let the agent stop its worker first
                stop_agent(proc)
                raise
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            result: dict[str, Any] = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            result = {"error": f"exit status {proc.returncode}, no result (log {log.name})"}
        if "error" in result:
            self.failures += 1
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            print(f"    ! {result['error']}" + "".join(f"\n    | {t}" for t in tail), flush=True)
        return result

    def agent(
        self,
        entry: Entry,
        run: int,
        phases: str,
        worker_args: str = "",
        sizes: tuple[int, int] | None = None,
        clean: bool = False,
    ) -> dict[str, Any]:
        """One agent round for ``entry``, from an empty Redis.

        ``sizes``: (jobs, single-call enqueues), instead of --jobs and --enqueue-jobs.
        ``clean``: the worker tree is confined to :attr:`clean_cpus` (the clean pass).
        """
        a = self.args
        jobs, enqueue_jobs = sizes or (a.jobs, a.enqueue_jobs)
        kind = "clean" if clean else phases.split(",")[0]
        tag = f"{entry.name}-{kind}{worker_args.replace(' ', '')}-{run}"
        rec = self.workdir / "records" / tag
        rec.mkdir(parents=True, exist_ok=True)
        argv = [
            str(envs.python_of(entry.venv)), "-m", "bench.compare.agent", "--module", entry.module,
            "--redis-url", self.server.url, "--record-dir", str(rec),
            "--worker-log", str(self.workdir / "logs" / f"{tag}.worker.log"),
            "--phases", phases, "--jobs", str(jobs), "--enqueue-jobs", str(enqueue_jobs),
            "--batch", str(a.batch), "--latency-samples", str(a.latency_samples),
            "--idle-seconds", str(a.idle_seconds), "--procs", str(a.procs),
            "--worker-args", worker_args, "--deadline", str(a.deadline),
            "--producer-cpu", str(self.producer_cpu), *([] if a.incr else ["--no-incr"]),
            *(["--worker-cpus", format_cpus(self.clean_cpus)] if clean else []),
        ]  # fmt: skip
        self.server.flush()
        log = self.workdir / "logs" / f"{tag}.agent.log"
        result = self.call(argv, log, timeout=4 * a.deadline + 120)
        self.server.flush()
        if not a.keep_workdir:
            shutil.rmtree(rec, ignore_errors=True)
        return result

    def raw(self, name: str, run: int, clean: bool = False) -> dict[str, Any]:
        """One round of the raw redis-py ceilings in the ``name`` venv (``clean``: + clean pass)."""
        a = self.args
        argv = [
            str(envs.python_of(RAWS[name])), "-m", "bench.compare.raw",
            "--redis-url", self.server.url,
            "--jobs", str(a.jobs), "--enqueue-jobs", str(a.enqueue_jobs), "--batch", str(a.batch),
            "--procs", str(a.procs), "--deadline", str(a.deadline),
            "--producer-cpu", str(self.producer_cpu),
            *(["--clean-cpus", format_cpus(self.clean_cpus)] if clean else []),
        ]  # fmt: skip
        self.server.flush()
        return self.call(argv, self.workdir / "logs" / f"{name}-{run}.log", 4 * a.deadline + 60)


def taskq_problem(entry: Entry) -> str | None:
    """None if taskq imports in ``entry``'s venv, else why it does not."""
    if not envs.taskq_present():
        return "the taskq package does not exist yet"
    if not envs.python_of(entry.venv).exists():
        return f"{entry.venv} is missing"
    proc = subprocess.run(
        [str(envs.python_of(entry.venv)), "-c", "from taskq import App"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode:
        return (proc.stderr.strip().splitlines() or ["import failed"])[-1]
    return hiredis_problem(entry.name, entry.venv)


def hiredis_problem(name: str, venv: Path) -> str | None:
    """Why a row named for hiredis (``...-hiredis``) would not be what it says: redis-py in
    ``venv`` does not use hiredis. None for other rows, and when it does."""
    if not name.endswith(HIREDIS_SUFFIX):
        return None
    code = "from redis.utils import HIREDIS_AVAILABLE as a; raise SystemExit(0 if a else 1)"
    proc = subprocess.run(
        [str(envs.python_of(venv)), "-c", code], capture_output=True, text=True, timeout=60
    )
    if proc.returncode == 0:
        return None
    return f"hiredis is not importable in {venv} (run bench/common/envs.py, or pip install hiredis)"


def brief(res: dict[str, Any]) -> str:
    """One progress line for a result."""
    if "error" in res:
        return "ERROR"
    parts = [
        f"{k} {v['rate']:,.0f}/s" for k, v in res.items() if isinstance(v, dict) and "rate" in v
    ]
    if "latency" in res:
        parts.append(
            f"p50 {res['latency']['p50_ms']:.2f} ms  p99 {res['latency']['p99_ms']:.2f} ms"
        )
    if "idle" in res:
        parts.append(f"idle CPU {res['idle']['cpu_pct']:.2f} %")
    return "  ".join(parts)
