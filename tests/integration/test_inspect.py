"""``taskq inspect`` and ``taskq purge`` against real workers and a real Redis.

Every figure is checked against what the test reads from Redis itself (XINFO GROUPS,
XPENDING, XLEN, ZCARD) and against the jobs the test put there.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from taskq import App
from taskq.bodypatch import with_retries
from taskq.keys import GROUP, PRIORITIES
from taskq.message import Message
from taskq.ops.inspect import Inspector
from tests import tasks
from tests.conftest import ROOT, WorkerProcess, wait_until, worker_env
from tests.redis_server import free_port

pytestmark = pytest.mark.integration

StartWorker = Callable[..., WorkerProcess]


def cli(redis_url: str, *args: str, input: str | None = None) -> Result:
    from taskq.cli import main

    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], input=input)


def cli_json(redis_url: str, *args: str, exit_code: int = 0) -> Any:
    result = cli(redis_url, *args, "--json")
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def stream_of(overview: dict[str, Any], queue: str, priority: str) -> dict[str, Any]:
    q = next(q for q in overview["queues"] if q["queue"] == queue)
    return next(s for s in q["streams"] if s["priority"] == priority)


def queue_of(overview: dict[str, Any], queue: str = "tasks") -> dict[str, Any]:
    return next(q for q in overview["queues"] if q["queue"] == queue)


def redis_truth(r: redis.Redis, stream: str) -> dict[str, Any]:
    """What Redis itself says about a stream: the figures inspect must agree with."""
    group = next(g for g in r.xinfo_groups(stream) if g["name"] == GROUP.encode())
    summary = r.xpending(stream, GROUP)
    length = r.xlen(stream)
    first = r.xrange(stream, "(" + group["last-delivered-id"].decode(), "+", count=1)
    return {
        "length": length,
        "pending": group["pending"],
        "lag": group.get("lag"),  # Redis 7.0+ only
        "waiting": length - group["pending"],
        "oldest_pending_id": summary["min"].decode() if summary["min"] else None,
        "oldest_waiting_id": first[0][0].decode() if first else None,
    }


def running(redis_url: str, n: int) -> list[dict[str, Any]]:
    """Wait until the workers' records show ``n`` running sleepy jobs (and nothing else)."""

    def sleepy_jobs() -> list[dict[str, Any]] | None:
        jobs = cli_json(redis_url, "inspect", "active")
        ok = len(jobs) == n and all(j["task"] == "tests.tasks.sleepy" for j in jobs)
        return jobs if ok else None

    return wait_until(sleepy_jobs, message=f"{n} running sleepy jobs in `inspect active`")  # type: ignore[no-any-return]


def host_id(w: WorkerProcess) -> str:
    """The worker's id, ``<host>:<pid>:<random>``, as its start-up log line gives it."""
    found = re.search(rf"worker ({re.escape(socket.gethostname())}:{w.pid}:[0-9a-f]+):", w.output())
    assert found, w.output()
    return found.group(1)


# -- the overview ------------------------------------------------------------------------------


