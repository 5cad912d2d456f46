"""Shared machinery of the feature benchmarks: results, chords and async.

Each family is one module with its own entry point (``bench/features/results_bench.py``,
``bench/features/chords_bench.py``, ``bench/features/async_bench.py``) that describes itself as a
:class:`Family`. The same module runs three ways:

* ``python bench/<family>_bench.py [--quick]``: the orchestrator, in the project's
  venv. It sets up the bench venvs (:mod:`bench.common.envs`), starts a private
  ``redis-server`` (:mod:`bench.common.redis_server`), pins it and the producers like
  ``run.py``, runs every selected system and raw floor ``--runs`` times (each from
  an empty Redis) and writes the family's section of ``bench/results/RESULTS-features.md``
  and ``bench/results/results-features.json`` (``-quick`` variants with ``--quick``),
  keeping the other families' sections.
* ``python -m bench.<family>_bench agent --module <peer module> ...``: one system's
  round, inside that system's venv; prints one JSON object on its last line.
* ``python -m bench.<family>_bench raw ...``: the family's raw redis-py floor, in
  ``.venv-peers`` (pure-Python parser) or the project venv (hiredis).

A taskq module (``bench/peers/taskq_*_app.py``) that needs a feature taskq does not
have yet says so through its ``problem()`` function; the orchestrator then reports
"taskq: not available yet" with the reason and measures everything else.

Every loop is bounded in time; worker processes are stopped in ``finally`` blocks.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fnmatch
import importlib
import importlib.metadata
import json
import multiprocessing as mp
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
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
from bench.common.report import md_table, percentile
from bench.common.rounds import alternating, environ
from bench.common.runner import RAWS, Entry, Runner, loadavg, machine, taskq_problem

if TYPE_CHECKING:  # imported where it is used: it imports taskq, which the peers' venvs lack
    from bench.common.redis_server import PrivateRedis

REPO = envs.REPO
# sections of RESULTS-features.md, in this order
ORDER = (
    "results",
    "chords",
    "periodic",
    "limits",
    "async",
    "otel",
    "signing",
    "dashboard",
    "cluster",
)
COMMANDS = {key: f".venv/bin/python bench/features/{key}_bench.py" for key in ORDER}
RAW_LABELS = {"raw": "raw floor (redis-py)", "raw-hiredis": "raw floor (redis-py + hiredis)"}
POLL_S = 0.001
Params = dict[str, Any]


@dataclass(frozen=True)
class Size:
    """One size option of a family: full and --quick defaults."""

    name: str
    full: float
    quick: float
    help: str


@dataclass(frozen=True)
class Family:
    """A feature benchmark family: its systems, sizes and the functions that measure it.

    ``attr`` names the object each peer module exposes for this family (``RESULTS``,
    ``CHORDS``, ``ASYNC``). ``agent(system, ctx)`` measures one system inside its venv;
    ``raw(ctx)`` the raw floor (a family with ``raws=()`` has none); ``render(data)``
    returns the section's Markdown body.
    ``extra(session, systems, run)``, if given, makes the family's further rounds of run
    ``run`` (after the raw floors and the systems; ``systems`` are those that can run) and
    keeps their figures in ``session.data`` itself. ``failed(data)``, if given, reads the
    section just written and says which of the family's checks or targets failed, if any:
    the orchestrator then exits with status 2.
    """

    key: str
    title: str
    module: str
    attr: str
    systems: Sequence[Entry]
    sizes: Sequence[Size]
    agent: Callable[[Any, AgentCtx], Params]
    render: Callable[[dict[str, Any]], list[str]]
    raw: Callable[[AgentCtx], Params] | None = None
    raws: Sequence[str] = ("raw", "raw-hiredis")
    extra: Callable[[Session, Sequence[Entry], int], None] | None = None
    failed: Callable[[dict[str, Any]], str | None] | None = None

    def label(self, name: str) -> str:
        """Display name of a system or raw floor."""
        for e in self.systems:
            if e.name == name:
                return e.label
        return RAW_LABELS.get(name, name)


# ------------------------------------------------------------------ orchestrator


def parse_args(family: Family, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options; --quick changes the defaults of the sizes."""
    p = argparse.ArgumentParser(
        description=sys.modules["__main__"].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    quick = ", ".join(f"{s.name} {s.quick:g}" for s in family.sizes)
    p.add_argument("--quick", action="store_true", help=f"smoke-test sizes ({quick}), 1 run")
    names = ", ".join([*(e.name for e in family.systems), *family.raws])
    p.add_argument(
        "--only",
        default="",
        help=f"comma list of: {names}, or peers ('taskq' and 'raw' also select their -hiredis "
        "variant)",
    )
    for s in family.sizes:
        kind = int if float(s.full).is_integer() else float
        p.add_argument(f"--{s.name.replace('_', '-')}", type=kind, help=f"{s.help} ({s.full:g})")
    p.add_argument("--runs", type=int, help="runs per figure; medians are reported (3)")
    p.add_argument("--procs", type=int, default=2, help="worker processes per system (2)")
    p.add_argument("--deadline", type=float, default=300.0, help="bound of each phase, s (300)")
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="pin nothing")
    p.add_argument("--no-setup", action="store_true", help="do not create/update bench venvs")
    p.add_argument("--keep-workdir", action="store_true", help="keep worker logs")
    args = p.parse_args(argv)
    for s in family.sizes:
        if getattr(args, s.name) is None:
            value = s.quick if args.quick else s.full
            setattr(args, s.name, int(value) if float(value).is_integer() else value)
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    return args


