"""The pytest examples of docs/testing.md (plain fixtures, and the plugin's), run as written
against a private Redis."""

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

BLOCK = re.compile(r"```(?:python|toml)\n# (\S+\.(?:py|toml))\n(.*?)```", re.DOTALL)
FILES = {
    "myapp/tasks.py",
    "tests/conftest.py",
    "tests/test_sign_up.py",
    "pyproject.toml",
    "tests/test_with_plugin.py",
}


def test_the_documented_examples_pass_as_a_project(redis_url: str, tmp_path: Path) -> None:
    # given: a project made of the files the page shows, as it shows them
    files = dict(BLOCK.findall((ROOT / "docs" / "testing.md").read_text()))
    assert set(files) == FILES
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n{text}")

    # when: a plain pytest runs there, with the Redis URL the first example asks for (the
    # plugin starts its own redis-server, as it does on the reader's machine)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "PYTEST_"))}
    env.pop("PYTHONPATH", None)
    env.update(TEST_REDIS_URL=redis_url)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # then: every test of both examples passes, none skipped
    assert run.returncode == 0, run.stdout + run.stderr
    assert "5 passed" in run.stdout and "skipped" not in run.stdout, run.stdout


def test_the_plugin_section_shows_every_fixture() -> None:
    page = (ROOT / "docs" / "testing.md").read_text()
    plugin = ast.parse((ROOT / "taskq" / "contrib" / "pytest_plugin.py").read_text())
    fixtures = [
        f.name
        for f in plugin.body
        if isinstance(f, ast.FunctionDef)
        and any("fixture" in ast.unparse(d) for d in f.decorator_list)
    ]

    assert len(fixtures) == 8
    assert [f for f in fixtures if f"| `{f}` |" not in page] == []