def test_overview_agrees_with_xinfo_and_xpending(
    start_worker: StartWorker, task_app: App, r: redis.Redis, redis_url: str
) -> None:
    # Given: a dead-lettered job, two running jobs on a worker with two children, and jobs
    # waiting on every priority behind them, plus one delayed job.
    w = start_worker("-A", "tests.tasks", "-c", "2", "--grace", "1")
    tasks.rejects.delay("x")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="the rejected job to die")
    tasks.sleepy.delay(30)
    tasks.sleepy.delay(30)
    running(redis_url, 2)
    tasks.echo.starmap([(i,) for i in range(5)])
    tasks.echo.apply_async((0,), priority="low")
    tasks.echo.apply_async((0,), priority="low")
    tasks.urgent.delay(1)
    tasks.echo.apply_async((9,), countdown=3600)

    # When
    overview = cli_json(redis_url, "inspect")

    # Then: every figure is Redis's own.
    expected = {"high": (1, 0), "normal": (5, 2), "low": (2, 0)}
    for priority, (waiting, pending) in expected.items():
        s = stream_of(overview, "tasks", priority)
        truth = redis_truth(r, f"tasks:{priority}")
        assert (s["waiting"], s["pending"]) == (waiting, pending)
        assert s["waiting"] == truth["waiting"]
        assert s["lag"] == truth["lag"]
        assert s["pending"] == truth["pending"]
        assert s["length"] == truth["length"] == waiting + pending
        assert s["oldest_pending_id"] == truth["oldest_pending_id"]
        assert s["oldest_waiting_id"] == truth["oldest_waiting_id"]
        assert s["retrying"] == 0
    normal = stream_of(overview, "tasks", "normal")
    assert normal["oldest_pending_age_ms"] >= normal["oldest_waiting_age_ms"] >= 0
    q = queue_of(overview)
    assert (q["scheduled"], q["dead"], q["waiting"], q["pending"]) == (1, 1, 8, 2)
    assert 3_500_000 < q["next_scheduled_in_ms"] <= 3_600_000
    [worker] = overview["workers"]
    assert worker["id"] == host_id(w)
    assert (worker["concurrency"], worker["busy"], worker["idle"]) == (2, 2, 0)
    assert (worker["failed"], worker["dead"]) == (1, 1)

    # And the human overview shows the same figures.
    text = cli(redis_url, "inspect").output
    cells = _row(text, "tasks", "normal")  # waiting, oldest, pending, retrying, oldest pending
    assert (cells[0], cells[2], cells[3]) == ("5", "2", "0")
    assert _row(text, "tasks", "high")[0] == "1"
    assert "1 scheduled (next due in 59m" in text
    assert "1 dead-lettered" in text
    assert host_id(w) in text
    assert "1 worker(s) alive: 2/2 children busy" in text


def _row(text: str, queue: str, priority: str) -> list[str]:
    """The cells after QUEUE and PRIORITY on the overview line of one stream."""
    line = next(x for x in text.splitlines() if x.split()[:2] == [queue, priority])
    return line.split()[2:]


def test_waiting_is_right_where_redis_lag_is_null_or_wrong(
    make_app: Callable[..., App], r: redis.Redis, redis_url: str
) -> None:
    # Given: 5 jobs, 2 delivered, the newer of them acked and deleted the way workers do it.
    app = make_app()
    for i in range(5):
        app.enqueue(Message("t", (i,)))
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    delivered = r.xreadgroup(GROUP, "c", {"tasks:normal": ">"}, count=2)[0][1]
    ack_and_delete(r, delivered[1][0])

    # Then: Redis 7.0 cannot tell the lag; inspect still counts 3 waiting, 1 pending.
    s = stream_of(cli_json(redis_url, "inspect"), "tasks", "normal")
    assert (s["waiting"], s["pending"], s["lag"]) == (
        3,
        1,
        r.xinfo_groups("tasks:normal")[0].get("lag"),
    )
    assert s["oldest_waiting_id"] == r.xrange("tasks:normal", "-", "+")[1][0].decode()

    # Given: the waiting ones purged, then a new job delivered and done, and the old one done.
    app.operators.purge_waiting("tasks", ["normal"])
    app.enqueue(Message("t", ("new",)))
    [(_, [(new_id, _fields)])] = r.xreadgroup(GROUP, "c", {"tasks:normal": ">"})
    ack_and_delete(r, new_id)
    ack_and_delete(r, delivered[0][0])

    # Then: the stream is empty; inspect says so, whatever Redis's lag says.
    assert r.xlen("tasks:normal") == 0
    s = stream_of(cli_json(redis_url, "inspect"), "tasks", "normal")
    assert (s["waiting"], s["pending"], s["length"]) == (0, 0, 0)
    assert s["lag"] == r.xinfo_groups("tasks:normal")[0].get("lag")


def ack_and_delete(r: redis.Redis, entry_id: bytes) -> None:
    r.xack("tasks:normal", GROUP, entry_id)
    r.xdel("tasks:normal", entry_id)


