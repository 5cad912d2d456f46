"""taskq benchmark: taskq and its peers side by side, in one run.

Usage, from the repository root::

    .venv/bin/python bench/run.py                 # full run, 12-20 minutes
    .venv/bin/python bench/run.py --quick         # smoke test, a few minutes
    .venv/bin/python bench/run.py --only taskq,celery,raw

Starts a private redis-server, creates or updates the bench virtualenvs when
needed, measures every selected system ``--runs`` times (each measurement from
an empty Redis), prints the report and writes bench/results/RESULTS.md and
bench/results/results.json. bench/README.md explains every figure.

Besides the timed rounds, each configuration gets untimed passes: a clean pass
(the Redis time per job, measured with every client process kept off
redis-server's CPU; in the first ``--clean-runs`` runs) and a ``MONITOR``
accounting pass (which commands ran inside scripts; in run 1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import envs
from bench.common.procs import format_cpus
from bench.common.runner import (
    RAWS,
    Entry,
    Runner,
    brief,
    exit_on_sigterm,
    hiredis_problem,
    loadavg,
    machine,
    taskq_problem,
)
from bench.compare import report, startup, summary, targets

if TYPE_CHECKING:  # imported where it is used: it imports taskq, which the peers' venvs lack
    pass

REPO = envs.REPO


SYSTEMS = [
    Entry("taskq", "taskq_app", envs.NOHIREDIS_VENV, "taskq", is_taskq=True),
    Entry("taskq-hiredis", "taskq_app", envs.HIREDIS_VENV, "taskq + hiredis", is_taskq=True),
    Entry("celery", "celery_app", envs.PEERS_VENV, "Celery"),
    Entry("dramatiq", "dramatiq_app", envs.PEERS_VENV, "Dramatiq"),
    Entry("huey", "huey_app", envs.PEERS_VENV, "Huey"),
    Entry("rq", "rq_app", envs.PEERS_VENV, "RQ"),
    Entry("taskiq", "taskiq_app", envs.PEERS_VENV, "taskiq-redis"),
]
LABELS = {
    **{e.name: e.label for e in SYSTEMS},
    "raw": "redis-py",
    "raw-hiredis": "redis-py + hiredis",
}
RAW_FOR = {"taskq": "raw", "taskq-hiredis": "raw-hiredis"}  # ceilings each variant is held to

SIZES = ("jobs", "runs", "enqueue_jobs", "latency_samples", "idle_seconds", "startup_rounds")
FULL = dict(zip(SIZES, (20_000, 3, 10_000, 1_000, 10.0, 11), strict=True))
QUICK = dict(zip(SIZES, (5_000, 1, 2_000, 300, 5.0, 5), strict=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; --quick changes the defaults of the sizes."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help=f"smoke-test sizes: {QUICK}")
    p.add_argument(
        "--only",
        default="",
        help="comma list of taskq, taskq-hiredis, celery, dramatiq, huey, rq, taskiq, raw, "
        "raw-hiredis, peers ('taskq' and 'raw' also select their -hiredis variant)",
    )
    p.add_argument("--jobs", type=int, help="jobs per drain and per bulk enqueue (20000)")
    p.add_argument("--runs", type=int, help="runs per figure; medians are reported (3)")
    p.add_argument("--enqueue-jobs", type=int, help="jobs per single-call enqueue run (10000)")
    p.add_argument("--latency-samples", type=int, help="enqueue->start probes per run (1000)")
    p.add_argument("--idle-seconds", type=float, help="idle CPU window (10)")
    p.add_argument(
        "--startup-rounds",
        type=int,
        help="rounds of bench/compare/startup.py per run and taskq variant (11; 0: none)",
    )
    p.add_argument("--procs", type=int, default=2, help="worker processes per system (2)")
    p.add_argument("--batch", type=int, default=1_000, help="jobs per bulk enqueue call (1000)")
    p.add_argument(
        "--prefetch",
        default="1,64",
        help="taskq --prefetch values to drain with (1,64; the budgets' values are always added)",
    )
    p.add_argument(
        "--account-jobs",
        type=int,
        default=2_000,
        help="jobs of the untimed MONITOR accounting pass per configuration (2000; 0: none)",
    )
    p.add_argument(
        "--clean-runs",
        type=int,
        default=1,
        help="runs (from the first) that also make the untimed clean pass of every "
        "configuration, for the Redis time per job (1; 0: none, Redis figures then contended)",
    )
    p.add_argument(
        "--no-incr",
        dest="incr",
        action="store_false",
        help="tasks skip their one Redis INCR (the older pure no-op shape)",
    )
    p.add_argument("--deadline", type=float, default=300.0, help="bound of each phase, s (300)")
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="do not pin redis-server and the producer to separate CPUs (and no clean pass)",
    )
    p.add_argument("--no-setup", action="store_true", help="do not create/update bench venvs")
    p.add_argument("--keep-workdir", action="store_true", help="keep worker logs and records")
    p.add_argument(
        "--out", type=Path, help="report path (bench/results/RESULTS.md; --quick: -quick)"
    )
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.out is None:
        args.out = envs.RESULTS / ("RESULTS-quick.md" if args.quick else "RESULTS.md")
    return args


def select(only: str) -> tuple[list[Entry], list[str]]:
    """Systems and raw variants named by --only (everything when empty)."""
    if not only:
        return list(SYSTEMS), list(RAWS)
    tokens = {t.strip() for t in only.split(",") if t.strip()}

    def hit(name: str, peer: bool) -> bool:
        return ("peers" in tokens and peer) or any(
            name == t or name.startswith(t + "-") for t in tokens
        )

    systems = [e for e in SYSTEMS if hit(e.name, not e.is_taskq)]
    raws = [r for r in RAWS if hit(r, False)]
    known = {"peers", *RAWS, *(e.name for e in SYSTEMS)}
    if tokens - known:
        raise SystemExit(f"unknown --only names: {', '.join(sorted(tokens - known))}")
    return systems, raws


def new_data(args: argparse.Namespace, systems: list[Entry], raws: list[str]) -> dict[str, Any]:
    """The results document, before any measurement."""
    sizes = (*SIZES, "procs", "batch", "prefetch", "account_jobs", "clean_runs", "incr",
             "deadline", "pin")  # fmt: skip
    return {
        "meta": {
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": f"{os.path.relpath(sys.executable, REPO)} {shlex.join(sys.argv)}",
            "machine": machine(),
            "loadavg_before": loadavg(),
            "params": {k: getattr(args, k) for k in sizes},
            "skipped": {},
            "systems": {},
        },
        "raw": {name: [] for name in raws},
        "systems": {e.name: {"enqueue": [], "drain": []} for e in systems},
        "prefetch": {e.name: {} for e in systems if e.is_taskq},
        "accounting": {e.name: {} for e in systems},
        "clean": {e.name: {} for e in systems},
        "startup": {e.name: [] for e in systems if e.is_taskq},
    }


def prefetch_values(args: argparse.Namespace) -> list[str]:
    """--prefetch values to drain with: the given ones plus those the budgets and targets need."""
    given = {p.strip() for p in args.prefetch.split(",") if p.strip()}
    return sorted(given | set(targets.budget_prefetch_values()), key=int)


def account(
    runner: Runner, data: dict[str, Any], entry: Entry, config: str, worker_args: str = ""
) -> None:
    """The untimed MONITOR pass of one configuration: which commands run inside scripts/EXEC."""
    a = runner.args
    if a.account_jobs <= 0:
        return
    sizes = (min(a.jobs, a.account_jobs), min(a.enqueue_jobs, max(1, a.account_jobs // 4)))
    res = runner.agent(entry, 0, "account", worker_args, sizes)
    data["accounting"][entry.name][config] = {
        k: res[k] for k in ("accounting", "error") if k in res
    }
    done = "ERROR" if "error" in res else "done"
    print(f"        {entry.name:<14} {config}: accounting pass (MONITOR) {done}", flush=True)


def clean_plan(runner: Runner) -> dict[str, Any]:
    """Where the clean passes run (meta["clean"]), or why there are none."""
    a = runner.args
    if not a.pin:
        return {"skipped": "--no-pin"}
    if not runner.clean_cpus:
        return {"skipped": f"only {len(os.sched_getaffinity(0))} CPU"}
    if a.clean_runs <= 0:
        return {"skipped": "--clean-runs 0"}
    runs = min(a.clean_runs, a.runs)
    return {"redis_cpu": runner.redis_cpu, "client_cpus": runner.clean_cpus, "runs": runs}


def clean_pass(
    runner: Runner, data: dict[str, Any], entry: Entry, run: int, config: str, worker_args: str = ""
) -> None:
    """The untimed clean pass of one configuration: a drain with Redis alone on its CPU."""
    res = runner.agent(entry, run, "drain", worker_args, clean=True)
    data["clean"][entry.name].setdefault(config, []).append(res)
    done = "ERROR" if "error" in res else "done"
    where = f"clients on CPU {format_cpus(runner.clean_cpus)}"
    print(f"        {entry.name:<14} {config}: clean pass ({where}) {done}", flush=True)


def measure_system(
    runner: Runner, data: dict[str, Any], entry: Entry, run: int, clean: bool
) -> None:
    """One run of one system: enqueue round, drain round, clean pass (if ``clean``), accounting.

    The accounting pass is made in run 1 only.
    """
    head = f"run {run}/{runner.args.runs}"
    for phases, key in (("enqueue", "enqueue"), ("drain,latency,idle", "drain")):
        res = runner.agent(entry, run, phases)
        data["systems"][entry.name][key].append(res)
        if "versions" in res:
            info = data["meta"]["systems"].setdefault(entry.name, {})
            info["versions"] = res["versions"]
            if res.get("worker_argv"):
                info["worker_argv"] = res["worker_argv"]
        print(f"{head}  {entry.name:<14} {brief(res)}", flush=True)
    if clean:
        clean_pass(runner, data, entry, run, "default")
    if run == 1:
        account(runner, data, entry, "default")


def measure_startup(runner: Runner, data: dict[str, Any], entry: Entry, run: int) -> None:
    """One run of bench/compare/startup.py in ``entry``'s venv: `import taskq` and `taskq
    --version` against `import redis`, each the median of --startup-rounds spawns."""
    rounds = runner.args.startup_rounds
    if rounds <= 0:
        return
    argv = [str(envs.python_of(entry.venv)), "-m", "bench.compare.startup", "--rounds", str(rounds)]
    log = runner.workdir / "logs" / f"{entry.name}-startup-{run}.log"
    res = runner.call(argv, log, timeout=runner.args.deadline)
    data["startup"][entry.name].append(res)
    ratios = ", ".join(f"{k} {v:.2f}x" for k, v in res.get("ratio", {}).items())
    print(f"run {run}/{runner.args.runs}  {entry.name:<14} start-up: {ratios or res}", flush=True)


def measure(runner: Runner, data: dict[str, Any], systems: list[Entry], raws: list[str]) -> None:
    """All runs: raw ceilings, every system, then taskq's --prefetch configurations and its
    start-up ratios."""
    args = runner.args
    clean_runs = data["meta"]["clean"].get("runs", 0)
    for run in range(1, args.runs + 1):
        head = f"run {run}/{args.runs}"
        clean = run <= clean_runs
        for name in raws:
            res = runner.raw(name, run, clean)
            data["raw"][name].append(res)
            print(f"{head}  {name:<14} {brief(res)}", flush=True)
        for entry in systems:
            measure_system(runner, data, entry, run, clean)
        for entry in (e for e in systems if e.is_taskq):
            for value in prefetch_values(args):
                config = summary.prefetch_config(value)
                res = runner.agent(entry, run, "drain", config)
                data["prefetch"][entry.name].setdefault(value, []).append(res)
                print(f"{head}  {entry.name:<14} {config}: {brief(res)}", flush=True)
                if clean:
                    clean_pass(runner, data, entry, run, config, config)
                if run == 1:
                    account(runner, data, entry, config, config)
            measure_startup(runner, data, entry, run)


def summarize(data: dict[str, Any], systems: list[Entry]) -> dict[str, Any]:
    """Medians per system, raw ceilings, the prefetch configurations, targets and budgets."""
    acc, clean = data["accounting"], data["clean"]
    sys_sum = {
        n: summary.summarize_system(
            d["enqueue"],
            d["drain"],
            acc.get(n, {}).get("default"),
            clean.get(n, {}).get("default", []),
        )
        for n, d in data["systems"].items()
    }
    raw_sum = {n: summary.summarize_raw(runs) for n, runs in data["raw"].items()}
    pf_sum = {
        n: summary.summarize_prefetch(by, acc.get(n, {}), clean.get(n, {}))
        for n, by in data["prefetch"].items()
    }
    peers = {e.name: sys_sum[e.name] for e in systems if not e.is_taskq}
    floor = "consume_floor" if data["meta"]["params"]["incr"] else "consume_batched"
    by_variant = {
        e.name: targets.targets(
            e.name,
            sys_sum[e.name],
            pf_sum.get(e.name),
            raw_sum.get(RAW_FOR[e.name], {}),
            peers,
            floor,
            summary.summarize_startup(data.get("startup", {}).get(e.name, [])),
        )
        for e in systems
        if e.is_taskq
    }
    return {
        "systems": sys_sum,
        "raw": raw_sum,
        "prefetch": pf_sum,
        "targets": by_variant,
        "floor": floor,
    }


def prepare(args: argparse.Namespace) -> tuple[list[Entry], list[str], dict[str, str]]:
    """Select, set up the venvs, and drop taskq variants that cannot run."""
    systems, raws = select(args.only)
    if not args.no_setup:
        if raws or any(not e.is_taskq for e in systems):
            envs.ensure_peers()
        if any(e.is_taskq for e in systems):
            envs.ensure_taskq()
    if any(e.is_taskq for e in systems):
        startup.compile_bytecode()  # as a wheel install does: see bench/compare/startup.py
    skipped = {}
    for entry in (e for e in systems if e.is_taskq):
        problem = taskq_problem(entry)
        if problem:
            skipped[entry.name] = problem
    for name in raws:
        problem = hiredis_problem(name, RAWS[name])
        if problem:
            skipped[name] = problem
    for name, problem in skipped.items():
        print(f"skipping {name}: {problem}", flush=True)
    kept = [e for e in systems if e.name not in skipped]
    return kept, [r for r in raws if r not in skipped], skipped


def main() -> int:
    """Run the bench; exit status 1 if a measurement failed, 2 if a Redis budget was exceeded."""
    args = parse_args()
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    started = time.monotonic()
    systems, raws, skipped = prepare(args)
    data = new_data(args, systems, raws)
    data["meta"]["skipped"] = skipped
    workdir = Path(tempfile.mkdtemp(prefix="taskq-bench-"))
    print(f"work dir {workdir}; load average {loadavg()}", flush=True)
    if float(loadavg().split()[0]) > report.BUSY_LOAD:
        print("warning: the machine is busy; figures will be noisy", flush=True)
    from bench.common.redis_server import PrivateRedis  # here: it imports taskq (not in peer venvs)

    with PrivateRedis(workdir, args.redis_server) as server:
        data["meta"]["redis_version"] = server.version()
        runner = Runner(args, server, workdir)
        data["meta"]["params"]["pin"] = runner.producer_cpu >= 0
        data["meta"]["clean"] = plan = clean_plan(runner)
        if "skipped" in plan:
            print(f"no clean pass ({plan['skipped']}): the Redis time figures are contended")
        measure(runner, data, systems, raws)
    data["summary"] = summarize(data, systems)
    data["meta"]["loadavg_after"] = loadavg()
    data["meta"]["elapsed_s"] = time.monotonic() - started

    text = report.render(data, LABELS)
    args.out.write_text(text)
    json_path = args.out.with_name("results-quick.json" if args.quick else "results.json")
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    print("\n" + text)
    print(f"wrote {args.out} and {json_path} in {data['meta']['elapsed_s'] / 60:.1f} min")
    if runner.failures or args.keep_workdir:
        print(f"logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    exceeded = targets.exceeded_budgets(data["summary"]["targets"])
    for line in exceeded:
        print(f"\n!!! {line}", file=sys.stderr, flush=True)
    if runner.failures:
        print(f"\n!!! {runner.failures} measurement(s) failed", file=sys.stderr, flush=True)
    return 1 if runner.failures else 2 if exceeded else 0


if __name__ == "__main__":
    sys.exit(main())