def select(family: Family, only: str) -> tuple[list[Entry], list[str]]:
    """Systems and raw floors named by --only (everything when empty)."""
    if not only:
        return list(family.systems), list(family.raws)
    tokens = {t.strip() for t in only.split(",") if t.strip()}
    known = {"peers", *family.raws, *(e.name for e in family.systems)}
    if tokens - known:
        raise SystemExit(f"unknown --only names: {', '.join(sorted(tokens - known))}")

    def hit(name: str, peer: bool) -> bool:  # "taskq" and "raw" also pick their -hiredis twin
        return ("peers" in tokens and peer) or any(
            name == t or name.startswith(t + "-") for t in tokens
        )

    return [e for e in family.systems if hit(e.name, not e.is_taskq)], [
        r for r in family.raws if hit(r, False)
    ]


def setup_venvs(systems: Sequence[Entry], raws: Sequence[str]) -> None:
    """Create or update the venvs the selected systems and raw floors run in."""
    venvs = {e.venv for e in systems} | {RAWS[r] for r in raws}
    if envs.PEERS_VENV in venvs:
        envs.ensure_peers()
    if envs.ARQ_VENV in venvs:
        envs.ensure_arq()
    if any(e.is_taskq for e in systems):
        envs.ensure_taskq()


@dataclass
class Session:
    """The private Redis, the subprocess runner and the results document of one family run."""

    family: Family
    args: argparse.Namespace
    workdir: Path
    server: PrivateRedis
    runner: Runner
    data: dict[str, Any] = field(default_factory=dict)

    def params(self) -> Params:
        """Sizes and bounds every agent and raw floor receives."""
        p = {s.name: getattr(self.args, s.name) for s in self.family.sizes}
        return p | {"procs": self.args.procs, "deadline": self.args.deadline}

    def _argv(self, venv: Path, mode: str, tag: str, extra: Sequence[str]) -> list[str]:
        return [
            str(envs.python_of(venv)), "-m", self.family.module, mode,
            "--redis-url", self.server.url, "--params", json.dumps(self.params()),
            "--producer-cpu", str(self.runner.producer_cpu),
            "--workdir", str(self.workdir / "work" / tag), *extra,
        ]  # fmt: skip

    def call(self, venv: Path, mode: str, tag: str, extra: Sequence[str] = ()) -> Params:
        """One bounded subprocess round from an empty Redis; its JSON result."""
        (self.workdir / "work" / tag).mkdir(parents=True, exist_ok=True)
        self.server.flush()
        log = self.workdir / "logs" / f"{tag}.log"
        timeout = 6 * self.args.deadline + 120
        result = self.runner.call(self._argv(venv, mode, tag, extra), log, timeout)
        self.server.flush()
        return result

    def probe(self, entry: Entry) -> str | None:
        """None if taskq ``entry`` can run this family, else why not (features not there yet)."""
        problem = taskq_problem(entry)
        if problem:
            return problem
        res = self.call(entry.venv, "probe", f"{entry.name}-probe", ["--module", entry.module])
        if "error" in res:
            self.runner.failures -= 1  # a taskq feature that is missing is not a failed figure
            return str(res["error"])
        return res.get("problem")