def test_inspect_queues_details(
    start_worker: StartWorker, task_app: App, r: redis.Redis, redis_url: str
) -> None:
    start_worker("-A", "tests.tasks", "-c", "1", "--grace", "1")
    tasks.sleepy.delay(30)
    running(redis_url, 1)
    tasks.echo.starmap([(i,) for i in range(3)])

    [q] = cli_json(redis_url, "inspect", "queues")
    normal = next(s for s in q["streams"] if s["priority"] == "normal")
    group = r.xinfo_groups("tasks:normal")[0]
    assert normal["last_delivered_id"] == group["last-delivered-id"].decode()
    assert normal["consumers"] == group["consumers"] >= 1
    assert (normal["length"], normal["waiting"], normal["pending"]) == (4, 3, 1)

    text = cli(redis_url, "inspect", "queues").output
    assert "LAST DELIVERED" in text
    line = next(x for x in text.splitlines() if x.startswith("tasks:normal "))
    assert line.split()[1:4] == ["4", str(group["consumers"]), group["last-delivered-id"].decode()]


# -- workers -----------------------------------------------------------------------------------


def test_workers_active_registered_and_ping(
    start_worker: StartWorker, task_app: App, r: redis.Redis, redis_url: str
) -> None:
    w = start_worker("-A", "tests.tasks", "-c", "2", "--grace", "1")
    tasks.echo.delay("warm-up")
    wait_until(lambda: r.llen("runs") == 1, message="the warm-up job")
    job = tasks.sleepy.delay(30)

    # inspect active: the job, which child runs it, and a running time that grows.
    [active] = running(redis_url, 1)
    assert (active["worker"], active["task"], active["job_id"]) == (
        host_id(w),
        "tests.tasks.sleepy",
        job.id,
    )
    assert active["entry_id"] == job.entry_id and active["stream"] == "tasks:normal"
    wait_until(
        lambda: (
            cli_json(redis_url, "inspect", "active")[0]["running_ms"] > active["running_ms"] + 200
        ),
        message="running_ms to grow",
    )
    text = cli(redis_url, "inspect", "active").output
    assert host_id(w) in text and job.id in text and "tests.tasks.sleepy" in text

    # inspect workers: the registry record.
    [rec] = cli_json(redis_url, "inspect", "workers")
    assert (rec["id"], rec["pid"], rec["host"]) == (host_id(w), w.pid, socket.gethostname())
    assert (rec["concurrency"], rec["busy"], rec["idle"], rec["processed"]) == (2, 1, 1, 1)
    assert rec["queues"] == ["tasks"] and "tests.tasks.sleepy" in rec["tasks"]
    assert rec["heartbeat_age_ms"] < 1_500 and 0 < rec["expires_in_ms"] <= 1_500
    busy = [c for c in rec["children"] if c["task"]]
    assert [c["job_id"] for c in busy] == [job.id]
    assert busy[0]["pid"] == active["pid"] and busy[0]["index"] == active["child"]
    text = cli(redis_url, "inspect", "workers").output
    assert f"{host_id(w)}  app=tests.tasks" in text
    assert "children 2/2: 1 busy, 1 idle" in text
    assert f"pid {active['pid']}: tests.tasks.sleepy job {job.id}" in text

    # inspect registered
    [reg] = cli_json(redis_url, "inspect", "registered")
    assert set(reg["tasks"]) == set(tasks.app.registered())
    text = cli(redis_url, "inspect", "registered").output
    assert f"{host_id(w)}: {len(tasks.app.registered())} task(s)" in text
    assert "  tests.tasks.flaky" in text

    # inspect ping
    ping = cli_json(redis_url, "inspect", "ping")
    assert [(p["worker"], p["answered"]) for p in ping["workers"]] == [(host_id(w), True)]
    assert ping["redis_ms"] >= 0
    result = cli(redis_url, "inspect", "ping")
    assert result.exit_code == 0
    assert f"{host_id(w)}: pong" in result.output and "1/1 worker(s) answered" in result.output


def test_ping_without_workers_exits_non_zero(redis_url: str) -> None:
    result = cli(redis_url, "inspect", "ping")
    assert result.exit_code == 1
    assert "0/0 worker(s) answered" in result.output
    assert cli(redis_url, "inspect", "ping", "--json").exit_code == 1


