"""The regression guard: fails loudly when a target that passed turns FAIL by more than the
run-to-run spread.

Usage, from the repository root (stdlib + redis-py, like run.py)::

    .venv/bin/python bench/run.py --check                       # the same as below
    .venv/bin/python -m bench.compare.guard [--latest FILE] [--baseline FILE|git:REV]

It re-evaluates the targets of ``targets.py`` (today's thresholds) on two results files of
``run.py``: the latest (default ``bench/results/results.json``) and a baseline (default
``git:HEAD``, the same file as last committed), and the results family's drain target
(``features/results_drain.py``) on the two ``results-features.json`` alike. A target's
**spread** is how far its value moves from one run to the next: the targets are evaluated on
each run of the latest file alone, and the spread is (max - min) / median of those values (at
least ``MIN_SPREAD``; the results family's: of each run's own on / off ratio). A target that
passed in the baseline and fails in the latest by more than its spread (relative to the
limit) is a **REGRESSION**: one ``!!! REGRESSION`` line each on stderr, exit status 1. A
failure within the spread is reported as noise (exit status 0); so is a target the baseline
did not have, or that failed there already.

The targets are ratios, but not ones a machine's speed leaves alone: the same tree has drained
at 90 % of the queue floor on one machine and 72 % on one three times as fast, and enqueued
at 112 % and 75 % of one raw floor on one machine an hour apart, as ``import redis`` went
from 110 to 164 ms. So the guard first compares the two runs' raw floors (``consume_floor``:
Redis and redis-py only, no taskq code) and their ``import redis`` times (the interpreter's
speed alone): when either is farther apart than the latest run's own spread of it, the
baseline ran on another machine, and a target that would have regressed is reported as
**UNJUDGED** instead, with the command that measures the baseline's tree against this one on
this machine; one ``!!! UNJUDGED`` line each on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import envs
from bench.compare.run import SYSTEMS, summarize
from bench.features import results_drain

Key = tuple[str, str]  # (taskq variant, target)

MIN_SPREAD = 0.02  # a target that held in every stored run still gets this much slack
MIN_MACHINE_SPREAD = 0.10
"""How far two runs' raw floors, or their ``import redis`` times, may be apart and still count
as one machine, at least: a quiet machine's move a few per cent from run to run, a shared
one's more."""
AB_COMMAND = (
    "git worktree add ../wt/baseline {rev} && .venv/bin/python -m bench.compare.ab_drain "
    "--checkout ../wt/baseline --checkout . [--worker-args ...]"
)
"""Measures the drain rows of the baseline's tree and this one, alternating, on one machine."""
RUN_LISTS = ("raw", "systems", "prefetch", "startup", "clean")  # lists that hold one item a run