def _brief(res: Params) -> str:
    """One progress line for a result: its scalar figures."""
    if "error" in res:
        return "ERROR"
    parts = []
    for key, value in res.get("figures", {}).items():
        if isinstance(value, float):
            parts.append(f"{key} {value:,.4g}")
        elif isinstance(value, int):
            parts.append(f"{key} {value:,}")
    return "  ".join(parts)


def measure(s: Session, systems: Sequence[Entry], raws: Sequence[str]) -> None:
    """All runs: the raw floors first, then every system, then the family's extra rounds."""
    for run in range(1, s.args.runs + 1):
        head = f"run {run}/{s.args.runs}"
        for name in raws:
            res = s.call(RAWS[name], "raw", f"{name}-{run}")
            s.data["raw"][name].append(res)
            if "versions" in res:
                s.data["meta"]["systems"].setdefault(name, {})["versions"] = res["versions"]
            print(f"{head}  {name:<14} {_brief(res)}", flush=True)
        for entry in systems:
            res = s.call(entry.venv, "agent", f"{entry.name}-{run}", ["--module", entry.module])
            s.data["systems"][entry.name].append(res)
            info = s.data["meta"]["systems"].setdefault(entry.name, {})
            for key in ("versions", "worker_argv"):
                if key in res:
                    info[key] = res[key]
            print(f"{head}  {entry.name:<14} {_brief(res)}", flush=True)
        if s.family.extra is not None:
            s.family.extra(s, systems, run)


def halves_rounds(
    s: Session, systems: Sequence[Entry], run: int, env: str, halves: Sequence[str], what: str
) -> None:
    """Run ``run`` of a comparison in two halves of the family's own agent round: for each
    taskq system one fresh agent per half from an empty Redis, with ``env`` set to the half's
    name, in :func:`~bench.common.rounds.alternating` order. Kept in
    ``s.data["drain"][system][half]`` with their run and order (1: went first)."""
    head = f"run {run}/{s.args.runs}"
    for entry in (e for e in systems if e.is_taskq):
        node = s.data.setdefault("drain", {}).setdefault(entry.name, {h: [] for h in halves})
        info = s.data["meta"]["systems"].setdefault(entry.name, {})
        for order, half in enumerate(alternating(halves, run), 1):
            with environ({env: half}):
                res = s.call(entry.venv, "agent", f"{entry.name}-{half}-{run}",
                             ["--module", entry.module])  # fmt: skip
            node[half].append(res | {"run": run, "order": order})
            if res.get("worker_argv"):
                info.setdefault("worker_argv", res["worker_argv"])
            print(f"{head}  {entry.name:<14} {what} {half}: {_brief(res)}", flush=True)


def new_data(family: Family, args: argparse.Namespace) -> dict[str, Any]:
    """The family's results document, before any measurement."""
    return {
        "meta": {
            "family": family.key,
            "title": family.title,
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": f"{os.path.relpath(sys.executable, REPO)} {shlex.join(sys.argv)}",
            "machine": machine(),
            "loadavg_before": loadavg(),
            "params": {s.name: getattr(args, s.name) for s in family.sizes}
            | {"runs": args.runs, "procs": args.procs, "deadline": args.deadline},
            "labels": {n: family.label(n) for n in [*(e.name for e in family.systems), *RAWS]},
            "skipped": {},
            "systems": {},
        },
        "raw": {},
        "systems": {},
    }


