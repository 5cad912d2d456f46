"""Least-privilege users: a Redis whose users are made from ``taskq acl print``'s lines, and
each role doing its whole job with them (ACL LOG stays empty) and no more."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from taskq import App, BrokerRefused, Job, chain, chord, group
from taskq.broker.control import read_control
from taskq.cli import main
from taskq.errors import JobCancelled, JobExpired, TaskFailed
from taskq.ops.devserver import find_redis_server
from tests import acl_tasks, tasks
from tests.conftest import ROOT, WorkerProcess, wait_until, worker_env
from tests.redis_server import RedisServer
from tests.topologies import server_version

pytestmark = pytest.mark.integration

PASSWORDS = {"producer": "producer-pw", "worker": "pw", "operator": "operator-pw"}
REDIS_6 = (server_version(find_redis_server()) or (7, 0, 0)) < (7, 0, 0)
"""The redis-server on PATH has no read-only key rules (``taskq acl print --redis-version``)."""


def acl_line(role: str) -> str:
    """What ``taskq acl print`` prints for ``role`` on queues ``tasks`` and ``acl`` (the full
    run's)."""
    args = ["acl", "print", "-Q", "tasks", "-Q", "acl", "--role", role, "--password-env", "PW"]
    args += ["--redis-version", "6.2" if REDIS_6 else "7"]
    result = CliRunner().invoke(main, args, env={"PW": PASSWORDS[role]})
    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    return line


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private Redis with the three users (the default user stays the admin)."""
    s = RedisServer(tmp_path_factory.mktemp("redis-acl"))
    s.start()
    with s.client() as admin:
        for role in PASSWORDS:
            admin.execute_command(*acl_line(role).split())
    yield s
    s.stop()


def url(server: RedisServer, role: str, password: str | None = None) -> str:
    return f"redis://taskq-{role}:{password or PASSWORDS[role]}@127.0.0.1:{server.port}/0"


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """The admin connection, with ACL LOG emptied for the test."""
    client = server.client()
    client.acl_log_reset()
    yield client
    client.close()


def denials(admin: redis.Redis) -> list[tuple[str, str, str]]:
    """(user, reason, object) of each ACL LOG entry, but redis-py's CLIENT SETINFO, which it
    sends on connect and whose refusal it ignores (see docs/security.md)."""
    rows = [{_text(k): _text(v) for k, v in e.items()} for e in admin.acl_log()]
    return [
        (e["username"], e["reason"], e["object"])
        for e in rows
        if not e["object"].startswith("client")
    ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture(scope="module")
def mark_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def worker(
    server: RedisServer, mark_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """A real ``taskq worker`` logged in as taskq-worker, for the whole module."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    args = ("-A", "tests.tasks", "-Q", "tasks", "-c", "2")
    w = WorkerProcess(url(server, "worker"), *args, log_path=log, TASKQ_TEST_MARK_DIR=str(mark_dir))
    yield w
    w.stop()


@pytest.fixture(scope="module")
def producer(server: RedisServer) -> Iterator[None]:
    """tests.tasks' app, enqueueing as taskq-producer."""
    tasks.app.close()
    tasks.app.settings = tasks.app.settings.replace(redis_url=url(server, "producer"))
    yield
    tasks.app.close()


def marked(mark_dir: Path) -> set[str]:
    """Job ids that ``tests.tasks.mark`` ran (it writes files, not Redis)."""
    return {line.split()[0] for f in mark_dir.iterdir() for line in f.read_text().splitlines()}


def test_a_producer_enqueues_and_reads_its_results(
    producer: None, worker: WorkerProcess, admin: redis.Redis, mark_dir: Path
) -> None:
    plain = tasks.mark.delay(1)  # no record: a bare XADD
    now = tasks.add.delay(1, 2)
    later = tasks.add.apply_async((2, 3), countdown=0.5)
    unique = tasks.add.apply_async((3, 4), unique_key="acl")
    assert tasks.add.apply_async((3, 4), unique_key="acl").id == unique.id
    debounced = tasks.add.apply_async((0, 1), debounce_key="acl", debounce_s=0.2)
    assert tasks.add.apply_async((0, 2), debounce_key="acl", debounce_s=0.2).id == debounced.id
    assert later.status().state == "scheduled"
    assert [now.result(timeout=10), later.result(timeout=10), unique.result(timeout=10)] == [
        3,
        5,
        7,
    ]
    assert debounced.result(timeout=10) == 2
    kept = tasks.add.apply_async((5, 5), unique_key="kl", unique_mode="keep_last")
    again = tasks.add.apply_async((5, 6), unique_key="kl", unique_mode="keep_last")
    assert kept.result(timeout=10) == 10  # (again: the same job, or one after it)
    assert again.result(timeout=10) == (10 if again.id == kept.id else 11)
    full = [tasks.tally.delay(n) for n in (1, 2, 3)]  # a full batch: enqueued at once
    assert full[0].result(timeout=10) == 6
    assert tasks.tally.delay(4).result(timeout=10) == 4  # a batch due after its wait
    # queue= : without it app.job() also looks in ptick and pall (tests.tasks names them)
    assert tasks.app.job(now.id, queue="tasks").status().state == "succeeded"
    wait_until(lambda: plain.id in marked(mark_dir), message="the plain job to run")
    assert denials(admin) == []


def test_the_worker_writes_telemetry_the_producer_and_the_operator_read_it(
    server: RedisServer, producer: None, worker: WorkerProcess, admin: redis.Redis
) -> None:
    job = tasks.reports.delay(3)
    assert [c.value for c in job.stream(timeout=20)] == [0, 1, 2]
    assert job.result(timeout=10) == 3
    progress, logs = job.progress(), job.logs()
    assert progress is not None and progress.done == 3
    assert [r.message for r in logs.records] == ["reported 3"]
    shown = json.loads(operator(server, "job", job.id, "--json", "--queue", "tasks"))
    assert shown["progress"]["done"] == 3 and shown["output"]["chunks"] == 3
    assert "reported 3" in operator(server, "job", job.id, "--follow", "--queue", "tasks")
    assert denials(admin) == []


def test_an_async_producer_needs_no_more(
    producer: None, worker: WorkerProcess, admin: redis.Redis
) -> None:
    async def enqueue_and_wait() -> list[int]:
        try:
            now = await tasks.add.adelay(5, 6)
            later = await tasks.add.aapply_async((1, 1), countdown=0.5)
            unique = await tasks.add.aapply_async((2, 2), unique_key="acl-async")
            assert (await later.astatus()).state == "scheduled"
            return [await j.aresult(timeout=10) for j in (now, later, unique)]
        finally:
            await tasks.app.aclose()

    assert asyncio.run(enqueue_and_wait()) == [11, 2, 4]
    assert denials(admin) == []


@pytest.mark.parametrize(
    "command",
    [
        ("XRANGE", "tasks:normal", "-", "+"),
        ("XDEL", "tasks:normal", "0-1"),
        ("XREADGROUP", "GROUP", "taskq", "intruder", "STREAMS", "tasks:normal", ">"),
        ("FLUSHALL",),
        ("XADD", "tasks:deadletter", "*", "task", "x"),  # XADD, but not to that key
        ("XTRIM", "tasks:normal", "MAXLEN", "0"),
        ("DEL", "tasks:normal"),
    ],
    ids=" ".join,
)
def test_a_producer_can_do_nothing_else(
    server: RedisServer, admin: redis.Redis, command: tuple[str, ...]
) -> None:
    with (
        redis.Redis.from_url(url(server, "producer")) as client,
        pytest.raises(redis.exceptions.NoPermissionError),
    ):
        client.execute_command(*command)
    assert [d[0] for d in denials(admin)] == ["taskq-producer"]


STREAM = "acl:low"
"""A stream the producer may write and no worker of this module reads."""


@pytest.mark.parametrize(
    "command",
    [
        ("XADD", STREAM, "MAXLEN", "0", "*", "task", "x"),
        ("XADD", STREAM, "MINID", "99999999999999", "*", "task", "x"),
        ("PEXPIRE", STREAM, "1"),
        ("SET", STREAM, "x"),
    ],
    ids=" ".join,
)
def test_a_producer_can_still_delete_waiting_jobs(
    server: RedisServer, admin: redis.Redis, command: tuple[str, ...]
) -> None:
    """What docs/security.md says Redis ACLs cannot forbid: an argument (MAXLEN, MINID) of a
    command the role needs, or a command on a key it needs for another reason."""
    # Given: three waiting jobs
    for n in range(3):
        admin.xadd(STREAM, {"task": "t", "n": n})
    try:
        # When: the producer user sends the command
        with redis.Redis.from_url(url(server, "producer")) as client:
            client.execute_command(*command)
        # Then: none of the three is left
        wait_until(lambda: admin.type(STREAM) != b"stream" or admin.xlen(STREAM) <= 1)
        kept = admin.xrange(STREAM) if admin.type(STREAM) == b"stream" else []
        assert [f for _id, f in kept if f.get(b"n") is not None] == []
        assert denials(admin) == []
    finally:
        admin.delete(STREAM)


def test_an_enqueue_script_needs_xadd_for_its_caller(
    server: RedisServer, admin: redis.Redis
) -> None:
    """Why the producer keeps +xadd: Redis checks a script's commands against the caller's
    rights, so a user allowed only to run scripts cannot enqueue through one either."""
    admin.execute_command(
        "ACL", "SETUSER", "scripts-only", "reset", "on", ">pw", "~acl:*", "-@all", "+eval"
    )
    try:
        client = redis.Redis.from_url(f"redis://scripts-only:pw@127.0.0.1:{server.port}/0")
        xadd = "return redis.call('XADD', KEYS[1], '*', 'task', 'x')"
        with client, pytest.raises(redis.exceptions.ResponseError, match="user executing"):
            client.eval(xadd, 1, STREAM)
        assert admin.exists(STREAM) == 0
    finally:
        admin.execute_command("ACL", "DELUSER", "scripts-only")


def test_a_worker_runs_retries_dead_letters_delayed_jobs_and_workflows(
    producer: None, worker: WorkerProcess, admin: redis.Redis
) -> None:
    retried = tasks.fails_then_adds.delay(2, 3, 0.0)
    dead = tasks.fails_stored.delay("for good")
    delayed = tasks.add.apply_async((4, 4), countdown=0.2)
    steps = chain(tasks.add.s(1, 2), tasks.add.s(10)).delay()
    squares = group(tasks.square.s(i) for i in range(3)).delay()
    assert delayed.result(timeout=10) == 8
    with pytest.raises(TaskFailed, match="for good"):
        dead.result(timeout=10)
    assert retried.result(timeout=10) == 5
    assert retried.status().attempts == 2
    assert [steps.result(timeout=10), squares.result(timeout=10)] == [13, [0, 1, 4]]
    assert dead.id in dead_letters(admin)
    assert denials(admin) == []
    assert "NOPERM" not in worker.output() and "Traceback" not in worker.output()


def operator(server: RedisServer, *args: str, app: str | None = None) -> str:
    """``taskq ARGS`` as taskq-operator; with ``app``, in a process of its own (loading the app
    in this one would point its module's App at the operator's URL)."""
    if app is None:
        result = CliRunner().invoke(main, ["--redis-url", url(server, "operator"), *args])
        assert result.exit_code == 0, result.output
        return result.stdout
    done = subprocess.run(
        [sys.executable, "-m", "taskq", "-A", app, *args],
        env=worker_env(url(server, "operator")),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_operator_inspects_and_handles_dead_letters(
    server: RedisServer, producer: None, worker: WorkerProcess, admin: redis.Redis
) -> None:
    # given a dead-lettered job
    dead = tasks.fails_stored.delay("operator")
    with pytest.raises(TaskFailed):
        dead.result(timeout=10)
    # when the operator looks, cancels a job, retries the dead one (it fails again) and
    # purges the dead letters
    assert "tasks  normal" in operator(server, "inspect")
    assert "queues=tasks" in operator(server, "inspect", "workers")
    admin.zadd("tasks:fair:waiting", {"tenant": 2})  # a fair queue's key list (ZSCAN) ...
    admin.rpush("tasks:fair:low:k:tenant", "job", "job")  # ... and its counts (LLEN)
    fair = json.loads(operator(server, "inspect", "-Q", "tasks", "--json"))["queues"][0]["fair"]
    assert fair["keys"] == [{"key": "tenant", "weight": 1, "waiting": 2}]
    admin.delete("tasks:fair:waiting", "tasks:fair:low:k:tenant")
    delayed = tasks.add.apply_async((1, 1), countdown=60)
    assert "scheduled" in operator(server, "job", delayed.id)
    assert operator(server, "job", "cancel", delayed.id) == f"{delayed.id}: cancelled\n"
    found = operator(server, "jobs", "search", "tasks", "--state", "cancelled", "--json")
    assert delayed.id in [row["job_id"] for row in json.loads(found)["rows"]]  # SCAN
    listed = json.loads(operator(server, "deadletter", "list", "--json"))
    [dead_id] = [e["dead_id"] for e in listed if e["job_id"] == dead.id]
    assert "KeyError" in operator(server, "deadletter", "show", dead_id)
    assert operator(server, "deadletter", "retry", dead_id).startswith("re-enqueued 1 job")
    wait_until(
        lambda: dead_letters(admin).get(dead.id, dead_id) != dead_id,
        message="the retried job to be dead-lettered again",
    )
    assert operator(server, "deadletter", "purge", "-y").startswith("deleted")
    # then nothing is left, and no command was refused
    assert admin.xlen("tasks:deadletter") == 0
    assert denials(admin) == []


def dead_letters(admin: redis.Redis) -> dict[str, str]:
    """Job id -> dead-letter id of the newest entry of each job, as the admin reads them."""
    entries = admin.xrange("tasks:deadletter")
    return {fields[b"job_id"].decode(): dead_id.decode() for dead_id, fields in entries}


@pytest.mark.parametrize(
    "command", [("inspect",), ("deadletter", "list"), ("worker", "-A", "tests.tasks")], ids=" ".join
)
def test_a_wrong_password_is_one_line(server: RedisServer, command: tuple[str, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "taskq", *command],
        env=worker_env(url(server, "operator", "wrong-pw")),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert "refused the credentials" in line and "wrong-pw" not in line


StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def start_acl_worker(server: RedisServer, tmp_path: Path) -> Iterator[StartWorker]:
    """Starts ``taskq worker -A tests.acl_tasks`` processes as taskq-worker."""
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        env = {"TASKQ_TEST_MARK_DIR": str(tmp_path)}
        w = WorkerProcess(
            url(server, "worker"), "-A", "tests.acl_tasks", *args, log_path=log, **env
        )
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


@pytest.fixture
def acl_app(server: RedisServer) -> Iterator[None]:
    """tests.acl_tasks' app, enqueueing as taskq-producer."""
    acl_tasks.app.settings = acl_tasks.app.settings.replace(redis_url=url(server, "producer"))
    yield
    acl_tasks.app.close()


@pytest.mark.slow
def test_everything_each_role_does_passes_its_acl(
    server: RedisServer,
    admin: redis.Redis,
    acl_app: None,
    start_acl_worker: StartWorker,
    tmp_path: Path,
) -> None:
    """The run the command lists come from (docs/security.md), on queue ``acl``: every
    feature, as the three users, and Redis refuses nothing."""
    w1 = _every_feature_runs(start_acl_worker, tmp_path)
    _the_operator_cancels_and_looks(functools.partial(operator, server), admin)
    _dead_and_stopped_workers_give_their_jobs_back(start_acl_worker, w1)
    _without_workers_jobs_are_cancelled_and_purged(functools.partial(operator, server))
    assert denials(admin) == []
    assert "NOPERM" not in "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))


def _state(job: Job) -> str:
    return job.status().state


def _every_feature_runs(start: StartWorker, tmp_path: Path) -> WorkerProcess:
    t = acl_tasks
    # given jobs of every kind, enqueued as the producer
    body = chord(group(t.add.s(i, i) for i in range(3)), t.total.s()).delay()
    broken = chord(group([t.add.s(1, 1), t.fails.s()]), t.total.s()).on_error(t.errback.s())
    broken_flow = broken.delay()
    limited = [t.limited.delay("k", i) for i in range(6)]
    unique = t.unique.delay(1)
    expired = t.add.apply_async((0, 0), expires=0.01)
    overrun, crashed = t.overruns.delay(), t.crashes_once.delay()
    # when a worker runs them, and the periodic ticks
    w1 = start("-c", "3", "--prefetch", "1")  # a child each: a long job, an exclusive one, the rest
    # then each ends as it should
    assert body.result(timeout=20) == 6
    with pytest.raises(TaskFailed):
        broken_flow.result(timeout=20)
    assert [j.result(timeout=20) for j in limited] == list(range(6))
    assert unique.result(timeout=20) == 1 and t.unique.delay(1).id != unique.id  # released
    with pytest.raises(JobExpired):
        expired.result(timeout=20)
    with pytest.raises(TaskFailed):
        overrun.result(timeout=20)
    assert crashed.result(timeout=20) == "second attempt"
    wait_until(lambda: list(tmp_path.glob("tick-*")), message="a periodic tick")
    return w1


def _the_operator_cancels_and_looks(op: Callable[..., str], admin: redis.Redis) -> None:
    t = acl_tasks
    # given jobs running, held for a concurrency slot, retrying and scheduled
    running, first = t.sleeper.delay(30), t.exclusive.delay(1, 3.0)
    retrying, scheduled = t.retries_later.delay(), t.add.apply_async((1, 1), countdown=60)
    wait_until(lambda: _state(first) == "running", message="the exclusive job to run")
    held = t.exclusive.delay(2)
    wait_until(lambda: admin.zcard("acl:held:tests.acl_tasks.exclusive"), message="a held job")
    wait_until(lambda: _state(retrying) == "retrying" and _state(running) == "running")
    # when the operator cancels them, then looks at everything
    for job in (held, retrying, scheduled):
        assert op("job", "cancel", job.id, "-Q", "acl") == f"{job.id}: cancelled\n"
    terminating = op("job", "cancel", running.id, "-Q", "acl", "--terminate")
    assert terminating == f"{running.id}: terminating\n"
    with pytest.raises(JobCancelled):
        running.result(timeout=20)
    for view in ("queues", "workers", "active", "pending", "registered", "ping"):
        op("inspect", view, "-Q", "acl")
    assert '"desired_processes"' in op("scale", "acl", "--json")
    short = t.sleeper.delay(0.3).id
    assert "succeeded" in op("job", short, "-Q", "acl", "--wait", "--timeout", "10")
    assert "tick" in op("periodic", "list", app="tests.acl_tasks")
    assert "fails" in op("deadletter", "list", "-Q", "acl")
    assert op("deadletter", "retry", "-Q", "acl", "--all").startswith("re-enqueued")
    op("deadletter", "purge", "-Q", "acl", "--older-than", "1d", "-y")
    op("deadletter", "purge", "-Q", "acl", "-y")
    # a pause: the worker sets a job of the paused task aside; the resume brings it back
    op("pause", "acl", "--task", t.add.name)
    time.sleep(1.0)  # every worker has read it
    paused = t.add.delay(2, 2)
    aside = f"acl:held:paused:{len(t.add.name)}:{t.add.name}:"
    wait_until(lambda: admin.zcard(aside) == 1, message="the job to be set aside")
    assert _state(paused) == "waiting"
    assert "1 job(s) set aside went back" in op("resume", "acl", "--task", t.add.name)
    assert paused.result(timeout=20) == 4
    # a job that keeps no record, cancelled before any worker meets it: its tombstone
    assert op("job", "cancel", "0" * 32, "-Q", "acl") == f"{'0' * 32}: requested\n"


def _dead_and_stopped_workers_give_their_jobs_back(start: StartWorker, w1: WorkerProcess) -> None:
    t = acl_tasks
    # given a worker that dies running jobs (long ones: two of its children may still be
    # coming back from the kills above, one of them for the dead letters the operator
    # retried, so the second job may start only a few seconds after the first)
    lost = [t.sleeper.delay(5.0) for _ in range(2)]
    wait_until(lambda: all(_state(j) == "running" for j in lost), 20, message="both running")
    w2 = start("-c", "1")
    w1.kill_all()
    # then another worker's sweep takes them back
    assert [j.result(timeout=40) for j in lost] == [5.0, 5.0]
    # and a worker stopped with jobs in hand hands them back for the next one
    more = [t.sleeper.delay(0.3), *(t.add.delay(i, 0) for i in range(10))]
    w2.signal(signal.SIGTERM)
    w2.wait()
    w3 = start("-c", "2")
    assert [j.result(timeout=20) for j in more] == [0.3, *range(10)]
    w3.signal(signal.SIGTERM)
    w3.wait()


def _without_workers_jobs_are_cancelled_and_purged(op: Callable[..., str]) -> None:
    waiting = acl_tasks.unique.delay(42)  # in its stream, holding its lock
    assert op("job", "cancel", waiting.id, "-Q", "acl") == f"{waiting.id}: cancelled\n"
    acl_tasks.add.starmap([(1, 1)] * 3)
    assert op("purge", "acl", "-y").startswith("removed ")  # and any tick left behind


def test_a_worker_keeps_steps_and_cursors_and_a_producer_reads_them(
    server: RedisServer, admin: redis.Redis
) -> None:
    from taskq.testing import drain
    from tests import resumable_tasks

    app, saved = resumable_tasks.app, resumable_tasks.app.settings
    app.close()
    # queue acl: the module's worker serves tasks, and would take these jobs
    app.settings = saved.replace(redis_url=url(server, "producer"), store_results=True, queue="acl")
    try:
        job, walk = resumable_tasks.reads_s1.delay(), resumable_tasks.walks_stored.delay("x")
        app.close()
        app.settings = app.settings.replace(redis_url=url(server, "worker"))
        drain(app)  # as taskq-worker: the fenced writes and the end's TTL
        app.close()
        app.settings = app.settings.replace(redis_url=url(server, "producer"))
        assert [s.state for s in job.status().steps] == ["done"]
        assert [c.items for c in walk.status().cursors] == [10]
        assert denials(admin) == []
    finally:
        app.close()
        app.settings = saved


@pytest.mark.parametrize(
    "role",
    [
        "producer",
        pytest.param(
            "worker",
            marks=pytest.mark.skipif(REDIS_6, reason="Redis 6.2 has no read-only key rules"),
        ),
    ],
)
def test_only_the_operator_pauses_resumes_and_sets_limits(
    server: RedisServer, admin: redis.Redis, role: str
) -> None:
    # given the producer's or the worker's user
    app = App(url(server, role))
    try:
        # when it pauses or resumes, Redis refuses it (NOPERM: no permissions)
        with pytest.raises(BrokerRefused, match="no permissions"):
            app.pause("tasks", task="t.x")
        with pytest.raises(BrokerRefused, match="no permissions"):
            app.resume("tasks", task="t.x")
        with pytest.raises(BrokerRefused, match="no permissions"):
            app.set_limit("t.x", rate="5/s")
        # but a worker may read the pauses and the limits it must obey
        if role == "worker":
            assert read_control(app.link, ["tasks"]) == ({"tasks": {}}, {"tasks": {}})
    finally:
        app.close()
    assert {d[0] for d in denials(admin)} == {f"taskq-{role}"}
    # and the operator may do both, on the command line
    assert operator(server, "pause", "tasks", "--task", "t.x").startswith("paused tasks")
    assert operator(server, "resume", "tasks", "--task", "t.x").startswith("resumed tasks")
    assert operator(server, "limit", "set", "t.x", "--rate", "5/s").startswith("limited t.x")
    assert operator(server, "limit", "clear", "t.x").startswith("cleared")
    assert not admin.exists("tasks:paused")
    # the audit shows the operator's two, and only the operator reads it
    shown = json.loads(operator(server, "audit", "-Q", "tasks", "--json"))
    assert [(e["action"], e["user"]) for e in shown[-4:]] == [
        ("pause", "taskq-operator"),
        ("resume", "taskq-operator"),
        ("limit_set", "taskq-operator"),
        ("limit_clear", "taskq-operator"),
    ]
    with (
        redis.Redis.from_url(url(server, role)) as client,
        pytest.raises(redis.exceptions.NoPermissionError),
    ):
        client.xrange("tasks:audit")


def test_each_role_does_its_part_of_a_fair_queue(server: RedisServer, admin: redis.Redis) -> None:
    # given the queue acl marked fair by a worker's start, and a producer that names it fair
    from taskq.broker.fairness import claim_fairness

    worker_app, producer_app = App(url(server, "worker")), App(url(server, "producer"))
    operator_app = App(url(server, "operator"))
    producer_app.settings = producer_app.settings.replace(queue="acl", fair_queues=("acl",))
    worker_app.settings = worker_app.settings.replace(fair_queues=("acl",))
    try:
        claim_fairness(worker_app.link, ["acl"], {"acl"})
        job = producer_app.task(name="fair.t", store_result=True)(lambda n: n)
        jobs = [job.apply_async((n,), fair_key="A") for n in range(6)]
        plain = producer_app.task(name="fair.p")(lambda n: n)
        plain.apply_async((9,), fair_key="B")
        # a unique job is staged by the producer, a delayed one by the worker's promotion
        job.apply_async((7,), fair_key="A", unique_key="u")
        job.apply_async((8,), fair_key="A", countdown=0.01)
        broker = worker_app.broker_for(["acl"])
        wait_until(lambda: broker.promote(force=True) < 0, message="the delayed job promoted")
        assert admin.llen("acl:fair:normal:k:A") == 7
        # when the producer sets a weight, Redis refuses it; the operator may
        with pytest.raises(BrokerRefused, match="no permissions"):
            producer_app.set_fair_weight("acl", "A", 2)
        admin.acl_log_reset()
        assert "weight 2" in operator(server, "fair", "weight", "acl", "A", "2")
        # and the worker's fetches admit each key's next jobs, the operator cancels a staged
        # one and moves the rest into the stream
        broker.ensure_groups()
        got = broker.fetch("c1", 3).deliveries
        assert len(got) == 3
        assert operator_app.job(jobs[5].id, queue="acl").cancel() == "cancelled"
        # (the fetch took A's first, admitted as it was enqueued, and A's turn of two)
        assert "5 staged job(s) moved" in operator(server, "fair", "off", "acl")
        assert not admin.keys("acl:fair:*")
    finally:
        for app in (worker_app, producer_app, operator_app):
            app.close()
    # then nothing any of them did was refused
    assert denials(admin) == []
