"""The pytest example of docs/testing.md, run as written against a private Redis."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

BLOCK = re.compile(r"```python\n# (\S+\.py)\n(.*?)```", re.DOTALL)


def test_the_documented_pytest_example_passes(redis_url: str, tmp_path: Path) -> None:
    # given: the files of the example, as the page shows them
    files = dict(BLOCK.findall((ROOT / "docs" / "testing.md").read_text()))
    assert set(files) == {"myapp/tasks.py", "tests/conftest.py", "tests/test_sign_up.py"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n{text}")

    # when: pytest runs them with the Redis URL the page asks for
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "PYTEST_"))}
    env.update(TEST_REDIS_URL=redis_url, PYTHONPATH=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=45,
    )

    # then: both tests pass, neither skipped
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout and "skipped" not in run.stdout


def test_the_plugin_section_shows_the_example_file_and_every_fixture() -> None:
    page = (ROOT / "docs" / "testing.md").read_text()
    example = (ROOT / "examples" / "test_with_taskq_plugin.py").read_text()
    plugin = ast.parse((ROOT / "taskq" / "contrib" / "pytest_plugin.py").read_text())
    fixtures = [
        f.name
        for f in plugin.body
        if isinstance(f, ast.FunctionDef)
        and any("fixture" in ast.unparse(d) for d in f.decorator_list)
    ]

    assert f"```python\n{example}```" in page
    assert len(fixtures) == 8
    assert [f for f in fixtures if f"| `{f}` |" not in page] == []
