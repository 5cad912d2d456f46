"""The example of docs/tasks.md ("Argument types") runs as written (eager mode: no Redis)."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "tasks.md"


def test_the_argument_types_example_runs(tmp_path: Path) -> None:
    block = re.search(r"```python\n# argtypes_example.py\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert block is not None
    path = tmp_path / "argtypes_example.py"
    path.write_text(block.group(1))
    sys.path.insert(0, str(tmp_path))  # (the dataclass's module must be importable)
    try:
        runpy.run_path(str(path), run_name="argtypes_example")
    finally:
        sys.path.remove(str(tmp_path))
