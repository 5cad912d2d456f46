"""Fair queues (docs/fairness.md): real Redis, real workers. Tenants share the workers in
weighted round robin within a priority; nothing is lost or run twice while its worker lives;
fairness turns off with a migration; hostile stored data harms nothing outside the queue."""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from taskq import App, Job
from taskq.broker.broker import Broker
from taskq.broker.delivery import Delivery
from taskq.broker.fairness import claim_fairness, fair_off, recount_fair
from taskq.errors import BrokerError, ConfigError
from taskq.keys import GROUP, PRIORITIES, QueueKeys
from tests import tasks
from tests.conftest import WorkerProcess, wait_until
from tests.integration.test_chaos import completions

pytestmark = pytest.mark.integration
StartWorker = Callable[..., WorkerProcess]
FAIR = {"TASKQ_FAIR_QUEUES": "fair"}
K = QueueKeys("fair")


def starts(r: redis.Redis, since: int = 0) -> list[str]:
    """The ``<tenant>:<n>`` of each fair_job start, in start order, from position ``since``."""
    return [x.decode() for x in r.lrange("fair_starts", since, -1)]


def enqueue(tenant: str, n: int, seconds: float = 0.0, priority: str = "normal") -> None:
    """``n`` fair_job jobs of ``tenant``, pipelined (each staged or admitted by its key)."""
    if priority == "normal":
        tasks.fair_job.starmap([(tenant, i, seconds) for i in range(n)])
    else:
        for i in range(n):
            tasks.fair_job.apply_async((tenant, i, seconds), priority=priority)


def worker(start_worker: StartWorker, *args: str, **env: str) -> WorkerProcess:
    return start_worker("-A", "tests.tasks", "-Q", "fair", "--loglevel", "warning", *args, **env)


