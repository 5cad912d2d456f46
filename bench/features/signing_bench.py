"""Signing benchmark: drain and enqueue with signed job bodies, as ratios of signing off.

Usage, from the repository root::

    .venv/bin/python bench/features/signing_bench.py          # full: 20,000 jobs, 10,000 enqueues
    .venv/bin/python bench/features/signing_bench.py --quick  # 5,000 jobs, 2,000 enqueues, 1 run

taskq only, no peer and no raw floor (target: signing on >= 90 % of off for each
figure). Every run, for signing off and on, each in a fresh ``bench.compare.agent`` round from an
empty Redis on the main bench's plain app (bench/peers/taskq_app.py: its ``noop`` task, the
main bench's ``bench.common.job.job``, and its worker command ``taskq worker -c 2``):

* **single-call enqueue**: ``--enqueue-jobs`` ``noop.delay(i, t)``, one round trip each, no
  worker running (the main bench's enqueue round);
* **bulk enqueue** and **drain**: ``--drain-jobs`` jobs enqueued with ``noop.starmap`` in
  batches of 1,000 (``app.enqueue_many``), then ``taskq worker -c 2`` is spawned and timed to
  the last job's start (the main bench's drain round, start-up included);
* the same drain as an untimed **clean pass** (worker tree and producer off redis-server's
  CPU), for the Redis time per job, and in run 1 the untimed ``MONITOR`` accounting pass that
  splits script time (bench/redistime.py).

Signing on is the same round with ``TASKQ_SIGNING_KEYS`` set in its environment: the producer's
``App`` signs every body with it, and the worker, which inherits it, runs only bodies signed
with it. The off and on rounds of each kind run back to back, and which goes first alternates
from one run to the next. The family's own round (``agent``) measures the encode and decode
micro-costs with and without a signer (``timeit``), runs the two producer loops again in one
process with signing off and on in alternating blocks (the enqueue targets are judged on
these), and checks the "on" setup: a producer with ``App(signing_keys=[key])`` writes signed
bodies, and a worker with only ``TASKQ_SIGNING_KEYS`` runs a signed job and dead-letters an
unsigned one. Each target is the median over the runs of each run's own on / off ratio.

Writes the "Signing" section of bench/results/RESULTS-features.md; bench/README.md ("Feature
benchmarks") explains it. Exit status 1 if a measurement failed, else 2 if a target was
missed or the check failed, else 0.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import sys
import time
import timeit
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import envs
from bench.common.job import COUNTER, counter_client
from bench.common.procs import BenchError
from bench.common.rounds import alternating
from bench.common.runner import Entry, brief, loadavg
from bench.compare import halves
from bench.features import agentside, family
from bench.features.agentside import AgentCtx, Params
from bench.features.family import Family, Size
from bench.features.signing_report import (
    MICRO_REPEAT,
    MODES,
    check_results,
    render,
    targets,
)
from bench.peers.taskq_signing_app import ENV, KEY, QUEUE

FAMILY_KEY = "signing"
MICRO_NUMBER = 20_000  # calls per timeit repeat
CHECK_TIMEOUT_S = 60.0
ONE_BLOCK = 500  # single-call enqueues per block of the interleaved producer loop
BULK_BATCH = 1_000  # jobs per starmap call (one block) of the interleaved bulk loop


@contextlib.contextmanager
def signing_env(mode: str) -> Iterator[None]:
    """``TASKQ_SIGNING_KEYS`` set to the bench key (``on``) or unset (``off``) for the block,
    in this process's environment and so in every process started meanwhile."""
    saved = os.environ.pop(ENV, None)
    if mode == "on":
        os.environ[ENV] = KEY
    try:
        yield
    finally:
        os.environ.pop(ENV, None)
        if saved is not None:
            os.environ[ENV] = saved


# ------------------------------------------------------------------ agent side


def _best_us(fn: Callable[[], Any], number: int) -> float:
    """CPU µs per call of ``fn``: the least of MICRO_REPEAT timeit repeats of ``number``
    calls, timed with this process's CPU clock, so that time the machine's other processes
    take from it does not count."""
    best = min(timeit.repeat(fn, number=number, repeat=MICRO_REPEAT, timer=time.process_time))
    return best / number * 1e6


