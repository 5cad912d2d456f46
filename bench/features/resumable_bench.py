"""Resumable jobs benchmark: what a task that uses neither API pays (nothing), and what a step
and a saved cursor cost, against one raw HSET round trip in the same run.

Usage, from the repository root::

    .venv/bin/python bench/features/resumable_bench.py          # 100,000-job drains, 5 runs
    .venv/bin/python bench/features/resumable_bench.py --quick  # 20,000-job drains, 1 run

Two measurements, on a private ``redis-server`` (no persistence, FLUSHALL before each):

* **drain, neither API used**: ``--jobs`` no-op jobs enqueued in bulk, then ``taskq worker
  -c 2`` spawned and timed from its first fetch until the group has read and acked every
  entry (its start-up is left out), once with the
  package of the commit this change starts from (``--base``, exported with ``git archive``)
  and once with this tree, in alternating order; the figure is the median of each run's
  this / base ratio (target: within 2 %).
* **cost of a step and a checkpoint**, in this process through ``drain()``: jobs of ``--per-job``
  steps (``taskq.step`` of a no-op function) against the same jobs without steps; jobs of a
  walk of ``--per-job`` items with ``checkpoint_every_items=1`` (a saved cursor per item)
  against the same walk with one save at its end; and as many raw ``HSET`` round trips on
  the app's own link. Wall µs per step / checkpoint / HSET is the time difference divided by
  their count; Redis µs is the difference of ``INFO commandstats`` usec totals, likewise.

Writes the "Resumable" section of bench/results/RESULTS-features.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.common.redis_server import PrivateRedis  # noqa: E402
from bench.common.report import md_table  # noqa: E402
from bench.common.runner import loadavg, machine  # noqa: E402
from bench.features.section import write_section  # noqa: E402

KEY = "resumable"
APP_MODULE = """
from taskq import App
app = App(queue="tasks")

@app.task
def noop(i: int) -> None:
    pass
"""
"""The drain's app, importable by both packages (it uses nothing this change adds)."""


