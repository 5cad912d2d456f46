"""The feature benches' results file and the parts of a family's section that every family
shares: header, versions table, errors, the per-system medians, and the "vs best peer" lines.

``bench/results/RESULTS-features.md`` holds one section per family, in :data:`ORDER`; each
family's command rewrites its own section (``results-features.json`` keeps the data of all)
and the Markdown is written again from every section stored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import envs
from bench.common.report import best, md_table, vs_line

if TYPE_CHECKING:
    from bench.features.family import Family

Params = dict[str, Any]
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
    "resumable",
    "telemetry",
    "fair",
)
COMMANDS = {key: f".venv/bin/python bench/features/{key}_bench.py" for key in ORDER}


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


# -- a standalone feature bench (one script, its own measurements; not a peer family) -----


def bench_parser(doc: str) -> argparse.ArgumentParser:
    """The options every standalone bench takes (``--quick``, ``--jobs``, ``--runs``), for it
    to add its own to; described by the first line of its docstring."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--runs", type=int)
    return parser


def sizes(args: argparse.Namespace, quick_jobs: int, full_jobs: int = 20_000) -> tuple[int, int]:
    """Jobs and runs: ``--jobs`` / ``--runs``, else ``quick_jobs`` and 1 run with ``--quick``,
    ``full_jobs`` and 3 runs without."""
    jobs = args.jobs or (quick_jobs if args.quick else full_jobs)
    return jobs, args.runs or (1 if args.quick else 3)


@contextlib.contextmanager
def private_redis(key: str) -> Iterator[str]:
    """The URL of a private ``redis-server`` (no persistence) in a temporary directory, both
    gone on exit. taskq is imported here, once the bench has put the tree on ``sys.path``."""
    from taskq.ops.devserver import RedisServer

    with (
        tempfile.TemporaryDirectory(prefix=f"{key}-bench-") as data,
        RedisServer(Path(data), appendonly=False) as server,
    ):
        yield server.url


def new_result(key: str, quick: bool, load: tuple[float, float, float]) -> dict[str, Any]:
    """The start of a bench's results: its command, the date, the load average ``load``
    (taken before the bench starts anything)."""
    return {
        "command": f"bench/features/{key}_bench.py" + (" --quick" if quick else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": load,
    }


def finish(
    key: str, result: dict[str, Any], quick: bool, render: Callable[[dict[str, Any]], str]
) -> int:
    """Add the load average at the end and the Markdown ``render`` makes of the results,
    write the bench's section, print it and where it went; the exit status (0)."""
    result["load_end"] = os.getloadavg()
    result["markdown"] = render(result)
    md, js = write_section(key, result, quick)
    print(result["markdown"])
    print(f"wrote {md} and {js}")
    return 0


def markdown(family: Family, data: dict[str, Any]) -> str:
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


def vs_best_peer(
    data: dict[str, Any], name: str, key: str, what: str, peers: Sequence[str], highest: bool
) -> str | None:
    """``- {system} {what} vs best peer ({peer}): {ratio}``: system ``name``'s median of
    ``key`` over the best median among ``peers`` (the highest, or the lowest); None when no
    peer has one."""
    found = best({p: median_of(data["systems"].get(p, []), key) for p in peers}, highest)
    if found is None:
        return None
    peer, value = found
    mine = median_of(data["systems"][name], key)
    return vs_line(label(data, name), what, f"best peer ({peer})", mine, value)
