"""Start-up of the ``taskq`` command and of ``import taskq``, as ratios of a bare
``python -c "import redis"`` in the same interpreter and the same run.

Run inside a venv that has taskq (``run.py`` runs it in each taskq variant's venv, once per
run)::

    .venv/bin/python -m bench.compare.startup [--rounds 11]

Each round starts, one after the other, the three commands below (their order rotates from one
round to the next, so slow drift in the machine's load hits each alike) and times each from
spawn to exit. The result is the median of each over the rounds, and each taskq command's
median as a ratio of ``import redis``'s; the last stdout line is JSON.

taskq's bytecode is compiled first (``compileall``), as installing a wheel does: a checkout
run with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile every taskq module from
source at each start, while redis-py's bytecode was written when pip installed it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# name → command line, run in this interpreter's venv
COMMANDS: dict[str, list[str]] = {
    "import_redis": [sys.executable, "-c", "import redis"],
    "import_taskq": [sys.executable, "-c", "import taskq"],
    "taskq_version": [sys.executable, "-m", "taskq", "--version"],
}
BASE = "import_redis"


def compile_bytecode() -> None:
    """Write taskq's and the bench's bytecode, as a wheel install would have."""
    for folder in ("taskq", "bench"):
        compileall.compile_dir(REPO / folder, quiet=1)


def time_once(argv: list[str]) -> float:
    """Seconds from spawn to exit of one command (which must succeed)."""
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, timeout=60)
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, Any]:
    """Median seconds of each command over ``rounds`` rotated rounds, and the ratios."""
    names = list(COMMANDS)
    for name in names:  # untimed: the page cache, and the bytecode of every module
        time_once(COMMANDS[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(time_once(COMMANDS[name]))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "rounds": rounds,
        "median_s": medians,
        "spread_s": {name: [min(ts), max(ts)] for name, ts in times.items()},
        "ratio": {name: medians[name] / medians[BASE] for name in names if name != BASE},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=11, help="rounds; medians are reported (11)")
    args = p.parse_args(argv)
    compile_bytecode()
    result = measure(args.rounds)
    for name, seconds in result["median_s"].items():
        ratio = result["ratio"].get(name)
        shown = f"  {ratio:.2f}x {BASE}" if ratio is not None else ""
        print(f"{name:<14} {1000 * seconds:7.1f} ms{shown}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
