"""The flow-control examples of docs/unique.md (keep last, debounce), docs/tasks.md
(batching by key) and docs/fairness.md (fair queues) run as written, each a program of its
own on a private Redis."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

BLOCK = re.compile(r"```python\n# (\S+_example\.py)\n(.*?)```", re.DOTALL)
PAGES = {
    "unique.md": {"keep_last_example.py", "debounce_example.py", "debounce_default_example.py"},
    "tasks.md": {"batching_example.py"},
    "fairness.md": {"fair_example.py"},
}
EXAMPLES = [
    (page, name, text)
    for page in PAGES
    for name, text in BLOCK.findall((ROOT / "docs" / page).read_text())
    if name in PAGES[page]
]


def test_every_flow_control_example_is_found() -> None:
    assert {(page, name) for page, name, _ in EXAMPLES} == {
        (page, name) for page, names in PAGES.items() for name in names
    }


@pytest.mark.parametrize(("page", "name", "text"), EXAMPLES, ids=[e[1] for e in EXAMPLES])
def test_the_example_runs_as_written(
    page: str, name: str, text: str, redis_url: str, tmp_path: Path
) -> None:
    # given: the example as its page shows it, and the Redis its App reads from the environment
    (tmp_path / name).write_text(f"# {name}\n{text}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "PYTEST_"))}
    env.update(TASKQ_REDIS_URL=redis_url)

    # when
    run = subprocess.run(
        [sys.executable, name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )

    # then: its assertions hold
    assert run.returncode == 0, f"docs/{page} {name}:\n{run.stdout}{run.stderr}"
