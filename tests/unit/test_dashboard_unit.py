"""The dashboard's pure parts, without Redis: charts, timeline, dead-letter matching, and
the CLI without the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    for flag in ("--read-only", "--prefix", "--token-file", "--basic-auth-file"):
        assert flag in result.output


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--basic-auth", "ops:"], "USER:PASSWORD, both non-empty"),
        (["--basic-auth-file", "{file}"], "USER:PASSWORD, both non-empty"),
        (["--token", "t", "--token-file", "{file}"], "give --token or --token-file, not both"),
    ],
)
def test_dashboard_refuses_bad_secrets(tmp_path: Path, args: list[str], error: str) -> None:
    from taskq.cli import main

    secret = tmp_path / "secret"
    secret.write_text(":pw\n")
    args = [a.format(file=secret) for a in args]
    result = CliRunner().invoke(main, ["dashboard", "--port", "1", *args])
    assert result.exit_code != 0 and error in result.output, result.output


def _post_endless_body(headers: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    """POST a purge with a body of 64 KiB chunks that goes on for 64 MiB, straight through
    ASGI (no Redis is reached: the form is refused first); returns the status and how many
    body bytes the dashboard took."""
    import asyncio

    from taskq import App
    from taskq.dashboard import asgi

    chunk, taken, status = b"a" * 65_536, [0], [0]

    async def receive() -> dict[str, object]:
        taken[0] += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": taken[0] < 64 << 20}

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            status[0] = int(message["status"])  # type: ignore[call-overload]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/deadletters/tasks/purge",
        "raw_path": b"/deadletters/tasks/purge",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *headers],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1),
    }
    asyncio.run(asgi(App("redis://127.0.0.1:1/0"))(scope, receive, send))  # type: ignore[arg-type]
    return status[0], taken[0]


def test_a_form_past_the_limit_is_refused_before_it_is_read() -> None:
    from taskq.dashboard.actions import MAX_FORM_BYTES

    # Declared too large: refused unread.
    status, taken = _post_endless_body([(b"content-length", b"%d" % (64 << 20))])
    assert (status, taken) == (413, 0)
    # Not declared (chunked): refused once the limit is passed.
    status, taken = _post_endless_body([])
    assert status == 413 and taken <= MAX_FORM_BYTES + 65_536
