"""The broker's scripts against a model of where each job must be (hypothesis, stateful).

Random interleavings of enqueue, fetch (with acks), park, dead-letter, hand-back, sweep,
renew, consumer death and Redis restarts run against a real redis-server (AOF, fsync always,
so a restart keeps every write). After every step each job must be in exactly one place,
the place the model expects, and no job's attempt number may go backwards. Consumers act on
deliveries they may have lost to the sweep: the fence must make those moves no-ops.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from taskq.broker import Broker, Delivery, connect
from taskq.deadletter import Deadletter
from taskq.keys import GROUP, PRIORITIES, RETRY_CONSUMER, QueueKeys
from taskq.message import Message, with_retries
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUEUE = "model"
CONSUMERS = ("w:1:a:0:10", "w:1:a:1:11", "w:2:b:0:20")
LATER_MS = 3_600_000
"""A backoff that never comes due within one example."""

WAITING, PARKED, PARKED_LATER, DEAD, DONE = "waiting", "parked", "parked-later", "dead", "done"
"""Places of a job besides ``pending:<consumer>``."""


@dataclass
class Job:
    """What the model knows of one job."""

    place: str = WAITING
    priority: str = "normal"
    attempt: int = 0
    """The attempt of its latest delivery (0: never delivered)."""
    uncounted: bool = False
    """Handed back: the next delivery must have the same attempt number."""


@dataclass
class ConsumerState:
    """A consumer's memory: deliveries it holds and finished jobs whose acks it carries."""

    held: dict[str, Delivery] = field(default_factory=dict)
    done: list[tuple[str, Delivery]] = field(default_factory=list)


def job_id_of(body: bytes | None) -> str:
    assert body is not None
    return str(msgpack.unpackb(body, raw=False)["id"])


def attempt_of(d: Delivery) -> int:
    assert d.body is not None
    return int(msgpack.unpackb(d.body, raw=False)["retries"]) + d.deliveries