@pytest.mark.slow
def test_sigkilled_worker_leaves_the_registry_and_its_jobs_stay_pending(
    start_worker: StartWorker, task_app: App, r: redis.Redis, redis_url: str
) -> None:
    # Given: a worker running two long jobs.
    w = start_worker("-A", "tests.tasks", "-c", "2", "--grace", "1")
    jobs = [tasks.sleepy.delay(30), tasks.sleepy.delay(30)]
    running(redis_url, 2)

    # When: the whole worker is SIGKILLed.
    w.kill_all()
    killed_at = time.monotonic()

    # Then: its record is still there at first, its ping goes late, and it is gone after the
    # TTL (1.5 s in the tests).
    assert [x["id"] for x in cli_json(redis_url, "inspect", "workers")] == [host_id(w)]
    wait_until(lambda: late(redis_url), message="the dead worker's ping to go late")
    wait_until(
        lambda: not cli_json(redis_url, "inspect", "workers"), message="the record to expire"
    )
    assert time.monotonic() - killed_at < 1.5 + 2.0
    assert "no workers alive" in cli(redis_url, "inspect", "workers").output
    assert cli(redis_url, "inspect", "ping").exit_code == 1

    # And its jobs are pending under its consumers, orphaned, with growing idle time.
    first = cli_json(redis_url, "inspect", "pending")
    assert sorted(p["entry_id"] for p in first) == sorted(str(j.entry_id) for j in jobs)
    assert {p["state"] for p in first} == {"orphaned"}
    assert {p["worker"] for p in first} == {host_id(w)}
    assert all(p["consumer"].startswith(host_id(w) + ":") for p in first)
    assert [p["task"] for p in first] == ["tests.tasks.sleepy"] * 2
    xp = {
        e["message_id"].decode(): e for e in r.xpending_range("tasks:normal", GROUP, "-", "+", 10)
    }
    for p in first:
        assert p["consumer"] == xp[p["entry_id"]]["consumer"].decode()
        assert p["deliveries"] == xp[p["entry_id"]]["times_delivered"] == 1
    wait_until(
        lambda: (
            min(p["idle_ms"] for p in cli_json(redis_url, "inspect", "pending"))
            > max(p["idle_ms"] for p in first) + 300
        ),
        message="idle time to grow",
    )
    assert len(cli_json(redis_url, "inspect", "pending", "--idle", "300")) == 2
    assert cli_json(redis_url, "inspect", "pending", "--idle", "600000") == []
    text = cli(redis_url, "inspect", "pending").output
    assert text.count("orphaned") == 2 and str(jobs[0].entry_id) in text
    s = stream_of(cli_json(redis_url, "inspect"), "tasks", "normal")
    assert (s["waiting"], s["pending"]) == (0, 2)


def late(redis_url: str) -> bool:
    """True once the one registered worker's ping is late (its record not yet expired)."""
    [worker] = json.loads(cli(redis_url, "inspect", "ping", "--json").stdout)["workers"] or [None]
    if worker is None:
        pytest.fail("the record expired before its ping was seen late")
    return not worker["answered"]


def test_parked_retries_are_counted_with_when_the_next_is_due(
    make_app: Callable[..., App], redis_url: str
) -> None:
    # Given: a delivered job parked for a retry an hour from now.
    app = make_app()
    app.enqueue(Message("some.task"))
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    [d] = broker.fetch("host:1:0:2", 1).deliveries
    body = with_retries(d.body or b"", 1)
    assert broker.park(d, owner="host:1:0:2", task="some.task", body=body, delay_ms=3_600_000)

    # Then: it is out of the stream, counted as retrying, due in an hour.
    assert cli_json(redis_url, "inspect", "pending") == []
    s = stream_of(cli_json(redis_url, "inspect"), "tasks", "normal")
    assert (s["waiting"], s["pending"], s["retrying"], s["length"]) == (0, 0, 1, 0)
    assert 3_500_000 < s["next_retry_in_ms"] <= 3_600_000
    assert "1 retrying (next due in 59m" in cli(redis_url, "inspect").output


