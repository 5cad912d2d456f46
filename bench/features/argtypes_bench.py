"""Argument types benchmark: what the extension types, the signature check and rebuilding
by annotation cost, and whether plain jobs pay anything for them.

Usage, from the repository root::

    .venv/bin/python bench/features/argtypes_bench.py           # 3 rounds of each A/B
    .venv/bin/python bench/features/argtypes_bench.py --quick   # 1 round, fewer jobs
    .venv/bin/python bench/features/argtypes_bench.py --main /work/main

Two parts, printed as a Markdown report:

Writes bench/results/RESULTS-argtypes.md (not with ``--quick``).

* **per call** (``timeit``, this tree, best of 5): encoding and decoding a plain body the way
  the code before extension types did (``msgpack.packb`` of the same map) and the way it does
  now; the same for a body with a datetime, a Decimal and a dataclass argument, plus that
  job's rebuild in the worker; the enqueue check (``Task.check``) with positional arguments,
  with keyword arguments, and with ``validate=True``.
* **A/B against the tree before the change** (``--main``), on one private redis-server:
  one agent process per tree, each importing its own ``taskq`` (``PYTHONPATH``), taking
  turns block by block (``--blocks`` pairs, which goes first alternating), so that load
  from other work on the machine slows both alike. An **enqueue** block is 1,000
  ``noop.delay(i, t)`` calls, one round trip each; a **drain** block is 1,000 jobs sent with
  ``starmap`` (untimed) and run by ``taskq.testing.drain`` in the agent (decode, run, ack:
  a worker's per-job path without its process tree). Each figure is the median over the
  pairs of this tree's rate / the other tree's: 1.00 is "no cost".
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import timeit
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402

from bench.common.redis_server import PrivateRedis  # noqa: E402
from taskq import App  # noqa: E402
from taskq.message import Message  # noqa: E402

APP_SOURCE = textwrap.dedent(
    """
    import os
    import redis
    from taskq import App

    app = App(os.environ["BENCH_URL"], queue="tasks")
    _client = None


    @app.task
    def noop(i: int, t_ns: int) -> None:
        global _client
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_URL"])
        _client.incr("bench:done")
    """
)
AGENT_SOURCE = textwrap.dedent(
    """
    import sys, time
    from argtypes_app import app, noop
    from taskq.testing import drain

    noop.delay(0, 0)  # (connects)
    drain(app)
    print("ready", flush=True)
    for line in sys.stdin:
        kind, jobs = line.split()
        jobs = int(jobs)
        if kind == "enqueue":
            started = time.perf_counter()
            for i in range(jobs):
                noop.delay(i, 0)
            elapsed = time.perf_counter() - started
            drain(app)  # (the next block starts from an empty stream)
        else:
            noop.starmap((i, 0) for i in range(jobs))
            started = time.perf_counter()
            done = len(drain(app, timeout_s=600).outcomes)
            elapsed = time.perf_counter() - started
            assert done == jobs, done
        print(elapsed, flush=True)
    """
)
MICRO_SOURCE = textwrap.dedent(
    """
    import timeit
    from taskq.message import Message

    msg = Message("plain", (7, 1_700_000_000_000_000_000), {"to": "a@b.c"})
    body = msg.encode()
    for name, fn in (("encode", msg.encode), ("decode", lambda: Message.decode(body))):
        print(name, min(timeit.repeat(fn, number=NUMBER, repeat=7)) / NUMBER * 1e9)
    """
)


BLOCK_JOBS = 1_000
"""Jobs per block: enqueued one ``delay`` at a time, or drained in this process."""


@dataclasses.dataclass
class Charge:
    amount: Decimal
    at: dt.datetime
    note: str = ""


def _best_ns(fn: Any, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9


def per_call(number: int) -> list[tuple[str, float]]:
    """Nanoseconds per call of each step, this tree."""
    app = App(eager=True)

    @app.task
    def plain(i: int, t_ns: int) -> None: ...

    @app.task
    def typed(when: dt.datetime, amount: Decimal, charge: Charge) -> None: ...

    @app.task(validate=True)
    def checked(when: dt.datetime, amount: Decimal, charge: Charge) -> None: ...

    plain_msg = Message("plain", (7, 1_700_000_000_000_000_000))
    now = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
    typed_args = (now, Decimal("9.90"), Charge(Decimal("1.10"), now, "x"))
    typed_msg = Message("typed", typed_args)
    before_map = _body_map(plain_msg)
    typed_body = typed_msg.encode()
    decoded = Message.decode(typed_body)
    steps: list[tuple[str, Any, int]] = [
        ("plain body: msgpack.packb of the map alone",
         lambda: msgpack.packb(before_map, use_bin_type=True), number),
        ("plain body: Message.encode", plain_msg.encode, number),
        ("datetime + Decimal + dataclass body: encode", typed_msg.encode, number),
        ("datetime + Decimal + dataclass body: decode",
         lambda: Message.decode(typed_body), number),
        ("datetime + Decimal + dataclass: rebuild in the worker",
         lambda: typed.spec.rebuilt(decoded.args, decoded.kwargs), number),
        ("plain task: the function called directly", lambda: plain.fn(7, 1), number),
        ("plain task: Task.run (the worker's call, nothing to rebuild)",
         lambda: plain.run((7, 1), {}), number),
        ("enqueue check, positional (Task.check)", lambda: plain.check((7, 1), {}), number),
        ("enqueue check, keywords (Task.check)",
         lambda: plain.check((), {"i": 7, "t_ns": 1}), number),
        ("enqueue check with validate=True (pydantic)",
         lambda: checked.check(typed_args, {}), number // 10),
    ]  # fmt: skip
    return [(name, _best_ns(fn, n)) for name, fn, n in steps]


def _body_map(msg: Message) -> dict[str, Any]:
    """The map the encoder before extension types packed (args as the tuple it was)."""
    return {
        "v": 1, "id": msg.id, "task": msg.task, "args": msg.args, "kwargs": msg.kwargs,
        "queue": msg.queue, "priority": msg.priority, "created_ms": msg.created_ms,
        "retries": msg.retries,
    }  # fmt: skip


def micro_ab(main: Path, number: int, rounds: int = 5) -> list[tuple[str, float, float]]:
    """Message.encode / Message.decode of one plain body, ns per call: (step, this, before),
    each tree in its own process, the trees taking turns ``rounds`` times (the best of all
    its rounds counts for each)."""
    source = MICRO_SOURCE.replace("NUMBER", str(number))
    found: dict[Path, dict[str, float]] = {ROOT: {}, main: {}}
    for n in range(rounds):
        for tree in (ROOT, main) if n % 2 == 0 else (main, ROOT):
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                [sys.executable, "-c", source], env=env, capture_output=True, text=True,
                check=True,
            ).stdout  # fmt: skip
            for name, ns in (line.split() for line in out.splitlines()):
                found[tree][name] = min(float(ns), found[tree].get(name, float("inf")))
    return [(f"plain body: Message.{k}", found[ROOT][k], found[main][k]) for k in found[ROOT]]


def ab_blocks(main: Path, blocks: int, block_jobs: int) -> dict[str, list[float]]:
    """This tree's rate / the other tree's, per pair of blocks, for enqueue and drain: one
    agent process per tree, both on the same redis-server, taking turns block by block (a
    machine shared with other work slows both alike)."""
    ratios: dict[str, list[float]] = {"enqueue": [], "drain": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "argtypes_app.py").write_text(APP_SOURCE)
        server = PrivateRedis(work / "redis")
        server.start()
        agents: dict[Path, subprocess.Popen[str]] = {}
        try:
            url = f"redis://127.0.0.1:{server.port}/0"
            agents = {tree: _agent(work, url, tree) for tree in (ROOT, main)}
            for n in range(blocks):
                for kind in ("enqueue", "drain"):
                    order = [ROOT, main] if n % 2 == 0 else [main, ROOT]
                    elapsed = {tree: _block(agents[tree], kind, block_jobs) for tree in order}
                    ratios[kind].append(elapsed[main] / elapsed[ROOT])
        finally:
            for agent in agents.values():
                agent.kill()
                agent.wait()
            server.stop()
    return ratios


def _agent(work: Path, url: str, tree: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(BENCH_URL=url, PYTHONPATH=f"{work}{os.pathsep}{tree}")
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT_SOURCE], env=env, cwd=work, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert agent.stdout is not None and agent.stdout.readline().strip() == "ready"
    return agent


def _block(agent: subprocess.Popen[str], kind: str, jobs: int) -> float:
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write(f"{kind} {jobs}\n")
    agent.stdin.flush()
    return float(agent.stdout.readline())


def report(
    calls: list[tuple[str, float]],
    micro: list[tuple[str, float, float]],
    ratios: dict[str, list[float]],
) -> str:
    lines = ["## Argument types", "", "| step (this tree) | ns per call |", "|---|---:|"]
    lines += [f"| {name} | {ns:,.0f} |" for name, ns in calls]
    lines += ["", "| step | this tree, ns | before, ns | ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {n} | {a:,.0f} | {b:,.0f} | {a / b:.3f} |" for n, a, b in micro]
    lines += ["", "| A/B: this tree's rate / before | median | quartiles | pairs |"]
    lines.append("|---|---:|---|---:|")
    for kind, values in ratios.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        median = statistics.median(values)
        lines.append(f"| {kind} | {median:.3f} | {q1:.3f} to {q3:.3f} | {len(values)} |")
    load = os.getloadavg()[0]
    lines += ["", f"Load average at the end: {load:.2f} on {os.cpu_count()} CPUs."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--main", type=Path, default=Path("/work/main"), help="the tree before")
    parser.add_argument("--blocks", type=int, help="pairs of blocks (default 40, quick 6)")
    args = parser.parse_args()
    blocks = args.blocks or (6 if args.quick else 40)
    number = 2_000 if args.quick else 20_000
    calls = per_call(number)
    micro = micro_ab(args.main, number)
    ratios = ab_blocks(args.main, blocks, BLOCK_JOBS)
    text = report(calls, micro, ratios)
    print(text)
    if not args.quick:
        (ROOT / "bench" / "results" / "RESULTS-argtypes.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
