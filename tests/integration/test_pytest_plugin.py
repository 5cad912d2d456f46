"""taskq's pytest plugin, used by a small user test suite that pytester runs: against a private
redis-server the plugin starts, eager, with a real worker process, and not at all."""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.integration

# The plugin is loaded by module name; `no:taskq` keeps the entry point (once installed) from
# loading it a second time under its entry-point name, which pytest refuses. Hypothesis's
# plugin imports all of hypothesis at the end of a session (over a second), for nothing here.
PLUGIN = ("-p", "no:taskq", "-p", "taskq.contrib.pytest_plugin", "-p", "no:hypothesispytest")
# Warnings are errors, but for pytest's note that it cannot rewrite the asserts of the plugin
# module: in-process, the outer suite has imported it already.
STRICT = ("-W", "error", "-W", "ignore::pytest.PytestAssertRewriteWarning")

USER_APP = """
import os

from taskq import App

app = App()
ran: list[int] = []


@app.task
def add(a: int, b: int) -> None:
    ran.append(a + b)


@app.task(store_result=True)
def multiply(a: int, b: int) -> tuple[int, int]:
    return a * b, os.getpid()


@app.task
def fails() -> None:
    raise RuntimeError("boom")
"""

INI = "[pytest]\ntaskq_app = myapp:app\n"


@pytest.fixture(autouse=True)
def no_taskq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs see none of the outer suite's TASKQ_* variables (an outer
    TASKQ_TEST_REDIS_URL, say): each test gives them what it means them to use."""
    for name in [n for n in os.environ if n.startswith("TASKQ_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def user_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(myapp=USER_APP)
    pytester.makeini(INI)
    return pytester


def run(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> pytest.RunResult:
    """pytest on the user's suite with the plugin, its temporary files in ``tmp``."""
    runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    return runner(*PLUGIN, f"--basetemp={pytester.path / 'tmp'}", *args)


def servers_started(pytester: pytest.Pytester) -> list[str]:
    """The data folders of the redis-servers the plugin started in the inner runs."""
    return [p.name for p in pytester.path.glob("tmp/taskq-redis[0-9]*")]


def test_enqueue_and_drain_against_a_private_redis(user_project: pytest.Pytester) -> None:
    user_project.makepyfile(
        test_drain="""
        import myapp

        def test_drain_runs_the_job(taskq_app, taskq_drain, taskq_redis_url):
            assert taskq_app.settings.redis_url == taskq_redis_url
            assert ":6379" not in taskq_redis_url
            myapp.add.delay(2, 3)
            myapp.add.delay(4, 5)

            result = taskq_drain()

            assert (result.ok, result.dead) == (2, 0)
            assert myapp.ran == [5, 9]

        def test_a_failing_job_is_retried_then_dead_lettered(taskq_app, taskq_drain):
            myapp.fails.delay()

            result = taskq_drain(wait_for_retries=True)

            assert [o.kind for o in result.outcomes] == ["retry", "retry", "dead"]
            assert result.of_task("myapp.fails")[0].error == "boom"
        """
    )

    result = run(user_project, *STRICT)

    result.assert_outcomes(passed=2)
    assert len(servers_started(user_project)) == 1  # one server for the session


def test_the_database_is_emptied_between_tests(user_project: pytest.Pytester) -> None:
    user_project.makepyfile(
        test_flush="""
        import myapp

        def test_leaves_a_job_behind(taskq_app):
            myapp.add.delay(1, 1)
            assert taskq_app.reader.queue("tasks").streams[1].waiting == 1

        def test_finds_nothing(taskq_app, taskq_drain):
            assert taskq_drain().runs == 0
            assert myapp.ran == []
        """
    )

    run(user_project).assert_outcomes(passed=2)


def test_an_eager_test_runs_tasks_inline_and_starts_no_redis(user_project: pytest.Pytester) -> None:
    user_project.makepyfile(
        test_eager="""
        import pytest

        import myapp

        @pytest.mark.taskq(eager=True)
        def test_eager(taskq_app):
            job = myapp.multiply.delay(6, 7)
            myapp.add.delay(1, 2)

            assert taskq_app.settings.eager
            assert myapp.ran == [3]
            assert job.result()[0] == 42
            with pytest.raises(RuntimeError, match="boom"):
                myapp.fails.delay()

        @pytest.mark.taskq(eager=True)
        def test_drain_has_nothing_to_do(taskq_drain):
            pass
        """
    )

    result = run(user_project, "--strict-markers")

    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*taskq_drain: the app is eager*"])
    assert servers_started(user_project) == []


