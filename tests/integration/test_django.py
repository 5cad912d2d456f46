"""Django (issue 20): a view enqueues on commit only; a real worker runs the job with the ORM.

The project is tests/django_project on a SQLite file of the test's own. Its web side runs in
processes of its own (tests/django_project/drive.py): ``django.setup()`` lasts as long as a
process, and this one runs the rest of the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from taskq import App
from tests.conftest import ROOT, WorkerProcess, wait_until, worker_env

pytestmark = pytest.mark.integration

PROJECT = ROOT / "tests" / "django_project"
SETTINGS = "tests.django_project.settings"


def project_env(redis_url: str, db: Path, **extra: str) -> dict[str, str]:
    # TASKQ_QUEUE says "elsewhere"; settings.TASKQ says "notes" and wins.
    env = {"DJANGO_SETTINGS_MODULE": SETTINGS, "DJANGO_TEST_DB": str(db), **extra}
    return worker_env(redis_url, TASKQ_QUEUE="elsewhere", **env)


def drive(env: dict[str, str], *steps: str) -> list[dict[str, Any]]:
    """Run steps of the web side (tests/django_project/drive.py); their JSON results."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.django_project.drive", *steps],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def notes(db: Path) -> dict[str, tuple[str, int | None, int | None]]:
    """text -> (status, worker_pid, fresh_connection), read without Django."""
    with contextlib.closing(sqlite3.connect(db)) as c:
        rows = c.execute("SELECT text, status, worker_pid, fresh_connection FROM notes_note")
        return {text: (status, pid, fresh) for text, status, pid, fresh in rows}


@pytest.fixture
def manage_py(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``python tests/django_project/manage.py ...`` as a process group of its own."""
    started: list[tuple[subprocess.Popen[bytes], Any]] = []

    def start(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"manage-{len(started)}.log", "ab")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "manage.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append((proc, log))
        return proc

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


@pytest.mark.parametrize("started_by", ["taskq worker -A", "manage.py taskq_worker"])
def test_a_view_enqueues_on_commit_only_and_a_worker_runs_the_job_with_the_orm(
    started_by: str,
    redis_url: str,
    r: redis.Redis,
    tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
    manage_py: Callable[..., subprocess.Popen[bytes]],
    make_app: Callable[..., App],
) -> None:
    db = tmp_path / "notes.sqlite3"
    env = project_env(redis_url, db)

    # when: a view's transaction rolls back after delay_on_commit; another's commits; a
    # third view enqueues on commit outside a transaction (autocommit)
    _, rolled_back, committed, at_once = drive(env, "migrate", "rollback", "commit", "autocommit")

    # then: the rollback sent nothing (no stream at all) and left no row
    assert rolled_back == {"status": 409, "rolled_back": True, "streams": {}}
    # the commit sent exactly one job, to the queue settings.TASKQ names (not TASKQ_QUEUE's)
    assert committed["status"] == 201 and committed["streams"] == {"notes:normal": 1}
    # and outside a transaction the job went at once (before the response), as asked
    assert at_once["status"] == 201
    assert at_once["streams"] == {"notes:high": 1, "notes:normal": 1}
    assert r.xlen("notes:normal") == 1 and r.xlen("notes:high") == 1
    assert {text: status for text, (status, _, _) in notes(db).items()} == {
        "kept": "new",  # the rolled back note is not there; nothing ran yet
        "at once": "new",
    }

    # when: a worker of the project starts, one way or the other
    if started_by == "taskq worker -A":
        start_worker("-A", "taskq.contrib.django", "-c", "1", **env)
    else:
        env.pop("DJANGO_SETTINGS_MODULE")  # manage.py sets it
        manage_py(env, "taskq_worker", "-c", "1")

    # then: it runs both jobs with the ORM, each on a connection of its own
    def done() -> Any:
        found = notes(db)
        return found if all(status == "done" for status, _, _ in found.values()) else None

    found = wait_until(done, message="both notes processed")
    assert set(found) == {"kept", "at once"}
    pids = {pid for _, pid, _ in found.values()}
    assert len(pids) == 1 and os.getpid() not in pids  # the worker's one child ran both
    assert [fresh for _, _, fresh in found.values()] == [1, 1]  # closed after each job
    app = make_app()
    assert app.job(at_once["job_id"], queue="notes").result(timeout=10) == "processed at once"


def test_the_middleware_never_closes_a_connection_it_does_not_own(
    redis_url: str, tmp_path: Path
) -> None:
    env = project_env(redis_url, tmp_path / "notes.sqlite3")

    _, forked, drained = drive(env, "migrate", "fork", "drain_in_a_transaction")

    # a connection open before a fork: dropped in the child, still working in the parent
    assert forked == {"child_exit": 0, "parent_kept": True, "parent_count": 0, "streams": {}}
    # drain() inside a transaction (a TestCase): the job ran on it, and it stayed open
    assert {k: drained[k] for k in ("ran", "seen", "kept")} == {
        "ran": ["ok"],
        "seen": "done",
        "kept": True,
    }


def test_manage_py_taskq_worker_takes_the_options_of_taskq_worker(
    redis_url: str, tmp_path: Path
) -> None:
    env = project_env(redis_url, tmp_path / "notes.sqlite3")
    env.pop("DJANGO_SETTINGS_MODULE")
    manage = [sys.executable, str(PROJECT / "manage.py"), "taskq_worker"]

    shown = subprocess.run([*manage, "--help"], env=env, capture_output=True, text=True)
    wrong = subprocess.run([*manage, "--bogus"], env=env, capture_output=True, text=True)

    assert shown.returncode == 0, shown.stderr
    assert "Usage: manage.py taskq_worker [OPTIONS]" in shown.stdout
    assert "--concurrency" in shown.stdout
    assert wrong.returncode == 2 and "No such option" in wrong.stderr and "--bogus" in wrong.stderr


def test_taskq_worker_without_django_settings_says_so_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [sys.executable, "-m", "taskq", "worker", "-A", "taskq.contrib.django"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "Error: Django is not configured: set DJANGO_SETTINGS_MODULE (e.g. mysite.settings), "
        "or start the worker with manage.py taskq_worker"
    ]
