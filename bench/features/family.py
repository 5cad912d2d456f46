"""A feature benchmark family's description (:class:`Family`, :class:`Size`) and its
orchestrator.

Each family is one module with its own entry point (``bench/features/<family>_bench.py``) that
describes itself as a :class:`Family`. The same module runs three ways:

* ``python bench/features/<family>_bench.py [--quick]``: the orchestrator (here), in the
  project's venv. It sets up the bench venvs (:mod:`bench.common.envs`), starts a private
  ``redis-server`` (:mod:`bench.common.redis_server`), pins it and the producers like
  ``run.py``, runs every selected system and raw floor ``--runs`` times (each from an empty
  Redis) and writes the family's section of ``bench/results/RESULTS-features.md`` and
  ``bench/results/results-features.json`` (``-quick`` variants with ``--quick``), keeping the
  other families' sections (:mod:`bench.features.section`).
* ``python -m bench.features.<family>_bench agent --module <peer module> ...``: one system's
  round, inside that system's venv (:mod:`bench.features.agentside`); prints one JSON object
  on its last line.
* ``python -m bench.features.<family>_bench raw ...``: the family's raw redis-py floor, in
  ``.venv-peers`` (pure-Python parser) or ``.venv-taskq-hiredis`` (hiredis).

A taskq module (``bench/peers/taskq_*_app.py``) that needs a feature taskq does not
have yet says so through its ``problem()`` function; the orchestrator then reports
"taskq: not available yet" with the reason and measures everything else.

Every loop is bounded in time; worker processes are stopped in ``finally`` blocks.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import envs
from bench.common.rounds import alternating, environ
from bench.common.runner import (
    RAWS,
    Entry,
    Runner,
    exit_on_sigterm,
    loadavg,
    machine,
    taskq_problem,
)
from bench.features import agentside, section
from bench.features.agentside import AgentCtx, Params

if TYPE_CHECKING:  # imported where it is used: it imports taskq, which the peers' venvs lack
    from bench.common.redis_server import PrivateRedis

REPO = envs.REPO
RAW_LABELS = {"raw": "raw floor (redis-py)", "raw-hiredis": "raw floor (redis-py + hiredis)"}


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
    data["markdown"] = section.markdown(family, data)
    md_path, json_path = section.write_section(family.key, data, args.quick)
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


def main(family: Family, argv: Sequence[str] | None = None) -> int:
    """Entry point of a family module: orchestrator, or (first argument) agent/raw/probe."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in agentside.MODES:
        return run_family(family, argv)
    return agentside.main(family, argv)
