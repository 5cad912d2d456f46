"""The peer comparison's agent rounds (:mod:`bench.compare.agent`) run as the two halves of a
feature bench's comparison (results off / on, signing off / on): each half a fresh agent from
an empty Redis, the two halves of each kind back to back in the order the caller gives, the
drain's untimed clean pass when the machine can pin, and in run 1 the untimed ``MONITOR``
accounting pass of each half that splits script time (bench/common/redistime.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from bench.common.runner import Runner

Params = dict[str, Any]
Kind = tuple[str, str, bool]  # (the node's list, the agent's --phases, the clean pass)
# (half, run, phases, clean) -> the round's result; run 0 and phases "account": the accounting
# pass
OneRound = Callable[[str, int, str, bool], Params]

ACCOUNT_JOBS = 2_000  # jobs of the untimed MONITOR accounting pass (as run.py's default)
# What Runner.agent reads from the options besides a family's own: the main bench's bulk
# batch, and the task's INCR (the standard shape); no latency or idle phase here.
AGENT_OPTIONS = {"batch": 1_000, "latency_samples": 0, "idle_seconds": 0.0, "incr": True}


def prepare(args: argparse.Namespace, runner: Runner, meta: Params) -> None:
    """Give ``args`` the options :meth:`Runner.agent` reads and note the clean pass's CPUs."""
    for key, value in AGENT_OPTIONS.items():
        vars(args).setdefault(key, value)
    meta.setdefault("clean_cpus", runner.clean_cpus)


def kinds(runner: Runner, *timed: tuple[str, str]) -> list[Kind]:
    """The timed kinds (node list, phases), then the drain's clean pass if the machine pins."""
    clean = [("clean", "drain", True)] if runner.clean_cpus else []
    return [(name, phases, False) for name, phases in timed] + clean


def new_node(halves: Sequence[str], lists: Sequence[str]) -> Params:
    """One system's results document: per half, a list per kind and its accounting pass."""
    return {h: {**{name: [] for name in lists}, "accounting": None} for h in halves}


def run_halves(
    node: Params, meta: Params, order: Sequence[str], kinds: Sequence[Kind], run: int,
    one_round: OneRound,
) -> None:  # fmt: skip
    """Run ``run`` of every kind, the halves in ``order``, kept in ``node`` with their run and
    position (1: went first); a worker command in ``meta["worker_argv"]``. In run 1 also the
    accounting pass of each half."""
    for name, phases, clean in kinds:
        for pos, half in enumerate(order, 1):
            res = one_round(half, run, phases, clean)
            node[half][name].append(res | {"run": run, "order": pos})
            if res.get("worker_argv"):
                meta.setdefault("worker_argv", {})[half] = res["worker_argv"]
    if run == 1:
        for half in order:
            res = one_round(half, 0, "account", False)
            node[half]["accounting"] = {k: res[k] for k in ("accounting", "error") if k in res}


def us_cell(c: Params | None) -> str:
    """A Redis cost's µs per job for a table, marked when script time is an upper bound."""
    if not c:
        return "n/a"
    bound = " (upper bound)" if c["split"] == "upper bound" else ""
    return f"{c['us_per_job']:.1f}{bound}"
