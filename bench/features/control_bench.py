"""Control-plane benchmark: what pauses, run-time limits and cancels cost a drain while none
is in force, and how soon a pause stops the fleet.

Usage, from the repository root::

    .venv/bin/python bench/features/control_bench.py --main /work/main   # ~3 minutes

* **drain**: ``--jobs`` (20,000) no-op jobs (one ``INCR`` each) bulk-enqueued, drained by
  ``--procs`` (2) ``taskq worker -c 1`` processes, timed from the spawn until the counter
  reaches the number of jobs; ``--runs`` (3) times for this tree and for the tree given by
  ``--main`` (the code before the change), alternating which goes first. The ratio of the
  medians (this tree / main) should be at least 0.98.
* **pause**: ``--trials`` (20) times, two workers (``-c 2``) draining jobs that record
  their start time; ``app.pause()`` is called, and the time from its return to the last job
  start after it is taken (negative: none started after the return). Reports p50, p99, max.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common.redis_server import PrivateRedis  # noqa: E402

APP = """
import os, time
import redis
import taskq
app = taskq.App(os.environ["TASKQ_REDIS_URL"], queue="cbench")
_r = None
def _c():
    global _r
    if _r is None:
        _r = redis.Redis.from_url(os.environ["TASKQ_REDIS_URL"])
    return _r
@app.task
def noop(i):
    _c().incr("cbench:done")
@app.task
def stamp(i):
    _c().rpush("cbench:starts", repr(time.time()))
    time.sleep(0.005)
"""


def _workers(
    url: str, tree: Path, appdir: Path, n: int, conc: int
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "TASKQ_REDIS_URL": url, "PYTHONPATH": f"{tree}:{appdir}"}
    cmd = [sys.executable, "-m", "taskq", "worker", "-A", "cbench_app:app", "-Q", "cbench"]
    cmd += ["-c", str(conc), "--loglevel", "warning"]
    return [subprocess.Popen(cmd, env=env, cwd=appdir, start_new_session=True) for _ in range(n)]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        p.wait(30)


def drain(url: str, tree: Path, appdir: Path, jobs: int, procs: int) -> float:
    import redis

    r = redis.Redis.from_url(url)
    r.flushdb()
    sys.path.insert(0, str(appdir))
    import cbench_app  # type: ignore[import-not-found]

    cbench_app.noop.map([(i,) for i in range(jobs)])
    started = time.perf_counter()
    ws = _workers(url, tree, appdir, procs, 1)
    while int(r.get("cbench:done") or 0) < jobs:
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    _stop(ws)
    return jobs / elapsed


def pause_trial(url: str, appdir: Path) -> float:
    import cbench_app  # type: ignore[import-not-found]
    import redis

    r = redis.Redis.from_url(url)
    r.flushdb()
    cbench_app.app.close()
    cbench_app.stamp.map([(i,) for i in range(3000)])
    ws = _workers(url, ROOT, appdir, 2, 2)
    while r.llen("cbench:starts") < 50:
        time.sleep(0.01)
    time.sleep(0.3)
    cbench_app.app.pause("cbench")
    returned = time.time()
    time.sleep(1.5)
    last = max(float(x) for x in r.lrange("cbench:starts", 0, -1))
    _stop(ws)
    cbench_app.app.resume("cbench")
    return last - returned


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--main", type=Path, required=True, help="the tree before the change")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--trials", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        appdir = Path(tmp)
        (appdir / "cbench_app.py").write_text(APP)
        server = PrivateRedis(appdir / "redis")
        server.start()
        os.environ["TASKQ_REDIS_URL"] = server.url
        try:
            rates: dict[str, list[float]] = {"main": [], "this": []}
            for run in range(a.runs):
                order = [("main", a.main), ("this", ROOT)]
                for name, tree in order if run % 2 == 0 else order[::-1]:
                    rates[name].append(drain(server.url, tree, appdir, a.jobs, a.procs))
                    print(f"drain {name} run {run + 1}: {rates[name][-1]:,.0f} jobs/s", flush=True)
            m, t = statistics.median(rates["main"]), statistics.median(rates["this"])
            print(f"drain median: main {m:,.0f} jobs/s, this {t:,.0f} jobs/s, ratio {t / m:.3f}")
            lags = sorted(pause_trial(server.url, appdir) for _ in range(a.trials))
            p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
            print(
                f"pause -> last start over {len(lags)} trials: "
                f"p50 {statistics.median(lags):.3f} s, p99 {p99:.3f} s, max {lags[-1]:.3f} s"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
