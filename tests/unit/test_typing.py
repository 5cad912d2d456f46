"""Users' mypy checks the arguments of ``delay()`` and the task options (issue 11)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "typing" / "user_code.py"


@pytest.mark.slow
def test_mypy_reports_exactly_the_marked_errors_in_user_code() -> None:
    expected = {
        i: m.group(1)
        for i, line in enumerate(SAMPLE.read_text().splitlines(), start=1)
        if (m := re.search(r"# error: ([\w-]+)", line))
    }
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SAMPLE)],
        capture_output=True,
        text=True,
        cwd=SAMPLE.parent,
        timeout=300,
    )
    found: dict[int, set[str]] = {}
    for line in proc.stdout.splitlines():
        m = re.match(rf"{SAMPLE.name}:(\d+): error: .*\[([\w-]+)\]$", line)
        if m:
            found.setdefault(int(m.group(1)), set()).add(m.group(2))
    assert set(found) == set(expected), proc.stdout
    assert all(expected[i] in codes for i, codes in found.items()), proc.stdout
