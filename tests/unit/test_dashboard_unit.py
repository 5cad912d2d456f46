"""The dashboard's pure parts, without Redis: charts, timeline, dead-letter matching, and
the CLI without the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from taskq.dashboard import INSTALL_HINT, require_extra
from taskq.dashboard.charts import HEIGHT, failure_chart, throughput_chart
from taskq.dashboard.views import timeline
from taskq.deadletter import Deadletter
from taskq.errors import ConfigError
from taskq.ops.deadletters import matches
from taskq.ops.throughput import Minute, Throughput
from taskq.results import AttemptError, JobStatus
from tests.conftest import ROOT


def hour(*counts: tuple[int, int]) -> Throughput:
    pad = [(0, 0)] * (60 - len(counts))
    rows = [Minute(i * 60_000, p, f, f, 0) for i, (p, f) in enumerate([*pad, *counts])]
    return Throughput(3_600_000, tuple(rows))


def test_throughput_bars_stack_failures_on_successes() -> None:
    chart = throughput_chart(hour((30, 10), (0, 0), (40, 0)))
    ok, failed, last = chart.bars
    assert (ok.kind, failed.kind, last.kind) == ("ok", "failed", "ok")
    assert last.height == HEIGHT and last.y == 0  # the peak fills the chart
    assert failed.y + failed.height == ok.y  # on top of the successes
    assert chart.top_label == "40/min" and "30 succeeded, 10 failed (2 min ago)" in ok.title


def test_failure_chart_skips_minutes_without_runs() -> None:
    chart = failure_chart(hour((3, 1), (0, 0), (0, 2)))
    points = chart.points.split()
    assert len(points) == 2 and points[0].endswith(f",{HEIGHT - HEIGHT / 4}")
    assert points[1].endswith(",0.0")  # every run failed
    assert throughput_chart(hour()).bars == ()


def test_timeline_orders_the_jobs_moments() -> None:
    err = AttemptError(1, "ValueError", "bad", "tb", "w", 2_000)
    status = JobStatus(
        "j",
        "succeeded",
        True,
        enqueued_ms=1_000,
        started_ms=3_000,
        finished_ms=4_000,
        attempts=2,
        errors=(err,),
    )
    assert timeline(status) == [
        (1_000, "enqueued"),
        (2_000, "attempt 1 failed: ValueError"),
        (3_000, "attempt 2 started"),
        (4_000, "succeeded"),
    ]


def test_deadletter_search_matches_task_and_error_case_blind() -> None:
    job = Deadletter(
        "1-0", "app.Sync", "j", b"", "ConnectionError", "CRM refused", "", 1, 0, 0, "", "", ""
    )
    assert matches(job) and matches(job, task="sync", error="connectionerror: crm")
    assert not matches(job, task="email") and not matches(job, error="timeout")


def test_without_the_extra_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from taskq.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "starlette" else real(name)
    )
    with pytest.raises(ConfigError, match="pip install 'taskq\\[dashboard\\]'"):
        require_extra()
    result = CliRunner().invoke(main, ["dashboard"])
    assert result.exit_code == 1 and INSTALL_HINT in result.output


def test_taskq_and_its_cli_do_not_import_the_extra() -> None:
    code = (
        "import sys, taskq, taskq.cli, taskq.dashboard; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'jinja2', 'uvicorn'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_dashboard_help() -> None:
    from taskq.cli import main

    result = CliRunner().invoke(main, ["dashboard", "--help"])
    assert result.exit_code == 0
    for flag in ("--host", "--port", "--read-only", "--prefix", "--token", "--basic-auth"):
        assert flag in result.output
