"""Alternating rounds: the two halves of a comparison (off and on, one server and a cluster,
plain and backlog), run back to back in the order of :func:`alternating`, so that a drift of
the machine's load does not always favour the same half; and the helpers that pair the halves
of each run again and take their medians for the report.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bench.common.procs import BenchError
from bench.common.report import div, med

Params = dict[str, Any]
Node = Mapping[str, Sequence[Params]]  # half -> its rounds, each with "run" and "order"


def alternating(halves: Sequence[str], run: int) -> tuple[str, ...]:
    """The order of run ``run`` (from 1): ``halves`` in odd runs, reversed in even ones."""
    return tuple(halves) if run % 2 else tuple(reversed(halves))


@contextlib.contextmanager
def environ(extra: Mapping[str, str]) -> Iterator[None]:
    """``extra`` in this process's environment (the workers' too) for the block."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def half_of(env: str, halves: Sequence[str]) -> str | None:
    """The half an agent round is for (``env``, set by the orchestrator), None when unset."""
    half = os.environ.get(env)
    if half and half not in halves:
        raise BenchError(f"{env}={half!r}: expected one of {', '.join(halves)}")
    return half or None


def fig(res: Params | None, key: str) -> float | None:
    """``res["figures"][key]`` of a round, None if the round failed or lacks it."""
    if res is None or "error" in res:
        return None
    value = res["figures"].get(key)
    return None if value is None else float(value)


def pairs(node: Node, halves: Sequence[str]) -> list[tuple[int, Params | None, Params | None]]:
    """(run, first half's round, second half's round) of every run, by ``halves``' order."""
    first, second = ({r["run"]: r for r in node.get(h, [])} for h in halves)
    return [(run, first.get(run), second.get(run)) for run in sorted(set(first) | set(second))]


def half_medians(node: Node, halves: Sequence[str], keys: Sequence[str]) -> Params:
    """``{half}_{key}``: the median of each half's figure over the rounds that did not fail,
    and ``{key}_ratio``: second half's median over the first's."""
    out: Params = {
        f"{h}_{k}": med([fig(r, k) for r in node.get(h, [])]) for h in halves for k in keys
    }
    for k in keys:
        out[f"{k}_ratio"] = div(out[f"{halves[1]}_{k}"], out[f"{halves[0]}_{k}"])
    return out


def errors(node: Node, halves: Sequence[str], what: str) -> list[str]:
    """One Markdown list line per failed round: ``- {what} {half}, run N: error``."""
    return [
        f"- {what} {h}, run {r['run']}: {r['error']}"
        for h in halves
        for r in node.get(h, [])
        if "error" in r
    ]