def load(source: str, name: str = "results.json") -> dict[str, Any]:
    """A results document from a file, or ``git:REV`` (the committed file ``name`` of
    bench/results at REV)."""
    if source.startswith("git:"):
        rel = (envs.RESULTS / name).relative_to(envs.REPO)
        text = subprocess.run(
            ["git", "show", f"{source[4:]}:{rel}"],
            cwd=envs.REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return dict(json.loads(text))
    return dict(json.loads(Path(source).read_text()))


def evaluate(data: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    """(variant, target) → its row, with today's thresholds, from the runs' medians."""
    names = set(data["systems"])
    rows = summarize(data, [e for e in SYSTEMS if e.name in names])["targets"]
    return {(variant, t["target"]): t for variant, ts in rows.items() for t in ts}


def _one_run(node: Any, index: int) -> Any:
    """``node`` with every per-run list cut to its ``index``-th run (empty if it has none)."""
    if isinstance(node, list):
        return node[index : index + 1]
    if isinstance(node, dict):
        return {k: _one_run(v, index) for k, v in node.items()}
    return node


def spreads(data: dict[str, Any]) -> dict[Key, float]:
    """Each target's relative run-to-run spread in ``data``: (max - min) / median of its value
    evaluated on each run alone."""
    values: dict[Key, list[float]] = {}
    for index in range(int(data["meta"]["params"]["runs"])):
        alone = copy.copy(data)
        for part in RUN_LISTS:
            if part in data:
                alone[part] = _one_run(data[part], index)
        for key, row in evaluate(alone).items():
            if row["value"] is not None:
                values.setdefault(key, []).append(float(row["value"]))
    return {
        key: max(MIN_SPREAD, (max(vs) - min(vs)) / abs(statistics.median(vs) or 1.0))
        for key, vs in values.items()
    }


def features(data: dict[str, Any]) -> tuple[dict[Key, dict[str, Any]], dict[Key, float]]:
    """The feature bench's targets (results-features.json) and their spreads: the drain with
    results on vs off, the median of each run's own ratio (bench/features/results_drain.py)."""
    rows, spread = {}, {}
    for variant, node in ((data.get("results") or {}).get("drain") or {}).items():
        ratios = [r for r in results_drain.per_run_ratios(node) if r is not None]
        if not ratios:
            continue
        value = statistics.median(ratios)
        key = (variant, "drain with results on vs off")
        rows[key] = {"value": value, "limit": results_drain.DRAIN_VS_OFF, "kind": "min",
                     "need": f">= {results_drain.DRAIN_VS_OFF:.0%}",
                     "pass": value >= results_drain.DRAIN_VS_OFF}  # fmt: skip
        spread[key] = max(MIN_SPREAD, (max(ratios) - min(ratios)) / value)
    return rows, spread


def floor_rates(data: dict[str, Any]) -> list[float]:
    """The raw floor's rate in each run of ``data`` (none if the run did not measure it)."""
    runs = (data.get("raw") or {}).get("raw") or []
    return [float(r["consume_floor"]["rate"]) for r in runs if r.get("consume_floor")]


def import_redis_s(data: dict[str, Any]) -> list[float]:
    """``python -c "import redis"`` in each run of ``data``, seconds (the ``taskq`` row's
    start-up section; none if the run did not measure it)."""
    runs = (data.get("startup") or {}).get("taskq") or []
    return [float(r["median_s"]["import_redis"]) for r in runs if "import_redis" in r["median_s"]]


def _apart(what: str, before: list[float], now: list[float], unit: str) -> str | None:
    """Why ``what`` says the two runs' machines differ: its medians farther apart than the
    latest run's spread of it (at least ``MIN_MACHINE_SPREAD``); None if they are not, or if
    either run lacks it."""
    if not before or not now:
        return None
    median_before, median_now = statistics.median(before), statistics.median(now)
    spread = max(MIN_MACHINE_SPREAD, (max(now) - min(now)) / median_now)
    ratio = median_now / median_before
    if abs(ratio - 1) <= spread:
        return None
    return (
        f"{what} {median_before:,.3g} -> {median_now:,.3g} {unit} ({ratio:.2f}x, past its "
        f"spread of {100 * spread:.0f} %)"
    )


def machine_apart(baseline: dict[str, Any], latest: dict[str, Any]) -> str | None:
    """Why the two runs' machines differ, if they do: the raw floor (Redis, the socket and
    redis-py's reads) or the time ``import redis`` takes (the interpreter's own speed, which
    moves every ratio of taskq's Python work to a floor of round trips) moved past the latest
    run's spread of it."""
    found = [
        _apart("the raw floor", floor_rates(baseline), floor_rates(latest), "messages/s"),
        _apart("`import redis`", import_redis_s(baseline), import_redis_s(latest), "s"),
    ]
    return "; ".join(f for f in found if f) or None


def miss(row: dict[str, Any]) -> float:
    """How far a failing value is past its limit, relative to the limit (0 when it passes)."""
    value, limit = float(row["value"]), float(row["limit"])
    past = limit - value if row["kind"] == "min" else value - limit
    return max(0.0, past / limit)


def verdicts(
    baseline: dict[Key, dict[str, Any]],
    latest: dict[Key, dict[str, Any]],
    spread: dict[Key, float],
    other_machine: bool = False,
) -> list[tuple[str, Key, str]]:
    """(verdict, key, text) per target of the latest run; verdict REGRESSION (UNJUDGED when
    the baseline ran on ``other_machine``), noise, FAIL (failed before too, or new), PASS or
    n/a."""
    out = []
    for key, row in latest.items():
        before = baseline.get(key, {}).get("pass")
        s = spread.get(key, MIN_SPREAD)
        if row["pass"] is None:
            out.append(("n/a", key, "not measured"))
            continue
        shown = f"value {row['value']:.3g} need {row['need']}, spread {100 * s:.1f} %"
        if row["pass"]:
            out.append(("PASS", key, shown))
        elif before is True and miss(row) > s:
            verdict = "UNJUDGED" if other_machine else "REGRESSION"
            out.append((verdict, key, f"{shown}: missed by {100 * miss(row):.1f} %"))
        elif before is True:
            out.append(("noise", key, f"{shown}: missed by {100 * miss(row):.1f} %, within"))
        else:
            out.append(("FAIL", key, f"{shown} (failed in the baseline too, or new there)"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print every target's verdict and spread; exit status 1 if any regressed, 2 if any
    would have but the baseline ran on another machine."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--latest", default=str(envs.RESULTS / "results.json"))
    p.add_argument("--baseline", default="git:HEAD", help="a results.json, or git:REV")
    p.add_argument("--latest-features", default=str(envs.RESULTS / "results-features.json"))
    p.add_argument(
        "--baseline-features", default="git:HEAD", help="a results-features.json, or git:REV"
    )
    args = p.parse_args(argv)
    latest_data, baseline_data = load(args.latest), load(args.baseline)
    latest, spread = evaluate(latest_data), spreads(latest_data)
    baseline = evaluate(baseline_data)
    f_latest, f_spread = features(load(args.latest_features, "results-features.json"))
    f_baseline, _ = features(load(args.baseline_features, "results-features.json"))
    apart = machine_apart(baseline_data, latest_data)
    if apart:
        print(f"machine    the baseline ran on another machine: {apart}")
    found = verdicts(baseline | f_baseline, latest | f_latest, spread | f_spread, bool(apart))
    for verdict, (variant, target), text in found:
        print(f"{verdict:<10} {variant:<14} {target}: {text}")
    for verdict, (variant, target), text in found:
        if verdict in ("REGRESSION", "UNJUDGED"):
            print(f"!!! {verdict}: {variant}: {target}: {text}", file=sys.stderr)
    if any(f[0] == "REGRESSION" for f in found):
        return 1
    if any(f[0] == "UNJUDGED" for f in found):
        rev = args.baseline[4:] if args.baseline.startswith("git:") else "<its commit>"
        command = AB_COMMAND.format(rev=rev)
        print(f"!!! to judge them, measure both trees here; the drains: {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