def test_a_small_tenant_is_not_stuck_behind_a_flood(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    enqueue("A", 10_000, 0.005)
    for _ in range(2):
        worker(start_worker, "-c", "4", **FAIR)
    wait_until(lambda: r.llen("fair_starts") >= 200, timeout_s=30, message="A's drain")
    since = r.llen("fair_starts")
    enqueue("B", 10, 0.005)
    wait_until(lambda: sum(s.startswith("B:") for s in starts(r, since)) == 10, timeout_s=30)
    after = starts(r, since)
    last_b = max(i for i, s in enumerate(after) if s.startswith("B:"))
    a_before = sum(s.startswith("A:") for s in after[:last_b])
    assert a_before < 100, f"{a_before} of A's jobs started before B's last"


def test_weights_share_the_starts_three_to_one(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    fair_app.set_fair_weight("fair", "A", 3)
    assert r.hget(K.fair_weights, "A") == b"3"
    enqueue("A", 3_000)
    enqueue("B", 1_000)
    worker(start_worker, "-c", "2", **FAIR)
    wait_until(lambda: r.llen("fair_starts") >= 2_000, timeout_s=30, message="2,000 starts")
    count = collections.Counter(s.split(":")[0] for s in starts(r)[:2_000])
    assert 2.7 <= count["A"] / count["B"] <= 3.3, count
    assert any(b"fair_weight" in e[1].get(b"action", b"") for e in r.xrange(K.audit))


def test_a_high_job_of_another_tenant_starts_before_every_waiting_normal_job(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    enqueue("A", 50)
    enqueue("B", 50)
    enqueue("C", 1, priority="high")
    worker(start_worker, "-c", "1", **FAIR)
    wait_until(lambda: r.llen("fair_starts") == 101, timeout_s=30, message="every job")
    order = starts(r)
    assert order[0] == "C:0"
    # A's first job went in as it was enqueued (the queue was idle); then the keys take turns
    assert order[1:7] == ["A:0", "A:1", "B:0", "A:2", "B:1", "A:3"]


@pytest.mark.slow
@pytest.mark.timeout(300)  # (the drain's own wait is up to 240 s on a loaded machine)
def test_a_hundred_thousand_tenants_with_one_job_each_drain(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    msgs = (tasks.fair_job.message((f"t{i}", 0), {}) for i in range(100_000))
    fair_app.enqueue_many(msgs)
    assert r.zcard(K.fair_waiting) == 100_000 - 1  # (the first went in as it was enqueued)
    assert r.llen(K.fair_turns("normal")) == 100_000 - 1
    for _ in range(2):
        worker(start_worker, "-c", "2", **FAIR)
    wait_until(lambda: r.llen("fair_starts") == 100_000, timeout_s=240, message="the drain")
    wait_until(lambda: r.zcard(K.fair_waiting) == 0, message="no key left waiting")
    assert not r.exists(K.fair_turns("normal"))
    assert r.get(K.fair_staged_count("normal")) == b"0"
    assert len(set(starts(r))) == 100_000


def test_sigkill_mid_drain_loses_no_job_and_runs_none_twice_while_its_worker_lived(
    fair_app: App, start_worker: StartWorker, r: redis.Redis, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    msgs = [
        tasks.mark.message((i, 0.002), {}, queue="fair", fair_key=f"t{i % 7}") for i in range(1500)
    ]
    ids = {j.id for j in fair_app.enqueue_many(msgs)}
    env = {**FAIR, "TASKQ_TEST_MARK_DIR": str(marks), "TASKQ_VISIBILITY_TIMEOUT_MS": "1500"}
    w = worker(start_worker, "-c", "2", **env)
    wait_until(lambda: sum(completions(marks).values()) >= 300, timeout_s=30)
    w.kill_all()
    killed = {f.name for f in marks.glob("*.log")}
    worker(start_worker, "-c", "2", **env)
    wait_until(lambda: set(completions(marks)) >= ids, timeout_s=90, message="every job")
    for name in {f.name for f in marks.glob("*.log")}:  # each process ran each job once
        lines = (marks / name).read_text().split("\n")
        ran = collections.Counter(x.split()[0] for x in lines if x.strip())
        assert max(ran.values()) == 1, name
    twice = [j for j, n in completions(marks).items() if n > 1]
    survivors = {f.name for f in marks.glob("*.log")} - killed
    for job in twice:  # the first run's worker died: only then does a job run again
        per_file = [(marks / f).read_text().count(job) for f in killed]
        assert sum(per_file) >= 1, job
    assert survivors
    wait_until(lambda: r.zcard(K.fair_waiting) == 0, message="no key left waiting")


def test_fair_off_moves_the_staged_jobs_and_a_plain_worker_drains_them(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    enqueue("A", 300)
    enqueue("B", 200)
    enqueue("C", 5, priority="high")
    assert r.llen(K.fair_staged("normal", "A")) == 299
    # Staged jobs wait too: inspect and the autoscaling signal count them.
    snapshot = fair_app.reader.queue("fair")
    assert [s.waiting for s in snapshot.streams] == [5, 500, 0]
    with pytest.raises(ConfigError, match="taskq fair off fair"):
        claim_fairness(fair_app.link, ["fair"], set())  # a plain worker's start
    assert fair_off(fair_app.link, "fair") == 299 + 200 + 4  # (each first went in at once)
    assert not r.keys("fair:fair:*")
    assert r.xlen("fair:normal") == 500 and r.xlen("fair:high") == 5
    fair_app.settings = fair_app.settings.replace(fair_queues=())
    worker(start_worker, "-c", "2")
    wait_until(lambda: r.llen("fair_starts") == 505, timeout_s=30, message="every job")
    assert len(set(starts(r))) == 505


def test_a_plain_worker_refuses_to_start_while_jobs_are_staged(
    fair_app: App, start_worker: StartWorker
) -> None:
    enqueue("A", 3)
    w = worker(start_worker, "-c", "1")
    assert w.wait(30) != 0
    assert "taskq fair off fair" in w.output()


def test_a_staged_job_is_cancelled_and_an_admitted_one_leaves_the_stream(
    fair_app: App, r: redis.Redis
) -> None:
    first, second, third = (
        tasks.add.apply_async((i, 1), queue="fair", fair_key="A") for i in range(3)
    )
    assert first.entry_id and not second.entry_id and not third.entry_id  # (the queue was idle)
    assert r.hget(K.job(second.id), "entry") == b""
    assert second.cancel() == "cancelled"
    assert r.llen(K.fair_staged("normal", "A")) == 1
    assert r.lrange(K.fair_turns("normal"), 0, -1) == [b"A"]
    assert r.zscore(K.fair_waiting, "A") == 1
    assert first.cancel() == "cancelled"
    assert r.xlen("fair:normal") == 0
    broker = fair_app.broker_for(["fair"])
    [got] = broker.fetch("c", 8).deliveries  # the fetch admits the third, in its turn
    assert got.record_id == third.id
    assert r.hget(K.job(third.id), "entry") == got.entry_id.encode()
    assert r.hget(K.job(third.id), "fair_key") == b"A"
    assert not r.exists(K.fair_waiting, K.fair_turns("normal"), K.fair_staged("normal", "A"))
    assert second.status().state == "cancelled"


def test_an_enqueue_before_any_fair_worker_marked_the_queue_is_plain(
    task_app: App, r: redis.Redis
) -> None:
    task_app.settings = task_app.settings.replace(fair_queues=("fair",))
    try:
        enqueue("A", 3)
    finally:
        task_app.settings = task_app.settings.replace(fair_queues=())
    assert r.xlen("fair:normal") == 3
    assert not r.keys("fair:fair:*")
    assert all(b"fk" not in f for _, f in r.xrange("fair:normal"))


def test_hostile_fair_data_is_skipped_and_touches_nothing_outside_the_queue(
    fair_app: App, r: redis.Redis
) -> None:
    r.hset(K.fair_weights, "A", "lots")  # a bad weight: 1
    r.set("elsewhere", "untouched")
    enqueue("A", 2)
    staged = K.fair_staged("normal", "A")
    r.rpush(staged, b"\xc1 not msgpack", b"\x93\xa1a\xa1b\xa1c")  # neither is an entry
    enqueue("A", 1)
    r.xadd("fair:normal", {"task": "tests.tasks.fair_job", "body": b"x", "fk": "a b"})
    r.xadd("fair:normal", {"task": "tests.tasks.fair_job", "body": b"x", "fk": "x" * 300})
    broker = fair_app.broker_for(["fair"])
    broker.ensure_groups()
    got: list[Delivery] = []
    for _ in range(10):
        got += broker.fetch("c", 8).deliveries
    assert len(got) == 3 + 2  # the three jobs and the two entries with a bad key
    assert r.get("elsewhere") == b"untouched"
    assert not r.exists(staged)
    assert r.zcard(K.fair_waiting) == 0  # the dropped elements were counted off
    with pytest.raises(BrokerError):  # a bad key or weight is refused before any write
        fair_app.link.script("fair_weight", [K.fair_weights, K.audit], ["a b", 2, 10, "x", "y"])


def test_fair_keys_of_the_wrong_type_stop_no_fetch(fair_app: App, r: redis.Redis) -> None:
    enqueue("A", 3)
    enqueue("B", 2, priority="low")
    r.rpush(K.fair_turns("normal"), "Z")  # a key whose staged jobs are not a list
    r.hset(K.fair_staged("normal", "Z"), "x", "y")
    r.delete(K.fair_turns("low"))
    r.set(K.fair_turns("low"), "not a list")  # turns that are not a list
    r.delete(K.fair_waiting)
    r.set(K.fair_waiting, "not a sorted set")
    broker = fair_app.broker_for(["fair"])
    broker.ensure_groups()
    got = [d for _ in range(4) for d in broker.fetch("c", 8).deliveries]
    assert len(got) == 3 + 1  # A's three; B's first (in as it was enqueued), no more of B's
    assert r.lrange(K.fair_turns("normal"), 0, -1) == []  # Z dropped from the turns
    assert r.hgetall(K.fair_staged("normal", "Z")) == {b"x": b"y"}  # and left alone


# -- the invariant, under random operations -----------------------------------------------


def check_invariant(r: redis.Redis, app: App, *, recounted: bool = False) -> None:
    """For every priority: its turns hold each key with staged jobs once, and no other; its
    staged count is the length of its keys' lists. The waiting keys are the keys with staged
    jobs in any priority, each scored at least its staged jobs (exactly, just after a
    recount), and ``app.fair_key`` counts them exactly."""
    waiting: collections.Counter[str] = collections.Counter()
    for p in PRIORITIES:
        turns = [k.decode() for k in r.lrange(K.fair_turns(p), 0, -1)]
        assert len(turns) == len(set(turns)), (p, turns)
        staged = 0
        for key in ("A", "B", "C", "default"):
            n = r.llen(K.fair_staged(p, key))
            assert (key in turns) == (n > 0), (p, key, n, turns)
            waiting[key] += n
            staged += n
        assert set(turns) <= {"A", "B", "C", "default"}, turns
        assert int(r.get(K.fair_staged_count(p)) or 0) == staged, p
    stored = {k.decode(): int(v) for k, v in r.zrange(K.fair_waiting, 0, -1, withscores=True)}
    assert set(stored) == {k for k, n in waiting.items() if n}
    assert all(stored[k] >= waiting[k] for k in stored), (stored, waiting)
    if recounted:
        assert stored == {k: n for k, n in waiting.items() if n}
    assert {k: app.fair_key("fair", k).waiting for k in waiting} == waiting


def enqueue_one(rng: random.Random, step: int, jobs: list[Job], *, delayed: bool) -> None:
    """A job of a random key and priority, with a record (kept in ``jobs``) or not; a
    ``delayed`` one is due at once and staged when promoted."""
    key, p = rng.choice(["A", "B", "C", None]), rng.choice(PRIORITIES)
    later = {"countdown": 0.001} if delayed else {}
    if rng.random() < 0.5:
        jobs.append(tasks.add.apply_async((1, 2), queue="fair", priority=p, fair_key=key, **later))
    else:
        tasks.fair_job.apply_async((key or "default", step), priority=p, fair_key=key, **later)


def remove_or_move(app: App, r: redis.Redis, rng: random.Random, *, move: bool) -> None:
    """An operator removes, or moves to a random priority, the newest admitted entries of a
    random priority."""
    p = rng.choice(PRIORITIES)
    ids = [e.decode() for e, _ in r.xrevrange(K.stream(p), count=3)]
    if move:
        to = rng.choice(PRIORITIES)
        app.link.script("jobs_move", [K.stream(p), K.stream(to)], [GROUP, to, *ids])
    else:
        app.link.script("jobs_remove", [K.stream(p), K.counts], [GROUP, "stream", 1000, "", *ids])


def test_turns_match_the_staged_jobs_under_random_operations(fair_app: App, r: redis.Redis) -> None:
    rng = random.Random(37)
    fair_app.set_fair_weight("fair", "B", 2)
    broker = fair_app.broker_for(["fair"])
    broker.ensure_groups()
    held: list[Delivery] = []
    jobs: list[Job] = []
    for step in range(300):
        op = rng.choice("eeeeffcrmphddPR")
        if op in "ed":
            enqueue_one(rng, step, jobs, delayed=op == "d")
        elif op == "P":
            broker.promote(force=True)
        elif op == "f":
            n = rng.randint(0, len(held))
            got = broker.fetch("c", rng.randint(1, 6), held[:n])
            held = held[n:] + list(got.deliveries)
        elif op == "c" and jobs:
            rng.choice(jobs).cancel()
        elif op in "rm":
            remove_or_move(fair_app, r, rng, move=op == "m")
        elif op == "p":
            fair_app.operators.purge_waiting("fair", [rng.choice(PRIORITIES)])
        elif op == "h" and held:
            d = held.pop(rng.randrange(len(held)))
            broker.requeue(d, task="tests.tasks.fair_job", body=d.body or b"", owner="c")
        elif op == "R":
            recount_fair(fair_app.link, ["fair"])
        check_invariant(r, fair_app, recounted=op == "R")
    drain_fetches(broker, held)
    assert not r.keys("fair:fair:*:k:*") and not r.exists(*(K.fair_turns(p) for p in PRIORITIES))


def test_a_fair_worker_makes_the_top_keys_ranks_exact(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # Given: waiting keys whose scores overstate their staged jobs (admissions do not lower
    # them), one with none left at all; A's jobs are in no turns, so no admission takes them.
    r.zadd(K.fair_waiting, {"gone": 40, "A": 30})
    r.rpush(K.fair_staged("low", "A"), b"job")
    r.rpush(K.fair_staged("high", "A"), b"job", b"job")
    # When: a fair worker runs.
    worker(start_worker, "-c", "1", **FAIR)
    # Then: within a recount, the key without jobs is gone and A's score is its jobs.
    wait_until(lambda: r.zrange(K.fair_waiting, 0, -1, withscores=True) == [(b"A", 3.0)])


def drain_fetches(broker: Broker, held: list[Delivery]) -> None:
    """Fetch (acking what came) until a fetch finds nothing: the admissions take every staged
    job."""
    while got := broker.fetch("c", 6, held).deliveries:
        held = list(got)


def test_a_staged_job_without_a_record_is_cancelled_by_its_tombstone(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    jobs = [tasks.fair_job.apply_async(("A", n)) for n in range(3)]
    assert jobs[2].cancel() == "requested"  # staged: not found in the stream
    worker(start_worker, "-c", "1", **FAIR)
    wait_until(lambda: r.hget("fair:counts", "cancelled") == b"1", message="the cancel honoured")
    wait_until(lambda: r.zcard(K.fair_waiting) == 0, message="nothing left waiting")
    assert starts(r) == ["A:0", "A:1"]
