"""The outcome step (:class:`taskq.worker.finish.Finisher`) against a real Redis: each kind of
outcome lands where it must, fenced on its owner."""

from __future__ import annotations

from collections.abc import Callable

import msgpack
import pytest
import redis

from taskq import App
from taskq.broker import Broker, Delivery
from taskq.keys import GROUP, RECOVER_CONSUMER
from taskq.message import Message
from taskq.worker.executor import Executor, Prepared
from taskq.worker.finish import Finisher
from taskq.worker.outcome import DEAD, OK, RETRY, Outcome

pytestmark = pytest.mark.integration
OWNER = "w:1:a:0:1"


@pytest.fixture
def setup(make_app: Callable[..., App]) -> tuple[App, Broker, Finisher]:
    app = make_app()

    @app.task(name="finish.t")
    def t() -> None: ...

    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    return app, broker, Finisher(broker, Executor(app))


def deliver(app: App, broker: Broker, consumer: str = OWNER) -> Delivery:
    app.enqueue(Message("finish.t"))
    [d] = broker.fetch(consumer, 1).deliveries
    return d


def test_a_success_is_acked_by_the_next_fetch(
    setup: tuple[App, Broker, Finisher], r: redis.Redis
) -> None:
    app, broker, finisher = setup
    d = deliver(app, broker)
    finisher.record(Outcome(OK, d, attempt=1), owner=OWNER)
    assert r.xlen("tasks:normal") == 1  # not yet: the ack rides on the next fetch
    broker.fetch(OWNER, 0, finisher.take_acks())
    assert r.xlen("tasks:normal") == 0 and finisher.acks == []


def test_a_retry_is_parked_and_a_failure_dead_lettered(
    setup: tuple[App, Broker, Finisher], r: redis.Redis
) -> None:
    app, broker, finisher = setup
    retry, dead = deliver(app, broker), deliver(app, broker)
    msg = Message.decode(retry.body or b"")
    finisher.record(Outcome(RETRY, retry, msg, attempt=1, delay_ms=60_000), owner=OWNER)
    finisher.record(Outcome(DEAD, dead, attempt=3, error_type="E", error="boom"), owner=OWNER)
    [member] = r.zrange("tasks:retry:normal", 0, -1)  # out of the stream, attempts in the body
    assert msgpack.unpackb(member.split(b"\n", 3)[3])["retries"] == 1
    [(_, entry)] = r.xrange("tasks:deadletter")
    assert (entry[b"error"], entry[b"attempts"], entry[b"worker"]) == (
        b"boom",
        b"3",
        OWNER.encode(),
    )
    assert r.xlen("tasks:normal") == 0  # both left the stream


def test_moves_are_fenced_on_the_owner(setup: tuple[App, Broker, Finisher], r: redis.Redis) -> None:
    app, broker, finisher = setup
    d = deliver(app, broker)
    finisher.record(Outcome(DEAD, d, attempt=1), owner="someone-else")
    assert r.xlen("tasks:deadletter") == 0 and r.xlen("tasks:normal") == 1


def test_a_hand_back_keeps_the_attempt_and_unknown_fields(
    setup: tuple[App, Broker, Finisher], r: redis.Redis
) -> None:
    _, broker, finisher = setup
    body = msgpack.packb({"v": 1, "id": "j1", "task": "finish.t", "retries": 2, "x": "kept"})
    r.xadd("tasks:normal", {"task": "finish.t", "body": body})
    [d] = broker.fetch(OWNER, 1).deliveries
    finisher.hand_back(d, owner=OWNER)
    [(new_id, fields)] = r.xrange("tasks:normal")
    back = msgpack.unpackb(fields[b"body"])
    assert new_id.decode() != d.entry_id
    assert (back["retries"], back["x"]) == (2, "kept")  # attempt 3 again, not 4


def test_an_exited_child_is_settled_its_running_job_counting_as_an_attempt(
    setup: tuple[App, Broker, Finisher], r: redis.Redis
) -> None:
    app, broker, finisher = setup
    running, prefetched = deliver(app, broker), deliver(app, broker)
    kinds = finisher.recover_exited(
        OWNER, {(running.stream, running.entry_id)}, "killed by SIGKILL"
    )
    assert kinds == [RETRY]
    assert r.zcard("tasks:retry:normal") == 1  # the lost run counted: parked with a backoff
    ids = [eid.decode() for eid, _ in r.xrange("tasks:normal")]
    assert running.entry_id not in ids and prefetched.entry_id not in ids and len(ids) == 1
    assert OWNER.encode() not in {c["name"] for c in r.xinfo_consumers("tasks:normal", "taskq")}


def test_prepared_type_is_what_recover_uses(setup: tuple[App, Broker, Finisher]) -> None:
    app, broker, finisher = setup
    assert isinstance(finisher.executor.prepare(deliver(app, broker)), Prepared)


GONE = "gone:1:a:0:1"
BAD_REASONS = [
    b"malformed entry: entry field 'ff' is not a time in ms: b'soon'",
    b"malformed entry: entry field 'job' is not a job id: b'\\xff'",
]


def _held_by_a_vanished_consumer(app: App, r: redis.Redis) -> None:
    """A good job between two entries with a bad field each, all pending under ``GONE``."""
    body = Message("finish.t", id="j-bad").encode()
    r.xadd("tasks:normal", {"task": "finish.t", "body": body, "ff": b"soon"})
    app.enqueue(Message("finish.t"))
    r.xadd("tasks:normal", {"task": "finish.t", "body": body, "job": b"\xff"})
    r.xreadgroup(GROUP, GONE, {"tasks:normal": ">"})


def _dead_reasons(r: redis.Redis) -> list[bytes]:
    return [fields[b"error"] for _, fields in r.xrange("tasks:deadletter")]


def test_the_sweep_settles_each_claimed_entry_alone_whatever_its_fields(
    setup: tuple[App, Broker, Finisher], r: redis.Redis
) -> None:
    app, broker, finisher = setup
    _held_by_a_vanished_consumer(app, r)
    claimed = broker.recover("tasks", min_idle_ms=0)  # one XAUTOCLAIM: all three
    kinds = [finisher.recover(d, owner=RECOVER_CONSUMER) for d in claimed]
    assert kinds == [DEAD, RETRY, DEAD]  # the good job's lost run counts: retried
    assert _dead_reasons(r) == BAD_REASONS
    assert r.zcard("tasks:retry:normal") == 1
    assert r.xpending("tasks:normal", GROUP)["pending"] == 0  # nothing left under the sweep


def test_an_exited_consumer_is_settled_entry_by_entry_whatever_its_fields(
    setup: tuple[App, Broker, Finisher], r: redis.Redis
) -> None:
    app, _, finisher = setup
    _held_by_a_vanished_consumer(app, r)
    assert finisher.recover_exited(GONE, set(), "killed by SIGKILL") == []
    assert _dead_reasons(r) == BAD_REASONS
    [(_, handed_back)] = r.xrange("tasks:normal")  # the good job, back in its stream
    assert Message.decode(handed_back[b"body"]).task == "finish.t"
    assert r.xpending("tasks:normal", GROUP)["pending"] == 0