def export_base(commit: str, into: Path) -> Path:
    """The package at ``commit`` (``git archive``), for the base side of the drain."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "taskq"], check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def drain_once(server: PrivateRedis, tree: Path, app_dir: Path, jobs: int) -> dict[str, float]:
    """``taskq worker -c 2`` running ``tree``'s package on ``jobs`` no-ops: jobs per second
    (wall, from its first fetch), and CPU µs per job of the worker tree (master and children,
    start-up included) and of redis-server."""
    server.flush()
    client = server.client()
    from taskq import App

    producer = App(server.url, queue="tasks")

    @producer.task(name="resumable_bench_app.noop")
    def noop(i: int) -> None:
        del i

    for start in range(0, jobs, 1_000):
        noop.map(range(start, min(jobs, start + 1_000)))
    producer.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(PYTHONPATH=f"{tree}{os.pathsep}{app_dir}", TASKQ_REDIS_URL=server.url)
    argv = [sys.executable, "-m", "taskq", "worker", "-A", "resumable_bench_app:app", "-c", "2"]
    redis_cpu = _redis_cpu_s(client)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while _read(client)[0] == 0:  # start-up (imports, fork) is not the drain
            time.sleep(0.001)
        started = time.perf_counter()
        while (at := _read(client))[0] < jobs or at[1] > 0:
            time.sleep(0.005)
        elapsed = time.perf_counter() - started
        redis_cpu = _redis_cpu_s(client) - redis_cpu
    finally:
        proc.terminate()
    # The master reaps its children before it exits, so its rusage includes theirs.
    _, _, usage = os.wait4(proc.pid, 0)
    return {
        "rate": jobs / elapsed,
        "worker_cpu_us": (usage.ru_utime + usage.ru_stime) / jobs * 1e6,
        "redis_cpu_us": redis_cpu / jobs * 1e6,
    }


def _redis_cpu_s(client: Any) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _read(client: Any) -> tuple[int, int]:
    """(entries read, pending) of the group on ``tasks:normal``."""
    try:
        [group] = client.xinfo_groups("tasks:normal")
    except Exception:  # no stream or group yet
        return 0, 0
    return int(group["entries-read"] or 0), int(group["pending"])


def _usec(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values())


def cost_round(server: PrivateRedis, jobs: int, per_job: int) -> dict[str, float]:
    """Wall and Redis µs per step, per saved cursor and per raw HSET, in this process.

    Each task times its own loop (so the drain around it is not counted): ``per_job`` steps,
    a walk of ``per_job`` items saving its cursor after each item or only at its end, or
    ``per_job`` raw HSETs on the app's link. Redis µs is the ``INFO commandstats`` total of
    a drain less that of the same drain without the thing measured.
    """
    import taskq
    from taskq import App
    from taskq.testing import drain

    app = App(server.url, queue="tasks")
    client = server.client()
    spent: dict[str, float] = {}

    def timed_loop(name: str, loop: Any) -> None:
        started = time.perf_counter()
        loop()
        spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

    @app.task(name="stepped")
    def stepped(n: int) -> None:
        timed_loop("step", lambda: [taskq.step(f"s{i}", int) for i in range(n)])

    @app.task(name="walked")
    def walked(n: int, label: str) -> None:
        rows = lambda cursor: (list(range(n)), None)  # noqa: E731
        timed_loop(label, lambda: [None for _ in taskq.iterate("rows", rows)])

    @app.task(name="raw")
    def raw(n: int) -> None:
        link = app.link
        timed_loop(
            "hset", lambda: [link.call("HSET", "tasks:raw", f"f{i}", b"x") for i in range(n)]
        )

    def redis_us(enqueue: Any, **settings: Any) -> int:
        server.flush()
        app.close()
        app.settings = app.settings.replace(**settings)
        enqueue()
        client.config_resetstat()
        drain(app, timeout_s=600)
        return _usec(client)

    n = jobs * per_job
    hset_us = redis_us(lambda: raw.map([per_job] * jobs))
    step_us = redis_us(lambda: stepped.map([per_job] * jobs))
    once_us = redis_us(
        lambda: walked.starmap([(per_job, "walk")] * jobs), checkpoint_every_items=10**9
    )
    each_us = redis_us(
        lambda: walked.starmap([(per_job, "saved")] * jobs), checkpoint_every_items=1
    )
    plain_us = redis_us(lambda: raw.map([0] * jobs))
    app.close()
    return {
        "step_wall_us": spent["step"] / n * 1e6,
        "step_redis_us": (step_us - plain_us) / n,
        "checkpoint_wall_us": (spent["saved"] - spent["walk"]) / n * 1e6,
        "checkpoint_redis_us": (each_us - once_us) / n,
        "hset_wall_us": spent["hset"] / n * 1e6,
        "hset_redis_us": (hset_us - plain_us) / n,
    }


def render(data: dict[str, Any]) -> str:
    meta, drains, costs = data["meta"], data["drains"], data["costs"]
    ratio = statistics.median(d["this"]["rate"] / d["base"]["rate"] for d in drains)
    cpu = statistics.median(d["this"]["worker_cpu_us"] / d["base"]["worker_cpu_us"] for d in drains)
    rcpu = statistics.median(d["this"]["redis_cpu_us"] / d["base"]["redis_cpu_us"] for d in drains)
    lines = [
        "## Resumable",
        "",
        f"- Date: {meta['started']} (took {meta['elapsed_s'] / 60:.1f} min)",
        f"- Command, from the repository root: `{meta['command']}`",
        f"- Machine: {meta['machine']['nproc']} cores ({meta['machine']['cpu']}); producer, "
        "workers and Redis share these cores; **the machine was shared with other work "
        "during the run**, so the figures are brief and noisy",
        f"- Load average before / after: {meta['loadavg_before']} / {meta['loadavg_after']}",
        f"- Redis: private `redis-server` {meta['redis_version']}, no persistence, FLUSHALL "
        "before every measurement",
        f"- Parameters: {meta['jobs']:,} no-op jobs per drain, {meta['runs']} run(s); "
        f"costs over {meta['cost_jobs']} jobs x {meta['per_job']} steps or items, median of "
        f"{meta['runs']} round(s), each task timing its own loop",
        "",
        "### Drain of tasks that use neither API",
        "",
        md_table(
            ["run", "figure", f"base {meta['base']}", "this tree", "this / base"],
            [row for i, d in enumerate(drains) for row in _drain_rows(i, d)],
        ),
        "",
        f"Median ratio, CPU per job of the worker tree: **{cpu:.3f}**; of redis-server: "
        f"**{rcpu:.3f}**; jobs/s (wall): **{ratio:.3f}** (target: within 2 %). The CPU "
        "figures are the ones to judge: the wall rate moves by tens of percent from one drain "
        "to the next on a machine shared with other work, the CPU a job costs much less.",
        "",
        "### Cost of a step and of a saved cursor",
        "",
        md_table(
            ["what", "wall µs each", "Redis µs each", "x one raw HSET (wall)"],
            [
                [
                    name,
                    f"{costs[k + '_wall_us']:.1f}",
                    f"{costs[k + '_redis_us']:.1f}",
                    f"{costs[k + '_wall_us'] / costs['hset_wall_us']:.2f}",
                ]
                for name, k in (
                    ("`taskq.step` (read-and-mark, then store: 2 round trips)", "step"),
                    ("saved cursor of `taskq.iterate` (1 round trip)", "checkpoint"),
                    ("raw `HSET` round trip on the app's link", "hset"),
                )
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


FIGURES = (
    ("rate", "jobs/s (wall)", "{:,.0f}"),
    ("worker_cpu_us", "worker CPU µs/job", "{:.1f}"),
    ("redis_cpu_us", "redis-server CPU µs/job", "{:.2f}"),
)


def _drain_rows(i: int, d: dict[str, dict[str, float]]) -> list[list[str]]:
    return [
        [str(i + 1), label, fmt.format(d["base"][k]), fmt.format(d["this"][k]),
         f"{d['this'][k] / d['base'][k]:.3f}"]
        for k, label, fmt in FIGURES
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--base", default="b961c5c", help="the commit before the change")
    parser.add_argument("--jobs", type=int, default=None, help="no-op jobs per drain")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--cost-jobs", type=int, default=50)
    parser.add_argument("--per-job", type=int, default=100)
    args = parser.parse_args()
    jobs = args.jobs or (20_000 if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 5)
    started, t0, before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.time(), loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = export_base(args.base, work / "base")
        (work / "app").mkdir()
        (work / "app" / "resumable_bench_app.py").write_text(APP_MODULE)
        server = PrivateRedis(work / "redis")
        server.start()
        try:
            drains = []
            for run in range(runs):
                order = [("base", base), ("this", REPO)]
                pair = dict(
                    (name, drain_once(server, tree, work / "app", jobs))
                    for name, tree in (order if run % 2 == 0 else order[::-1])
                )
                drains.append(pair)
                print(f"run {run + 1}: {pair}")
            rounds = [cost_round(server, args.cost_jobs, args.per_job) for _ in range(runs)]
            costs = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            print({k: round(v, 2) for k, v in costs.items()})
            version = server.version()
        finally:
            server.stop()
    command = " ".join([".venv/bin/python bench/features/resumable_bench.py", *sys.argv[1:]])
    meta = {
        "started": started, "elapsed_s": time.time() - t0, "command": command.strip(),
        "machine": machine(), "loadavg_before": before, "loadavg_after": loadavg(),
        "redis_version": version, "jobs": jobs, "runs": runs, "base": args.base,
        "cost_jobs": args.cost_jobs, "per_job": args.per_job,
    }  # fmt: skip
    data: dict[str, Any] = {"meta": meta, "drains": drains, "costs": costs}
    data["markdown"] = render(data)
    md, _ = write_section(KEY, data, args.quick)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