def d_ms(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


# -- watch, errors -----------------------------------------------------------------------------


def test_watch_redraws_with_fresh_figures(task_app: App, redis_url: str) -> None:
    # Given: `inspect --json --watch` running as its own process, one JSON line per frame.
    cmd = [sys.executable, "-m", "taskq", "inspect", "--json", "--watch", "0.1"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=worker_env(redis_url), stdout=subprocess.PIPE, text=True
    )
    frames: list[dict[str, Any]] = []
    reader = threading.Thread(
        target=lambda: frames.extend(json.loads(x) for x in proc.stdout or ())
    )
    reader.start()
    try:
        wait_until(lambda: frames, message="the first frame")
        assert stream_of(frames[0], "tasks", "normal")["waiting"] == 0
        # When: jobs arrive.
        tasks.echo.starmap([(i,) for i in range(4)])
        # Then: a later frame shows them.
        wait_until(
            lambda: stream_of(frames[-1], "tasks", "normal")["waiting"] == 4,
            message="a frame with 4 waiting",
        )
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(10)
        if proc.stdout:
            proc.stdout.close()
    assert len(frames) >= 2


def test_watch_human_frames_are_bounded_by_count(redis_url: str) -> None:
    result = cli(redis_url, "inspect", "--watch", "0.05", "--count", "3")
    assert result.exit_code == 0
    assert result.output.count("QUEUE  PRIORITY") == 3


@pytest.mark.parametrize(
    "args",
    [
        ["inspect"],
        ["inspect", "--json"],
        ["inspect", "workers"],
        ["inspect", "active", "--json"],
        ["inspect", "pending"],
        ["inspect", "queues"],
        ["inspect", "registered"],
        ["inspect", "ping"],
        ["purge", "tasks", "-y"],
    ],
)
def test_unreachable_redis_is_one_line_and_non_zero(args: list[str]) -> None:
    result = cli(f"redis://127.0.0.1:{free_port()}/0", *args)
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach Redis at redis://127.0.0.1:")
    assert result.output.count("\n") == 1


# -- purge -------------------------------------------------------------------------------------


def test_purge_removes_waiting_jobs_and_keeps_pending_and_delayed_ones(
    start_worker: StartWorker, task_app: App, r: redis.Redis, redis_url: str
) -> None:
    # Given: one job running, jobs waiting on two priorities, one delayed.
    start_worker("-A", "tests.tasks", "-c", "1", "--grace", "1")
    running_job = tasks.sleepy.delay(2)
    running(redis_url, 1)
    tasks.echo.starmap([(i,) for i in range(5)])
    tasks.urgent.delay(1)
    tasks.urgent.delay(2)
    tasks.echo.apply_async((0,), countdown=3600)

    # When: normal is purged.
    result = cli(redis_url, "purge", "tasks", "--priority", "normal", "-y")

    # Then: exactly the 5 waiting jobs went; the running one and the rest stayed.
    assert result.exit_code == 0, result.output
    assert result.output == "removed 5 waiting job(s) from tasks (normal 5)\n"
    assert r.xlen("tasks:normal") == 1
    assert r.xpending("tasks:normal", GROUP)["min"].decode() == running_job.entry_id
    assert r.xlen("tasks:high") == 2 and r.zcard("tasks:schedule") == 1

    # When: the whole queue is purged (JSON report).
    report = json.loads(cli(redis_url, "purge", "tasks", "-y", "--json").stdout)
    assert report == {
        "queue": "tasks",
        "waiting": 2,
        "pending": 0,
        "priorities": {p: {"waiting": 2 if p == "high" else 0, "pending": 0} for p in PRIORITIES},
    }
    assert r.xlen("tasks:high") == 0 and r.xlen("tasks:normal") == 1

    # And the worker, untouched, finishes its job and takes new ones.
    tasks.echo.delay("after")
    wait_until(lambda: r.llen("runs") == 2, message="the running job and a new one")
    assert cli(redis_url, "purge", "tasks", "-y").output == "nothing to purge\n"


def test_purge_include_pending_removes_jobs_of_live_workers_safely(
    start_worker: StartWorker, task_app: App, r: redis.Redis, redis_url: str
) -> None:
    start_worker("-A", "tests.tasks", "-c", "1", "--grace", "1")
    tasks.sleepy.delay(1)
    running(redis_url, 1)
    tasks.echo.starmap([(i,) for i in range(3)])

    result = cli(redis_url, "purge", "tasks", "--include-pending", "-y")
    assert (
        result.output
        == "removed 3 waiting job(s) and 1 pending job(s) from tasks (high 0, normal 4, low 0)\n"
    )
    assert r.xlen("tasks:normal") == 0 and r.xpending("tasks:normal", GROUP)["pending"] == 0

    # The worker finishes the purged job without error and keeps serving.
    tasks.echo.delay("after")
    wait_until(lambda: r.llen("runs") == 2, message="the purged job to finish and a new one to run")
    # The new job's entry goes with its ack's trim, which rides on the worker's next fetch.
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="the finished entry to be trimmed")