def micro(number: int) -> Params:
    """Encode (the producer's ``App.encode``) and decode (the worker's ``Message.decode``)
    of the bench's job, with and without a signer; the signer's parts; the body sizes."""
    from bench.peers import taskq_app
    from taskq import App
    from taskq.message import Message

    plain = taskq_app.app
    signed = App(redis_url=plain.settings.redis_url, queue=QUEUE, signing_keys=[KEY])
    signer = signed.settings.signer
    if plain.settings.signer is not None or signer is None:
        raise BenchError("micro: the plain app signs, or the signed one does not")
    msg = taskq_app.noop.message((12_345, time.time_ns()), {})
    off, on = plain.encode(msg), signed.encode(msg)
    trailer = on[len(off) :]
    key = KEY.encode()
    costs = {
        "encode_off": lambda: plain.encode(msg),
        "encode_on": lambda: signed.encode(msg),
        "decode_off": lambda: Message.decode(off, None),
        "decode_on": lambda: Message.decode(on, signer),
        "sign": lambda: signer.sign(off),
        "verify": lambda: signer.verify(on, trailer),
        "hmac_digest": lambda: hmac.digest(key, off, "sha256"),
        "hmac_hex": lambda: hmac.digest(key, off, "sha256").hex(),
    }
    out: Params = {name: _best_us(fn, number) for name, fn in costs.items()}
    return out | {"body_bytes_off": len(off), "body_bytes_on": len(on), "number": number}


def _wait(what: str, done: Callable[[], bool], running: agentside.Workers) -> None:
    bound = time.monotonic() + CHECK_TIMEOUT_S
    while not done():
        if time.monotonic() > bound:
            raise BenchError(f"check: {what} not seen after {CHECK_TIMEOUT_S:.0f}s")
        running.check_alive()
        time.sleep(0.01)


def check(ctx: AgentCtx) -> Params:
    """One job enqueued by ``App(signing_keys=[KEY])`` and one by the plain app, then a worker
    with only ``TASKQ_SIGNING_KEYS=KEY``: the first runs, the second is dead-lettered."""
    from bench.peers import taskq_app
    from taskq import App
    from taskq.bodypatch import is_signed
    from taskq.keys import QueueKeys

    if ENV in os.environ:
        raise BenchError(f"check: {ENV} is set in the agent's environment")
    r = ctx.redis()
    keys = QueueKeys(QUEUE)
    signed = App(redis_url=ctx.url, queue=QUEUE, signing_keys=[KEY])
    t_ns = time.time_ns()
    signed.enqueue(taskq_app.noop.message((0, t_ns), {}))
    taskq_app.app.enqueue(taskq_app.noop.message((1, t_ns), {}))
    entries: Any = r.xrange(keys.stream("normal"))
    bodies = [fields[b"body"] for _, fields in entries]
    flags = [is_signed(b) for b in bodies]
    counter = counter_client(ctx.url)
    with signing_env("on"), agentside.workers([taskq_app.SYSTEM.worker_argv(1)], ctx, "check") as w:
        _wait("the signed job's run", lambda: int(counter.get(COUNTER) or 0) >= 1, w)
        _wait("the unsigned job's dead letter", lambda: r.xlen(keys.deadletter) >= 1, w)
        time.sleep(0.3)
    ran = int(counter.get(COUNTER) or 0)
    dead_entries: Any = r.xrange(keys.deadletter)
    dead = [fields for _, fields in dead_entries]
    reasons = [d.get(b"error", b"").decode(errors="replace") for d in dead]
    ok = flags == [True, False] and ran == 1 and len(dead) == 1
    ok = ok and reasons[0].startswith("refused: unsigned job")
    return {"signed_bodies": flags, "ran": ran, "dead_letters": len(dead), "reasons": reasons,
            "ok": ok}  # fmt: skip