def run_family(family: Family, argv: Sequence[str] | None = None) -> int:
    """The orchestrator: measure, write the family's section; 1 if a measurement failed."""
    args = parse_args(family, argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    started = time.monotonic()
    systems, raws = select(family, args.only)
    if not args.no_setup:
        setup_venvs(systems, raws)
    data = new_data(family, args)
    workdir = Path(tempfile.mkdtemp(prefix=f"taskq-bench-{family.key}-"))
    (workdir / "logs").mkdir()
    print(f"work dir {workdir}; load average {loadavg()}", flush=True)
    from bench.common.redis_server import PrivateRedis  # here: it imports taskq (not in peer venvs)

    with PrivateRedis(workdir, args.redis_server) as server:
        runner = Runner(args, server, workdir)
        s = Session(family, args, workdir, server, runner, data)
        data["meta"]["redis_version"] = server.version()
        data["meta"]["params"]["pin"] = runner.producer_cpu >= 0
        for entry in [e for e in systems if e.is_taskq]:
            problem = s.probe(entry)
            if problem:
                data["meta"]["skipped"][entry.name] = problem
                print(f"{entry.name}: not available yet ({problem})", flush=True)
                systems.remove(entry)
        data["raw"] = {name: [] for name in raws}
        data["systems"] = {e.name: [] for e in systems}
        measure(s, systems, raws)
    data["meta"]["loadavg_after"] = loadavg()
    data["meta"]["elapsed_s"] = time.monotonic() - started
    data["markdown"] = section(family, data)
    md_path, json_path = write_section(family.key, data, args.quick)
    print("\n" + data["markdown"])
    print(f"wrote the {family.key!r} section of {md_path.name} and {json_path.name}")
    if runner.failures or args.keep_workdir:
        print(f"logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if runner.failures:
        print(f"\n!!! {runner.failures} measurement(s) failed", file=sys.stderr, flush=True)
    if runner.failures:
        return 1
    return 2 if family_failed(family, json_path) else 0


def family_failed(family: Family, json_path: Path) -> bool:
    """True, with a line on stderr, if the family's own checks fail on its section as stored."""
    why = family.failed(json.loads(json_path.read_text())[family.key]) if family.failed else None
    if why:
        print(f"\n!!! {why} (see the tables)", file=sys.stderr, flush=True)
    return why is not None


def exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: agents, workers and redis-server get stopped."""
    raise SystemExit(128 + signum)


# ------------------------------------------------------------------ results file


def result_paths(quick: bool) -> tuple[Path, Path]:
    """bench/results/RESULTS-features.md and results-features.json (or their -quick variants)."""
    suffix = "-quick" if quick else ""
    return (
        envs.RESULTS / f"RESULTS-features{suffix}.md",
        envs.RESULTS / f"results-features{suffix}.json",
    )


def write_section(key: str, data: dict[str, Any], quick: bool) -> tuple[Path, Path]:
    """Store the family's data in the JSON file and rewrite the Markdown from every section."""
    md_path, json_path = result_paths(quick)
    try:
        doc = json.loads(json_path.read_text())
    except (OSError, ValueError):
        doc = {}
    doc[key] = data
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    out = [
        "# taskq feature benchmarks",
        "",
        "Each section is written by its own command and measured in one run of it, on a "
        "private `redis-server`; methodology in [README.md](../README.md#feature-benchmarks). "
        "Compare ratios within a section, not absolute figures across sections.",
    ]
    for k in ORDER:
        if k in doc and "markdown" in doc[k]:
            out += ["", doc[k]["markdown"].rstrip()]
        else:
            out += ["", f"## {k.capitalize()}", "", f"Not measured yet: `{COMMANDS[k]}`."]
    md_path.write_text("\n".join(out) + "\n")
    return md_path, json_path


def section(family: Family, data: dict[str, Any]) -> str:
    """The family's whole section: header, its tables, versions, errors."""
    meta = data["meta"]
    lines = header(meta) + [
        f"- **Note: {family.label(name)} ran without hiredis** (not installed in its venv)"
        for name, info in meta["systems"].items()
        if name.endswith("-hiredis") and not info.get("versions", {}).get("hiredis_in_use", True)
    ]
    out = [f"## {family.title}", "", *lines, "", *family.render(data)]
    out += ["", f"### {family.title}: versions and worker commands", "", versions_table(data)]
    errors = [
        f"- {family.label(name)}: {r['error']}"
        for group in ("raw", "systems")
        for name, runs in data[group].items()
        for r in runs
        if "error" in r
    ]
    if errors:
        out += ["", f"### {family.title}: errors", "", *errors]
    return "\n".join(out) + "\n"


def header(meta: dict[str, Any]) -> list[str]:
    """Date, command, machine, load, Redis, sizes, placement, what was not measured."""
    m, p = meta["machine"], meta["params"]
    sizes = ", ".join(f"{k} {_param(v)}" for k, v in p.items())
    lines = [
        f"- Date: {meta['started']} (took {meta['elapsed_s'] / 60:.1f} min)",
        f"- Command, from the repository root: `{meta['command']}`",
        f"- Machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gib']} GiB RAM, {m['os']}, "
        f"Linux {m['kernel']}; producer, workers and Redis share these cores",
        f"- Load average before / after: {meta['loadavg_before']} / {meta['loadavg_after']}",
        f"- Redis: private `redis-server` {meta.get('redis_version', '?')} on 127.0.0.1, no "
        "persistence, FLUSHALL before every measurement",
        f"- Parameters: {sizes}",
    ]
    for name, why in meta["skipped"].items():
        lines.append(f"- **{meta['labels'].get(name, name)}: not available yet** ({why})")
    return lines


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:,}" if isinstance(value, int) else str(value)


def versions_table(data: dict[str, Any]) -> str:
    """Versions and worker command of every measured system."""
    labels = data["meta"]["labels"]
    rows = []
    for name, info in data["meta"]["systems"].items():
        vers = info.get("versions", {})
        text = ", ".join(f"{k} {v}" for k, v in vers.items() if k != "hiredis_in_use" and v)
        text += f"; hiredis {'in use' if vers.get('hiredis_in_use') else 'not installed'}"
        argvs = info.get("worker_argv") or []
        cmd = " & ".join(f"`{shlex.join(a)}`" for a in argvs) or "n/a"
        rows.append([labels.get(name, name), text, cmd])
    return md_table(["system", "versions", "worker command(s)"], rows)


def ok_runs(runs: Sequence[Params]) -> list[Params]:
    """The runs that did not fail."""
    return [r for r in runs if "error" not in r]


def median_of(runs: Sequence[Params], key: str) -> float | None:
    """Median of ``run["figures"][key]`` over the runs that have it."""
    values = [r["figures"][key] for r in ok_runs(runs) if r["figures"].get(key) is not None]
    return statistics.median(values) if values else None


def label(data: dict[str, Any], name: str) -> str:
    """Display name of a system or raw floor of a results document."""
    return str(data["meta"]["labels"].get(name, name))


def not_available_rows(data: dict[str, Any], width: int) -> list[list[str]]:
    """One table row per system that could not run ("not available yet")."""
    labels = data["meta"]["labels"]
    return [
        [labels.get(name, name), "not available yet", *["n/a"] * (width - 2)]
        for name in data["meta"]["skipped"]
    ]


# ------------------------------------------------------------------ agent side


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
    p.add_argument("mode", choices=("agent", "raw", "probe"))
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


def main(family: Family, argv: Sequence[str] | None = None) -> int:
    """Entry point of a family module: orchestrator, or (first argument) agent/raw/probe."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("agent", "raw", "probe"):
        return run_family(family, argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = _agent_args(argv)
    ctx = AgentCtx(args.redis_url, json.loads(args.params), Path(args.workdir))
    os.environ["BENCH_REDIS_URL"] = args.redis_url
    os.environ[record.ENV_DIR] = str(ctx.record_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
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