@pytest.mark.slow
def test_a_worker_process_runs_the_job_and_stops_warm(user_project: pytest.Pytester) -> None:
    user_project.makepyfile(
        test_worker="""
        import os

        import pytest

        import myapp

        def test_worker_returns_the_result(taskq_app, taskq_worker):
            job = myapp.multiply.delay(6, 7)

            product, pid = job.result(timeout=10)

            assert product == 42
            assert pid not in (os.getpid(), taskq_worker.pid)  # one of its children
            state = taskq_worker.wait_for_jobs(1)
            assert (state.pid, state.processed, state.failed) == (taskq_worker.pid, 1, 0)
            assert state.queues == ("tasks",)
            taskq_worker.wait_idle()
            assert "-A myapp:app" in " ".join(taskq_worker.proc.args)

        @pytest.mark.taskq(max_retries=0)
        def test_the_marker_reaches_the_worker(taskq_worker):
            myapp.fails.delay()

            state = taskq_worker.wait_for_jobs(1)

            assert (state.dead, state.retried) == (1, 0)
        """
    )

    result = run(user_project, *STRICT)

    result.assert_outcomes(passed=2)
    logs = sorted(user_project.path.glob("tmp/taskq-worker[0-9]*/worker.log"))
    assert len(logs) == 2
    assert all("stopped (warm shutdown)" in log.read_text() for log in logs)


def test_an_existing_redis_by_option(user_project: pytest.Pytester, redis_url: str) -> None:
    user_project.makepyfile(
        test_external=f"""
        import myapp

        def test_uses_it(taskq_app, taskq_redis_url, taskq_drain):
            assert taskq_redis_url == {redis_url!r}
            myapp.add.delay(1, 2)
            assert taskq_drain().ok == 1
        """
    )

    result = run(user_project, "--taskq-redis-url", redis_url)

    result.assert_outcomes(passed=1)
    assert servers_started(user_project) == []


def test_the_app_by_option_and_a_missing_app(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        myapp=USER_APP,
        test_app="""
        def test_app(taskq_app):
            assert taskq_app.registered() == ["myapp.add", "myapp.fails", "myapp.multiply"]
        """,
    )

    run(pytester, "--taskq-app", "myapp").assert_outcomes(passed=1)
    missing = run(pytester)
    missing.assert_outcomes(errors=1)
    missing.stdout.fnmatch_lines(["*no taskq app to test: set `taskq_app = MODULE:ATTR`*"])


@pytest.mark.slow
def test_a_suite_that_uses_no_fixture_starts_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(myapp=USER_APP)
    pytester.makeini(INI)
    pytester.makepyfile(
        test_plain="""
        import os
        import sys
        from pathlib import Path

        def redis_children():
            found = []
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    text = stat.read_text()
                except OSError:
                    continue
                name = text[text.index("(") + 1 : text.rindex(")")]
                ppid = int(text[text.rindex(")") + 2 :].split()[1])
                if name == "redis-server" and ppid == os.getpid():
                    found.append(int(stat.parent.name))
            return found

        def test_plugin_is_loaded_and_idle(request):
            assert request.config.pluginmanager.has_plugin("taskq.contrib.pytest_plugin")
            assert not [f for f in request.fixturenames if f.startswith("taskq")]
            assert redis_children() == []
            deferred = ("taskq.testing", "taskq.ops.devserver", "taskq.cli", "taskq.worker")
            assert [m for m in sys.modules if m.startswith(deferred)] == []

        def test_another_plain_test():
            assert redis_children() == []

        def test_and_the_check_sees_a_server_once_a_test_asks_for_one(taskq_redis_url):
            assert len(redis_children()) == 1
        """
    )
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's taskq, not the installed one

    result = run(pytester, "-p", "no:cacheprovider", subprocess=True)

    result.assert_outcomes(passed=3)
    assert len(servers_started(pytester)) == 1
