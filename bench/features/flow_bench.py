"""Flow-control benchmark: enqueue rates of debounce, keep-last and batching against plain
``delay`` in the same run, and a plain queue's drain on this tree against another tree.

Usage, from the repository root::

    .venv/bin/python bench/features/flow_bench.py                  # 3 runs
    .venv/bin/python bench/features/flow_bench.py --base /work/main --runs 5

One private ``redis-server`` (no persistence), flushed before every measurement.

* **enqueue**: ``--enqueue-jobs`` calls, one round trip each, no worker running, for each
  mode in alternating order: ``delay`` (plain), ``apply_async(debounce_key=...)`` with one
  key per call (every call begins a burst) and with one key for all (every call after the
  first replaces the burst's job), ``unique_mode="keep_last"`` with one key per call, and a
  batching task (``batch_size=100``, one key). Each mode's figure is the median over the runs
  of its calls per second and its ratio to ``delay`` in the same run.
* **drain** (``--base``): ``--drain-jobs`` plain jobs (no mode), enqueued in bulk, then
  ``taskq worker -c 2`` is spawned and timed to the last job's start, with this tree's taskq
  and with the base tree's, alternating which goes first. The figure is the median of the
  per-run ratios this / base (the target: within 2 %).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common.redis_server import PrivateRedis  # noqa: E402

PLAIN_APP = """
import os
from taskq import App
app = App(os.environ["TASKQ_REDIS_URL"])

@app.task(name="flow_bench.noop")
def noop(i):
    import redis
    global _r
    try:
        _r
    except NameError:
        _r = redis.Redis.from_url(os.environ["TASKQ_REDIS_URL"])
    _r.incr("flow_bench:done")
"""
"""The drained app: what any taskq tree loads (no flow-control option)."""

APP = (
    PLAIN_APP
    + """
@app.task
def keep(i):
    pass

@app.task(batch_size=100, batch_wait_s=5.0)
def gathered(calls):
    pass
"""
)


def _modes(tasks: object, n: int, run: int) -> dict[str, Callable[[], None]]:
    """Each mode's loop; keys are new in every run (a burst id a process remembers from an
    earlier run would name a job that a FLUSHALL removed)."""
    noop, keep, gathered = (getattr(tasks, name) for name in ("noop", "keep", "gathered"))

    def loop(call: Callable[[int], object]) -> Callable[[], None]:
        return lambda: [call(i) for i in range(n)] and None

    return {
        "delay": loop(noop.delay),
        "debounce, a key per call": loop(
            lambda i: noop.apply_async((i,), debounce_key=f"k{run}:{i}", debounce_s=60)
        ),
        "debounce, one key": loop(
            lambda i: noop.apply_async((i,), debounce_key=f"one:{run}", debounce_s=60)
        ),
        "keep_last, a key per call": loop(
            lambda i: keep.apply_async((i,), unique_key=f"k{run}:{i}", unique_mode="keep_last")
        ),
        "batch (100 per batch)": loop(gathered.delay),
    }


def enqueue_round(server: PrivateRedis, tasks: object, n: int, order: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    modes = list(_modes(tasks, n, order).items())
    for name, run in modes if order % 2 == 0 else modes[::-1]:
        server.flush()
        started = time.perf_counter()
        run()
        rates[name] = n / (time.perf_counter() - started)
    return rates


def drain_round(server: PrivateRedis, tasks: object, tree: Path, app_dir: Path, n: int) -> float:
    server.flush()
    tasks.noop.starmap((i,) for i in range(n))  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(TASKQ_REDIS_URL=server.url, PYTHONPATH=f"{app_dir}:{tree}")
    client = server.client()
    started = time.perf_counter()
    worker = subprocess.Popen(
        [sys.executable, "-m", "taskq", "worker", "-A", "flow_bench_plain", "-c", "2",
         "--loglevel", "warning"],
        cwd=tree, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = started + 300
        while int(client.get("flow_bench:done") or 0) < n:
            if time.perf_counter() > deadline or worker.poll() is not None:
                raise RuntimeError(f"drain on {tree} did not finish")
            time.sleep(0.005)
        return n / (time.perf_counter() - started)
    finally:
        worker.terminate()
        worker.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--enqueue-jobs", type=int, default=5_000)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--base", type=Path, help="another tree whose worker drains as the base")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        app_dir = Path(tmp)
        (app_dir / "flow_bench_app.py").write_text(APP)
        (app_dir / "flow_bench_plain.py").write_text(PLAIN_APP)
        server = PrivateRedis(app_dir / "redis")
        server.start()
        try:
            os.environ["TASKQ_REDIS_URL"] = server.url
            sys.path.insert(0, str(app_dir))
            import flow_bench_app as tasks

            enqueue = [enqueue_round(server, tasks, a.enqueue_jobs, r) for r in range(a.runs)]
            print(f"enqueue, {a.enqueue_jobs:,} calls, one round trip each (median of {a.runs}):")
            for mode in enqueue[0]:
                rate = statistics.median(r[mode] for r in enqueue)
                ratio = statistics.median(r[mode] / r["delay"] for r in enqueue)
                print(f"  {mode:28} {rate:9,.0f} calls/s  {ratio:6.1%} of delay")
            if a.base is not None:
                ratios = []
                for r in range(a.runs):
                    trees = [ROOT, a.base] if r % 2 == 0 else [a.base, ROOT]
                    rates = {t: drain_round(server, tasks, t, app_dir, a.drain_jobs) for t in trees}
                    ratios.append(rates[ROOT] / rates[a.base])
                    print(f"  drain run {r + 1}: this {rates[ROOT]:,.0f} jobs/s, base "
                          f"{rates[a.base]:,.0f} jobs/s ({ratios[-1]:.1%})")  # fmt: skip
                print(
                    f"drain of a plain queue, this / base: median {statistics.median(ratios):.1%}"
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
