"""Retries through the pending list, crash recovery, dead letters, delayed jobs, bad input."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskq import App
from taskq.keys import GROUP
from taskq.testing import drain
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]


def dead_entries(r: redis.Redis, queue: str = "tasks") -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        for _id, fields in r.xrange(f"{queue}:deadletter")
    ]


def test_always_failing_job_runs_three_times_with_growing_gaps_then_dead_letters(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    job = tasks.always_fails.delay("x")
    start_worker("-A", "tests.tasks", "-c", "2", TASKQ_RETRY_BACKOFF_MS="300")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, timeout_s=20, message="dead letter")
    attempts = [x for x in runs(r) if x["job"] == job.id]
    assert [x["attempt"] for x in attempts] == [1, 2, 3]
    gap1 = attempts[1]["t"] - attempts[0]["t"]
    gap2 = attempts[2]["t"] - attempts[1]["t"]
    assert 0.2 <= gap1 < gap2, (gap1, gap2)  # ~0.3 s, then ~1.2 s (factor 4, +/-25%)
    [dead] = dead_entries(r)
    assert dead["task"] == "tests.tasks.always_fails" and dead["job_id"] == job.id
    assert dead["error_type"] == "RuntimeError" and dead["error"] == "boom x"
    assert "Traceback" in dead["traceback"] and dead["attempts"] == "3"
    assert dead["stream"] == "tasks:normal"  # each retry is a fresh entry: a new entry id
    assert int(dead["first_failure_ms"]) < int(dead["last_failure_ms"])
    assert dead["worker"].count(":") == 4  # host:pid:random:child index:child pid
    assert msgpack.unpackb(r.xrange("tasks:deadletter")[0][1][b"body"], raw=False)["id"] == job.id
    # Gone from the source stream, its pending list and the retry set.
    assert r.xlen("tasks:normal") == 0 and r.xinfo_groups("tasks:normal")[0]["pending"] == 0
    assert r.zcard("tasks:retry:normal") == 0


def test_flaky_job_succeeds_on_retry_and_leaves_nothing_behind(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.flaky.delay(3)
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.llen("runs") == 3, message="three runs")
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="ack")
    assert [x["attempt"] for x in runs(r)] == [1, 2, 3]
    assert r.xlen("tasks:deadletter") == 0 and r.zcard("tasks:retry:normal") == 0


def test_exceptions_marked_not_retryable_dead_letter_at_once(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.rejects.delay("v")
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="dead letter")
    assert r.llen("runs") == 1 and dead_entries(r)[0]["error_type"] == "ValueError"


def test_job_that_kills_its_worker_three_times_is_dead_lettered(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    job = tasks.crash.delay("segv")
    start_worker("-A", "tests.tasks", "-c", "1")
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, timeout_s=30, message="dead letter")
    assert [x["attempt"] for x in runs(r) if x["job"] == job.id] == [1, 2, 3]
    dead = dead_entries(r)[0]
    assert dead["error_type"] == "WorkerLost" and "SIGKILL" in dead["error"]


def test_jobs_of_a_vanished_consumer_are_recovered_after_the_visibility_timeout(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: a consumer on another host took a job and vanished (no master renews its lease).
    tasks.echo.delay("orphan")
    r.xgroup_create("tasks:normal", GROUP, id="0", mkstream=True)
    r.xreadgroup(GROUP, "gone-host:1:0:2", {"tasks:normal": ">"}, count=1)
    started = time.monotonic()
    # When: a worker runs with a 1 s visibility timeout.
    start_worker(
        "-A",
        "tests.tasks",
        "-c",
        "1",
        TASKQ_VISIBILITY_TIMEOUT_MS="1000",
        TASKQ_SWEEP_INTERVAL_MS="200",
    )
    # Then: the job runs once, as attempt 2, not before the timeout.
    wait_until(lambda: runs(r), timeout_s=15, message="the recovered job")
    assert time.monotonic() - started >= 0.9
    assert [(x["value"], x["attempt"]) for x in runs(r)] == [("orphan", 2)]


def test_delayed_jobs_run_once_when_due_with_several_workers(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    for _ in range(3):
        start_worker("-A", "tests.tasks", "-c", "2")
    # Up first, so that the lateness below is the promotion's, not the workers' start-up.
    wait_until(lambda: r.zcard("tasks:workers") == 3, 20, message="three workers up")
    due_at = time.time() + 1.0
    jobs = [tasks.echo.apply_async((i,), eta=due_at) for i in range(50)]
    assert r.zcard("tasks:schedule") == 50
    # Promotion moves a job out of the schedule in the same step as it adds it to the stream,
    # so once both are empty no duplicate can still appear: every copy would have run.
    wait_until(
        lambda: r.llen("runs") >= 50 and r.zcard("tasks:schedule") == r.xlen("tasks:normal") == 0,
        timeout_s=20,
        message="50 delayed jobs run, and nothing left to run",
    )
    done = runs(r)
    assert sorted(x["job"] for x in done) == sorted(j.id for j in jobs)
    assert min(x["t"] for x in done) >= due_at - 0.01
    assert max(x["t"] for x in done) - due_at < 2.0  # documented accuracy: block_ms + load
    assert r.zcard("tasks:schedule") == 0


def test_attempt_count_survives_a_worker_restart(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    tasks.always_fails.delay("r")
    w = start_worker("-A", "tests.tasks", "-c", "1", TASKQ_RETRY_BACKOFF_MS="60000")
    wait_until(lambda: r.zcard("tasks:retry:normal") == 1, message="first failure parked")
    w.stop()
    # Make the retry due now and start a fresh worker: it must know this is attempt 2.
    [member] = r.zrange("tasks:retry:normal", 0, -1)
    r.zadd("tasks:retry:normal", {member: 0})
    r.delete("tasks:due")  # the full housekeeping pass finds it all the same
    start_worker("-A", "tests.tasks", "-c", "1", TASKQ_RETRY_BACKOFF_MS="60000")
    wait_until(lambda: r.llen("runs") == 2, message="second attempt")
    assert [x["attempt"] for x in runs(r)] == [1, 2]


@st.composite
def garbage(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    """Entries that must never run: not msgpack, wrong schema, unknown task, bad args, v2."""
    valid_id = st.text(min_size=1, max_size=8)
    ints = st.integers(-(2**63), 2**64 - 1)
    body = st.one_of(
        st.binary(max_size=40).filter(lambda b: not _decodes(b)),
        st.builds(msgpack.packb, st.one_of(ints, st.lists(ints), st.text())),
        st.builds(lambda i: msgpack.packb({"v": 1, "id": i, "task": "no.such.task"}), valid_id),
        st.builds(lambda i: msgpack.packb({"v": 2, "id": i, "task": "tests.tasks.echo"}), valid_id),
        st.builds(
            lambda i, n: msgpack.packb(
                {"v": 1, "id": i, "task": "tests.tasks.echo", "args": list(range(n + 2))}
            ),
            valid_id,
            st.integers(0, 3),
        ),
    )
    return draw(
        st.lists(
            st.tuples(st.sampled_from(["high", "normal", "low"]), body), min_size=1, max_size=8
        )
    )


def _decodes(raw: bytes) -> bool:
    try:
        msgpack.unpackb(raw)
    except Exception:
        return False
    return True


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(entries=garbage())
def test_garbage_is_dead_lettered_while_good_jobs_keep_flowing(
    entries: list[tuple[str, bytes]], make_app: Callable[..., App], r: redis.Redis
) -> None:
    r.flushall()
    app = make_app()
    good: list[int] = []

    @app.task(name="tests.tasks.echo")
    def echo(value: int) -> None:
        good.append(value)

    for i, (priority, body) in enumerate(entries):
        echo.delay(i)
        r.xadd(f"tasks:{priority}", {"task": "junk", "body": body})
    drain(app)
    assert sorted(good) == list(range(len(entries)))
    # Every garbage entry, and only those, is dead-lettered once (one handed back between two
    # reads has a new entry id, and its body says how many attempts it used).
    dead = dead_entries(r)
    assert len(dead) == len(entries)
    assert all(d["error_type"] in ("Rejected", "TypeError") and d["error"] for d in dead)
    assert sum(r.xlen(f"tasks:{p}") for p in ("high", "normal", "low")) == 0


def test_a_parked_retry_waits_outside_the_stream_with_its_attempts_in_the_body(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app(retry_backoff_ms=60_000)

    @app.task
    def fail() -> None:
        raise RuntimeError("x")

    job = fail.delay()
    drain(app)
    # Nothing of it is left in the stream or its pending list...
    assert r.xlen("tasks:normal") == 0 and r.xinfo_groups("tasks:normal")[0]["pending"] == 0
    # ...it waits in the retry set: "<first failure ms>\n<priority>\n<task>\n<body>".
    [(member, due)] = r.zrange("tasks:retry:normal", 0, -1, withscores=True)
    first, priority, task, body = member.split(b"\n", 3)
    assert (priority, task) == (b"1", fail.name.encode())
    assert msgpack.unpackb(body, raw=False)["retries"] == 1 and int(first) <= due
    assert due > time.time() * 1000 + 40_000 and int(r.get("tasks:due")) == due
    assert msgpack.unpackb(body, raw=False)["id"] == job.id
    # The finished consumer was forgotten: it had nothing pending.
    assert r.xinfo_consumers("tasks:normal", GROUP) == []


def test_forgetting_consumers_never_drops_pending_entries(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def t() -> None: ...

    t.delay()
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    r.xreadgroup(GROUP, "holder", {"tasks:normal": ">"}, count=1)
    r.xgroup_createconsumer("tasks:normal", GROUP, "empty")
    assert broker.forget_consumers(idle_ms=0) == 1  # only "empty"
    assert broker.forget_consumer("holder") == 0
    names = {c["name"].decode() for c in r.xinfo_consumers("tasks:normal", GROUP)}
    assert names == {"holder"}
    assert r.xinfo_groups("tasks:normal")[0]["pending"] == 1


BAD_FIELDS: list[tuple[dict[str, bytes], str]] = [
    ({"job": b"\xff\xfejob"}, "entry field 'job' is not a job id: b'\\xff\\xfejob'"),
    ({"job": b"two words"}, "entry field 'job' is not a job id: b'two words'"),
    ({"job": b"j" * 300}, "entry field 'job' is not a job id: b'" + "j" * 40 + "'... (300 bytes)"),
    ({"ff": b"soon"}, "entry field 'ff' is not a time in ms: b'soon'"),
    ({"ff": b"-5"}, "entry field 'ff' is not a time in ms: b'-5'"),
    ({"ff": b"1.5"}, "entry field 'ff' is not a time in ms: b'1.5'"),
    ({"ff": b"1e12"}, "entry field 'ff' is not a time in ms: b'1e12'"),
    ({"ff": b"9" * 30}, "entry field 'ff' is not a time in ms: b'" + "9" * 30 + "'"),
    ({"ff": b"\xd9\x00"}, "entry field 'ff' is not a time in ms: b'\\xd9\\x00'"),
    ({"body": None}, "entry has no 'body' field"),  # (None: the field is left out)
]
"""Stream entries with one bad field each (their body a good job), and the reason each is
dead-lettered with (after ``malformed entry: ``)."""


def add_bad_entries(r: redis.Redis, stream: str = "tasks:normal") -> list[str]:
    """XADD every entry of :data:`BAD_FIELDS`, each with a good ``tests.tasks.echo`` body
    (the value ``bad <i>``); returns their entry ids."""
    ids = []
    for i, (bad, _reason) in enumerate(BAD_FIELDS):
        body = tasks.app.encode(tasks.echo.message((f"bad {i}",), {}))
        fields = {"task": b"tests.tasks.echo", "body": body, **bad}
        ids.append(r.xadd(stream, {k: v for k, v in fields.items() if v is not None}).decode())
    return ids


def assert_bad_entries_dead_lettered(r: redis.Redis, ids: list[str]) -> None:
    """Each entry of ``ids`` (added by :func:`add_bad_entries`) is dead-lettered once, with
    its reason, and never ran."""
    dead = {d["entry_id"]: d for d in dead_entries(r) if d["entry_id"] in ids}
    assert sorted(dead) == sorted(ids)
    for entry_id, (_bad, reason) in zip(ids, BAD_FIELDS, strict=True):
        got = dead[entry_id]
        assert (got["error_type"], got["error"]) == ("Rejected", f"malformed entry: {reason}")
        assert got["attempts"] == "0" and got["stream"] == "tasks:normal"
    assert not [x for x in runs(r) if str(x.get("value", "")).startswith("bad ")]


def test_entries_with_a_bad_field_are_dead_lettered_alone_in_a_batch_of_good_jobs(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: bad entries between good jobs, so that every fetched batch mixes them.
    tasks.echo.delay("good -1")
    ids = []
    for i, entry_id in enumerate(add_bad_entries(r)):
        ids.append(entry_id)
        tasks.echo.delay(f"good {i}")
    # When: one child fetches them in batches.
    w = start_worker("-A", "tests.tasks", "-c", "1", "--prefetch", "4")
    # Then: every good job runs, every bad entry is dead-lettered with its reason.
    good = {f"good {i}" for i in range(-1, len(BAD_FIELDS))}
    wait_until(lambda: len(dead_entries(r)) == len(BAD_FIELDS), 20, message="the bad entries")
    wait_until(lambda: {x.get("value") for x in runs(r)} >= good, 20, message="the good jobs")
    assert_bad_entries_dead_lettered(r, ids)
    assert sorted(x["value"] for x in runs(r)) == sorted(good)
    wait_until(lambda: r.xlen("tasks:normal") == 0, message="the stream to drain")
    assert "crashed" not in w.output() and "died" not in w.output(), w.output()


def test_an_entry_whose_job_field_names_another_job_leaves_that_record_alone(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()
    ran: list[str] = []

    @app.task(name="tests.tasks.echo", result_ttl_s=60)
    def echo(value: str) -> str:
        ran.append(value)
        return value

    # Given: another job's status record, and an entry whose `job` field names it.
    r.hset("tasks:job:victim-1", mapping={"state": "waiting", "task": "tests.tasks.echo"})
    body = app.encode(echo.message(("forged",), {}))
    r.xadd("tasks:normal", {"task": "tests.tasks.echo", "body": body, "job": "victim-1"})
    # When: a worker takes the entry.
    drain(app)
    # Then: it is dead-lettered, and the other job's record is as it was.
    [dead] = dead_entries(r)
    assert dead["error"] == "malformed entry: its 'job' field names another job than its body"
    assert ran == []
    assert r.hgetall("tasks:job:victim-1") == {b"state": b"waiting", b"task": b"tests.tasks.echo"}
