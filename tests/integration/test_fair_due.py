"""Fair queues (docs/fairness.md) with delayed and unique jobs: real Redis, real workers. A
delayed job with a fairness key is staged by its key when it is due, as an enqueue stages
it; so is a unique job: a flood of either waits behind itself, not in front of other
tenants. Hostile keys in the schedule harm nothing and lose nothing."""

from __future__ import annotations

import pytest
import redis

from taskq import App
from taskq.broker.enqueue import FAIR_HEAD
from taskq.keys import QueueKeys
from taskq.message import now_ms
from taskq.ops.jobrows import SCHEDULED, member_row
from tests import tasks
from tests.conftest import wait_until
from tests.integration.test_fair import (
    FAIR,
    K,
    StartWorker,
    check_invariant,
    starts,
    worker,
)

pytestmark = pytest.mark.integration


def promote_all(app: App) -> None:
    """A worker master's housekeeping, until every delayed job left the schedule."""
    broker = app.broker_for(["fair"])

    def promoted() -> bool:
        broker.promote(force=True)
        return app.link.call("ZCARD", K.schedule) == 0

    wait_until(promoted, message="every delayed job promoted")


def test_a_flood_of_delayed_jobs_does_not_starve_a_small_tenant(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    due = now_ms() + 300
    fair_app.enqueue_many(
        tasks.fair_job.message(("A", i, 0.005), {}, eta_ms=due) for i in range(2_000)
    )
    assert r.zcard(K.schedule) == 2_000
    for _ in range(2):
        worker(start_worker, "-c", "4", **FAIR)
    wait_until(lambda: r.zcard(K.schedule) == 0, timeout_s=30, message="A's promotion")
    wait_until(lambda: r.llen("fair_starts") >= 200, timeout_s=30, message="A's drain")
    since = r.llen("fair_starts")
    tasks.fair_job.starmap([("B", i, 0.005) for i in range(10)])
    wait_until(lambda: sum(s.startswith("B:") for s in starts(r, since)) == 10, timeout_s=30)
    after = starts(r, since)
    last_b = max(i for i, s in enumerate(after) if s.startswith("B:"))
    a_before = sum(s.startswith("A:") for s in after[:last_b])
    assert a_before < 100, f"{a_before} of A's jobs started before B's last"
    wait_until(lambda: r.llen("fair_starts") == 2_010, timeout_s=60, message="every job")
    assert len(set(starts(r))) == 2_010


def test_a_delayed_job_with_a_record_is_staged_then_admitted(fair_app: App, r: redis.Redis) -> None:
    first = tasks.add.apply_async((1, 1), queue="fair", fair_key="A")  # in at once: idle
    later = tasks.add.apply_async((2, 2), queue="fair", fair_key="A", countdown=0.05)
    assert r.hget(K.job(later.id), "state") == b"scheduled"
    [member] = r.zrange(K.schedule, 0, -1)
    assert member.split(b"\n", 2)[2].startswith(FAIR_HEAD + b"A\n")
    row = member_row(member, 0, SCHEDULED)  # (browse and the dashboard read past the key)
    assert (row.job_id, row.task) == (later.id, "tests.tasks.add")
    promote_all(fair_app)
    assert r.hmget(K.job(later.id), "state", "entry", "fair_key") == [b"waiting", b"", b"A"]
    assert r.llen(K.fair_staged("normal", "A")) == 1 and r.xlen("fair:normal") == 1
    assert r.zscore(K.fair_waiting, "A") == 1  # (staged jobs)
    check_invariant(r, fair_app)
    broker = fair_app.broker_for(["fair"])
    broker.ensure_groups()
    [got] = broker.fetch("c", 1).deliveries  # the first, undelivered: nothing admitted
    assert got.record_id == first.id
    [got] = broker.fetch("c", 1).deliveries  # A's turn admits the delayed one, read at once
    assert got.record_id == later.id
    fields = r.xrange("fair:normal", got.entry_id, got.entry_id)[0][1]
    assert fields[b"fk"] == b"A" and r.hget(K.job(later.id), "entry") == got.entry_id.encode()
    check_invariant(r, fair_app)


def test_a_staged_delayed_job_is_cancelled_out_of_its_list(fair_app: App, r: redis.Redis) -> None:
    tasks.add.apply_async((1, 1), queue="fair", fair_key="A")
    later = tasks.add.apply_async((2, 2), queue="fair", fair_key="A", countdown=0.05)
    far = tasks.add.apply_async((3, 3), queue="fair", fair_key="A", countdown=600)
    assert far.cancel() == "cancelled"  # found in the schedule past its key
    promote_all(fair_app)
    assert later.cancel() == "cancelled"
    assert not r.exists(K.fair_staged("normal", "A"), K.fair_turns("normal"), K.fair_waiting)
    check_invariant(r, fair_app)


def test_a_queue_not_marked_fair_gets_the_delayed_job_plain(task_app: App, r: redis.Redis) -> None:
    task_app.settings = task_app.settings.replace(fair_queues=("fair",))
    try:
        job = tasks.add.apply_async((1, 2), queue="fair", fair_key="A", countdown=0.05)
    finally:
        task_app.settings = task_app.settings.replace(fair_queues=())
    promote_all(task_app)
    [(entry, fields)] = r.xrange("fair:normal")
    assert b"fk" not in fields and not fields[b"body"].startswith(FAIR_HEAD)
    assert r.hget(K.job(job.id), "entry") == entry
    assert not r.keys("fair:fair:*")


def test_hostile_fair_keys_in_the_schedule_lose_nothing(fair_app: App, r: redis.Redis) -> None:
    r.set("elsewhere", "untouched")
    body = fair_app.encode(tasks.fair_job.message(("H", 0), {}))
    head = b"1\ntests.tasks.fair_job\n"
    bad = {
        head + FAIR_HEAD + b"a b\n" + body: 0,  # whitespace: not a key
        head + FAIR_HEAD + b"x" * 300 + b"\n" + body: 0,  # too long
        head + FAIR_HEAD + b"\x00\x01\n" + body: 0,  # control characters
        head + FAIR_HEAD + b"no-line-after-the-key": 0,  # no body: malformed
    }
    r.zadd(K.schedule, bad)
    promote_all(fair_app)
    entries = r.xrange("fair:normal")
    assert len(entries) == 3  # the jobs with a bad key enter plain, their bodies whole
    assert all(f[b"body"] == body and b"fk" not in f for _, f in entries)
    [(_, dead)] = r.xrange(QueueKeys("fair").deadletter)
    assert dead[b"error"] == b"malformed schedule member"
    assert r.get("elsewhere") == b"untouched" and r.zcard(K.schedule) == 0
    assert not r.keys("fair:fair:*:k:*") and r.zcard(K.fair_waiting) == 0
    broker = fair_app.broker_for(["fair"])
    broker.ensure_groups()
    assert len(broker.fetch("c", 8).deliveries) == 3


def test_a_flood_of_unique_jobs_is_staged_by_its_key(fair_app: App, r: redis.Redis) -> None:
    jobs = [
        tasks.add.apply_async((i, 0), queue="fair", fair_key="A", unique_key=f"u{i}")
        for i in range(5)
    ]
    delayed = tasks.add.apply_async(
        (9, 0), queue="fair", fair_key="A", unique_key="u9", countdown=0.05
    )
    assert r.xlen("fair:normal") == 1 and r.llen(K.fair_staged("normal", "A")) == 4
    assert r.hmget(K.job(jobs[1].id), "entry", "fair_key") == [b"", b"A"]
    promote_all(fair_app)
    assert r.llen(K.fair_staged("normal", "A")) == 5
    assert r.hmget(K.job(delayed.id), "entry", "fair_key") == [b"", b"A"]
    b = tasks.add.apply_async((0, 1), queue="fair", fair_key="B", unique_key="b")
    check_invariant(r, fair_app)
    broker = fair_app.broker_for(["fair"])
    broker.ensure_groups()
    # A's first (in as it was enqueued: the queue was idle), A's turn, then B's turn before
    # A's other staged jobs
    got = broker.fetch("c", 3).deliveries
    assert [d.record_id for d in got] == [jobs[0].id, jobs[1].id, b.id]
    assert r.llen(K.fair_staged("normal", "A")) == 4 and r.xlen("fair:normal") == 3
    check_invariant(r, fair_app)


def test_a_unique_job_of_a_fair_queue_runs_and_frees_its_key(
    fair_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    first = tasks.fair_job.apply_async(("A", 0), unique_key="k")
    tasks.fair_job.apply_async(("A", 1), unique_key="k")  # held: not enqueued
    tasks.fair_job.apply_async(("A", 2), unique_key="other", countdown=0.05)
    worker(start_worker, "-c", "1", **FAIR)
    wait_until(lambda: r.llen("fair_starts") == 2, timeout_s=30, message="both jobs")
    assert sorted(starts(r)) == ["A:0", "A:2"] and first.id
    wait_until(lambda: r.zcard(K.fair_waiting) == 0, message="nothing left waiting")