def _abba(blocks: int) -> Iterator[str]:
    """off, on, on, off, off, on, ...: every pair of blocks has both modes, and linear drift
    over four blocks cancels."""
    for b in range(blocks):
        yield MODES[(b + b // 2) % 2]


def interleaved(ctx: AgentCtx) -> Params:
    """The producer's two loops in one process, signing off and on in alternating blocks on
    the same app and connection (``app.settings`` swapped between blocks): ``--enqueue-jobs``
    ``noop.delay`` per mode in blocks of ONE_BLOCK, then ``--drain-jobs`` per mode with
    ``noop.starmap`` in batches of BULK_BATCH, one batch per block. No worker runs. Each
    mode's rate, and the producer's CPU time per job (its own, whatever the load)."""
    from bench.peers import taskq_app

    app, noop = taskq_app.app, taskq_app.noop
    settings = {"off": app.settings, "on": app.settings.replace(signing_keys=(KEY,))}
    if settings["off"].signer is not None or settings["on"].signer is None:
        raise BenchError("interleaved: the plain app signs, or the signed settings do not")
    out: Params = {"one_block": ONE_BLOCK, "bulk_batch": BULK_BATCH}
    r = ctx.redis()
    noop.delay(-1, time.time_ns())  # warm-up: connect
    loops: dict[str, tuple[int, int, Callable[[int, int], None]]] = {
        "enqueue_one": (ctx.enqueue_jobs, ONE_BLOCK, _one_block(noop)),
        "enqueue_bulk": (ctx.drain_jobs, BULK_BATCH, _bulk_block(noop)),
    }
    stop = time.monotonic() + ctx.deadline
    for name, (jobs, block, run_block) in loops.items():
        spent = {mode: 0.0 for mode in MODES}
        cpu = {mode: 0.0 for mode in MODES}
        done = {mode: 0 for mode in MODES}
        for mode in _abba(2 * max(1, jobs // block)):
            if time.monotonic() > stop:
                raise BenchError(f"interleaved {name}: not done after {ctx.deadline:.0f}s")
            app.settings = settings[mode]
            t0, c0 = time.perf_counter(), time.process_time()
            run_block(done[mode], block)
            spent[mode] += time.perf_counter() - t0
            cpu[mode] += time.process_time() - c0
            done[mode] += block
        app.settings = settings["off"]
        out[name] = {mode: done[mode] / spent[mode] for mode in MODES} | {"jobs": done["on"]}
        out[name] |= {f"cpu_us_{mode}": 1e6 * cpu[mode] / done[mode] for mode in MODES}
        r.flushall()
    return out


def _one_block(noop: Any) -> Callable[[int, int], None]:
    def run(first: int, n: int) -> None:
        for i in range(first, first + n):
            noop.delay(i, time.time_ns())

    return run


def _bulk_block(noop: Any) -> Callable[[int, int], None]:
    def run(first: int, n: int) -> None:
        t_ns = time.time_ns()
        noop.starmap([(i, t_ns) for i in range(first, first + n)])

    return run


def agent(system: Any, ctx: AgentCtx) -> Params:
    """The family's own round, in taskq's venv: micro-costs, the interleaved producer loops,
    then the check."""
    costs = micro(ctx.micro_number)
    ab = interleaved(ctx)
    result = check(ctx)
    figures = {k: costs[k] for k in ("encode_off", "encode_on", "decode_off", "decode_on")}
    figures |= {f"ab_{k}_{m}": ab[k][m] for k in ("enqueue_one", "enqueue_bulk") for m in MODES}
    return {"figures": figures | {"check_ok": int(result["ok"])}, "micro": costs,
            "interleaved": ab, "check": result}  # fmt: skip


# ------------------------------------------------------------------ orchestrator side


def _entry(entry: Entry, mode: str) -> Entry:
    """The bench.compare.agent round of taskq variant ``entry`` with signing ``mode``: the main
    bench's plain app either way (``mode`` only decides TASKQ_SIGNING_KEYS)."""
    return Entry(f"{entry.name}-signing-{mode}", "taskq_app", entry.venv,
                 f"{entry.label}, signing {mode}", True)  # fmt: skip


def signing_rounds(s: family.Session, systems: Sequence[Entry], run: int) -> None:
    """Run ``run`` of the enqueue and drain rounds, signing off and on, for each taskq variant.

    Each round is the main bench's (``python -m bench.compare.agent``, a fresh agent from an empty
    Redis): the single-call enqueue round, then the drain round (bulk enqueue, then the
    worker spawned and timed), then the drain's clean pass; the off and on rounds of each kind
    back to back, alternating which goes first from one run to the next. In run 1 also the
    MONITOR accounting pass of each mode.
    """
    meta = s.data["meta"].setdefault("rounds", {})
    halves.prepare(s.args, s.runner, meta)
    meta.setdefault("loadavg", {})[str(run)] = loadavg()
    kinds = halves.kinds(s.runner, ("enqueue", "enqueue"), ("drain", "drain"))
    for entry in (e for e in systems if e.is_taskq):
        node = s.data.setdefault("rounds", {}).setdefault(
            entry.name, halves.new_node(MODES, ("enqueue", "drain", "clean"))
        )

        def one_round(mode: str, at: int, phases: str, clean: bool, entry: Entry = entry) -> Params:
            return _round(s, entry, mode, at, phases, clean)

        halves.run_halves(node, meta, alternating(MODES, run), kinds, run, one_round)
        # The versions table's worker commands: the rounds' drain, then the check's.
        info = s.data["meta"]["systems"].setdefault(entry.name, {})
        drain_argv = meta.get("worker_argv", {}).get("on")
        if drain_argv:
            others = [a for a in info.get("worker_argv", []) if a != drain_argv]
            info["worker_argv"] = [drain_argv, *others]


def _round(
    s: family.Session, entry: Entry, mode: str, run: int, phases: str, clean: bool
) -> Params:
    """One bench.compare.agent round of ``entry`` with signing ``mode`` (run 0: the accounting pass,
    at halves.ACCOUNT_JOBS jobs); the load average just before it is kept with the result."""
    n, m = s.args.drain_jobs, s.args.enqueue_jobs
    acc = halves.ACCOUNT_JOBS
    sizes = (min(n, acc), min(m, acc // 4)) if phases == "account" else (n, m)
    load = loadavg()
    with signing_env(mode):
        res = s.runner.agent(_entry(entry, mode), run, phases, sizes=sizes, clean=clean)
    kind = "accounting pass (MONITOR)" if phases == "account" else "clean" if clean else phases
    done = "ERROR" if "error" in res else "done"
    what = done if clean or phases == "account" else brief(res)
    print(f"run {max(run, 1)}/{s.args.runs}  {entry.name:<14} signing {mode} {kind}: {what}",
          flush=True)  # fmt: skip
    return res | {"loadavg": load}


ENTRIES = {
    e.name: e
    for e in [Entry("taskq", "taskq_signing_app", envs.PROJECT_VENV, "taskq", is_taskq=True)]
}


def failed(data: dict[str, Any]) -> str | None:
    """What failed in the stored section: a missed target or the check, if any."""
    missed = any(t["pass"] is False for t in targets(data).values())
    if missed or any(not c["ok"] for c in check_results(data)):
        return "a signing target was missed or the check failed"
    return None


FAMILY = Family(
    key=FAMILY_KEY,
    title="Signing",
    module="bench.features.signing_bench",
    attr="SIGNING",
    systems=list(ENTRIES.values()),
    sizes=[
        Size("drain_jobs", 20_000, 5_000, "jobs of each bulk enqueue and drain"),
        Size("enqueue_jobs", 10_000, 2_000, "single-call enqueues of each enqueue round"),
        Size("micro_number", MICRO_NUMBER, MICRO_NUMBER // 4, "calls per timeit repeat"),
    ],
    agent=agent,
    render=render,
    raws=(),
    extra=signing_rounds,
    failed=failed,
)


def main() -> int:
    argv = sys.argv[1:]
    if (not argv or argv[0] not in ("agent", "raw", "probe")) and os.environ.pop(ENV, None):
        print(f"note: {ENV} unset for the off rounds and the check", flush=True)
    return family.main(FAMILY, argv)


if __name__ == "__main__":
    sys.exit(main())