def test_purge_asks_first(make_app: Callable[..., App], r: redis.Redis, redis_url: str) -> None:
    app = make_app()
    for i in range(3):
        app.enqueue(Message("t", (i,)))
    declined = cli(redis_url, "purge", "tasks", input="n\n")
    assert declined.exit_code == 1
    assert "remove 3 waiting job(s) from tasks (high, normal, low)? [y/N]" in declined.output
    assert r.xlen("tasks:normal") == 3
    accepted = cli(redis_url, "purge", "tasks", input="y\n")
    assert accepted.exit_code == 0 and "removed 3 waiting job(s)" in accepted.output
    assert r.xlen("tasks:normal") == 0


def test_purge_in_batches_stops_at_the_newest_id_and_keeps_delivered_entries(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    # Given: 10 entries, the first 3 delivered (pending), the rest waiting.
    app = make_app()
    for i in range(10):
        app.enqueue(Message("t", (i,)))
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    r.xreadgroup(GROUP, "c", {"tasks:normal": ">"}, count=3)

    # When: purged two entries per script call.
    removed = app.operators.purge_waiting("tasks", ["normal"], batch=2)

    # Then
    assert removed == {"normal": (7, 0)}
    assert r.xlen("tasks:normal") == 3 and r.xpending("tasks:normal", GROUP)["pending"] == 3
    # New jobs after a purge count as waiting (Redis reports no lag now).
    app.enqueue(Message("t", ("new",)))
    [q] = Inspector(app.reader, ["tasks"]).queue_stats()
    normal = q.streams[1]
    assert (normal.waiting, normal.pending, normal.lag) == (1, 3, None)
    assert app.operators.purge_waiting("tasks", ["normal"], include_pending=True, batch=2) == {
        "normal": (1, 3)
    }
    assert r.xlen("tasks:normal") == 0 and r.xpending("tasks:normal", GROUP)["pending"] == 0


def test_purge_rejects_bad_queue_names(redis_url: str) -> None:
    result = cli(redis_url, "purge", "a:b", "-y")
    assert result.exit_code == 1 and "invalid queue name" in result.output


# -- scale -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_overview_stays_fast_with_a_million_waiting_jobs(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    # Given: a million waiting jobs (written server-side, 100k per script call).
    app = make_app()
    app.broker_for(["tasks"]).ensure_groups()
    fill = "for i = 1, 100000 do redis.call('XADD', KEYS[1], '*', 'task', 't', 'body', 'x') end"
    for _ in range(10):
        r.eval(fill, 1, "tasks:normal")
    r.xreadgroup(GROUP, "c", {"tasks:normal": ">"}, count=1)
    inspector = Inspector(app.reader, ["tasks"])
    inspector.overview()  # warm the connection

    # When
    started = time.perf_counter()
    overview = inspector.overview()
    elapsed_s = time.perf_counter() - started

    # Then: exact figures, in far less time than reading the stream would take.
    normal = overview.queues[0].streams[1]
    assert (normal.waiting, normal.pending, normal.length) == (999_999, 1, 1_000_000)
    assert normal.oldest_waiting_id == r.xrange("tasks:normal", "-", "+", count=2)[1][0].decode()
    assert elapsed_s < 0.1, f"overview took {elapsed_s:.3f}s"

    # And purge removes exactly the waiting ones, in bounded script calls.
    assert app.operators.purge_waiting("tasks", ["normal"], batch=5_000) == {"normal": (999_999, 0)}
    assert r.xlen("tasks:normal") == 1 and r.xpending("tasks:normal", GROUP)["pending"] == 1