class BrokerModel(RuleBasedStateMachine):
    server: RedisServer

    @initialize()
    def start(self) -> None:
        self.client = redis.Redis.from_url(self.server.url)  # for the checks
        self.client.flushall()
        self.link = connect(self.server.url)
        self.broker = Broker(self.link, [QUEUE])
        self.broker.ensure_groups()
        self.keys = QueueKeys(QUEUE)
        self.jobs: dict[str, Job] = {}
        self.consumers = {c: ConsumerState() for c in CONSUMERS}

    def teardown(self) -> None:
        self.client.close()
        self.link.close()

    # -- producer ----------------------------------------------------------------------------

    @rule(priority=st.sampled_from(PRIORITIES))
    def enqueue(self, priority: str) -> None:
        # A fixed id, not a random one: hypothesis replays draws that depend on the ids.
        n = len(self.jobs)
        msg = Message("model.task", (n,), id=f"job{n:04d}", queue=QUEUE, priority=priority)
        self.broker.publish(msg, msg.encode())
        self.jobs[msg.id] = Job(priority=priority)

    # -- consumers ---------------------------------------------------------------------------

    @rule(consumer=st.sampled_from(CONSUMERS), count=st.integers(0, 4))
    def fetch(self, consumer: str, count: int) -> None:
        state = self.consumers[consumer]
        acks = [(d, d.deliveries > 1) for _, d in state.done]
        ready = self._ready()
        fetched = self.broker.fetch(consumer, count, acks)
        for job_id, _ in state.done:
            if self.jobs[job_id].place == f"pending:{consumer}":  # the fence: only if still ours
                self.jobs[job_id].place = DONE
        state.done.clear()
        self._check_priority(fetched.deliveries, ready)
        for d in fetched.deliveries:
            job_id = job_id_of(d.body)
            job = self.jobs[job_id]
            assert job.place in (WAITING, PARKED), (job_id, job.place)
            attempt = attempt_of(d)
            expected = job.attempt if job.uncounted else job.attempt + 1
            assert attempt == max(expected, 1), (job_id, attempt, job)
            job.place, job.attempt, job.uncounted = f"pending:{consumer}", attempt, False
            state.held[job_id] = d

    @precondition(lambda self: any(s.held for s in self.consumers.values()))
    @rule(data=st.data(), outcome=st.sampled_from(("ok", "retry", "later", "dead", "back")))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        consumer = data.draw(st.sampled_from([c for c, s in self.consumers.items() if s.held]))
        state = self.consumers[consumer]
        job_id = data.draw(st.sampled_from(sorted(state.held)))
        d = state.held.pop(job_id)
        job = self.jobs[job_id]
        ours = job.place == f"pending:{consumer}"
        if outcome == "ok":
            state.done.append((job_id, d))
            return
        if outcome in ("retry", "later"):
            delay_ms = LATER_MS if outcome == "later" else 0
            moved = self.broker.park(d, owner=consumer, delay_ms=delay_ms)
            new_place = PARKED_LATER if outcome == "later" else PARKED
        elif outcome == "dead":
            entry = Deadletter(
                "", "model.task", job_id, d.body or b"", "E", "", "", 1, 0, 0, consumer, "", ""
            )
            moved = self.broker.deadletter(d, owner=consumer, entry=entry) is not None
            new_place = DEAD
        else:
            body = with_retries(d.body or b"", attempt_of(d) - 1)
            moved = self.broker.requeue(d, task="model.task", body=body, owner=consumer) is not None
            new_place = WAITING
            job.uncounted = moved
        assert moved == ours, (outcome, job_id, job.place, consumer)
        if moved:
            job.place = new_place

    @rule(consumer=st.sampled_from(CONSUMERS))
    def die(self, consumer: str) -> None:
        """The consumer's process is gone: what it held and the acks it carried are lost."""
        self.consumers[consumer] = ConsumerState()

    # -- maintenance -------------------------------------------------------------------------

    @rule()
    def sweep(self) -> None:
        """Every entry pending under a consumer is idle for >= 0 ms: all are recovered."""
        self.broker.sweep(QUEUE, min_idle_ms=0)
        for job in self.jobs.values():
            if job.place.startswith("pending:"):
                job.place = PARKED

    @rule(consumer=st.sampled_from(CONSUMERS))
    def renew(self, consumer: str) -> None:
        self.broker.renew([consumer])

    @rule()
    def restart_redis(self) -> None:
        self.server.kill()
        self.server.start()
        self.broker.disconnect()

    # -- checks ------------------------------------------------------------------------------

    def _ready(self) -> dict[str, int]:
        """Jobs a fetch may deliver now, per priority (waiting, or parked and due)."""
        ready: collections.Counter[str] = collections.Counter()
        for job in self.jobs.values():
            if job.place in (WAITING, PARKED):
                ready[job.priority] += 1
        return ready

    def _check_priority(self, delivered: list[Delivery], ready: dict[str, int]) -> None:
        """Strict priority: a lower priority only once every ready higher one was taken."""
        got = collections.Counter(d.priority for d in delivered)
        for i, p in enumerate(PRIORITIES):
            if any(got[lower] for lower in PRIORITIES[i + 1 :]):
                assert got[p] == ready.get(p, 0), (p, got, ready)

    @invariant()
    def every_job_is_in_exactly_one_place(self) -> None:
        if not hasattr(self, "broker"):
            return
        found: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        for p in PRIORITIES:
            stream = self.keys.stream(p)
            pending = {
                row["message_id"].decode(): row["consumer"].decode()
                for row in self.client.xpending_range(stream, GROUP, "-", "+", 10_000)
            }
            retry = {
                m.decode(): s
                for m, s in self.client.zrange(self.keys.retry(p), 0, -1, withscores=True)
            }
            for entry_id, fields in self.client.xrange(stream):
                eid = entry_id.decode()
                owner = pending.get(eid)
                if owner is None:
                    place = WAITING
                elif owner == RETRY_CONSUMER:
                    assert eid in retry, f"{eid} is parked without a due time"
                    place = PARKED_LATER if retry[eid] > _now_ms(self.client) + 60_000 else PARKED
                else:
                    place = f"pending:{owner}"
                found[job_id_of(fields[b"body"])].append(place)
        for _, fields in self.client.xrange(self.keys.deadletter):
            found[fields[b"job_id"].decode()].append(DEAD)
        for job_id, job in self.jobs.items():
            places = found.get(job_id, [])
            assert len(places) <= 1, (job_id, places)
            assert (places[0] if places else DONE) == job.place, (job_id, places, job)
        assert set(found) <= set(self.jobs)


def _now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.fixture(scope="module")
def fsync_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(
        Path(tmp_path_factory.mktemp("model-redis")), appendonly=True, appendfsync="always"
    )
    server.start()
    yield server
    server.kill()


def test_scripts_keep_every_job_in_exactly_one_place(fsync_server: RedisServer) -> None:
    BrokerModel.server = fsync_server
    run_state_machine_as_test(
        BrokerModel,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
