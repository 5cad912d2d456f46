"""The broker's scripts against a model of where each job must be (hypothesis, stateful).

Random interleavings of enqueue, fetch (with acks and trims), park, dead-letter, hand-back,
housekeeping (promotion of due retries), the crash-recovery sweep, renewal, the tidy-up
behind long jobs, consumer death and Redis restarts run against a real redis-server (AOF,
fsync always, so a restart keeps every write). After every step each job must be in exactly
one place, the place the model expects, and no job's attempt number may go backwards.
Consumers act on deliveries they may have lost to the sweep: the fence must make those
moves no-ops.
"""

from __future__ import annotations

import collections
import time
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

from taskq import App
from taskq.bodypatch import with_retries
from taskq.broker import Broker, Delivery
from taskq.deadletter import Deadletter
from taskq.keys import GROUP, PRIORITIES, RECOVER_CONSUMER, QueueKeys
from taskq.message import Message
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUEUE = "model"
TASK = "model.task"
CONSUMERS = ("w:1:a:0:10", "w:1:a:1:11", "w:2:b:0:20")
LATER_MS = 3_600_000
"""A backoff that never comes due within one example."""
MAX_ATTEMPTS = 3

WAITING, PARKED, PARKED_LATER, DEAD, DONE = "waiting", "parked", "parked-later", "dead", "done"
"""Places of a job besides ``pending:<consumer>`` (done: gone, or a finished entry the trim
has not removed yet)."""


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


def body_of(raw: bytes | None) -> dict[str, object]:
    assert raw is not None
    data: dict[str, object] = msgpack.unpackb(raw, raw=False)
    return data


def attempt_of(d: Delivery) -> int:
    return int(body_of(d.body)["retries"]) + d.deliveries  # type: ignore[call-overload]


class BrokerModel(RuleBasedStateMachine):
    server: RedisServer

    @initialize()
    def start(self) -> None:
        self.client = redis.Redis.from_url(self.server.url)  # for the checks
        self.client.flushall()
        self.app = App(
            self.server.url,
            queue=QUEUE,
            retry_backoff_ms=1,
            retry_backoff_factor=1.0,
            retry_jitter=False,
        )
        self.app.task(name=TASK)(lambda *args: None)
        self.broker = Broker(self.app.link, [QUEUE])
        self.broker.ensure_groups()
        self.finisher = Finisher(self.broker, Executor(self.app))
        self.keys = QueueKeys(QUEUE)
        self.jobs: dict[str, Job] = {}
        self.consumers = {c: ConsumerState() for c in CONSUMERS}

    def teardown(self) -> None:
        self.client.close()
        self.app.close()

    # -- producer ----------------------------------------------------------------------------

    @rule(priority=st.sampled_from(PRIORITIES))
    def enqueue(self, priority: str) -> None:
        # A fixed id, not a random one: hypothesis replays draws that depend on the ids.
        n = len(self.jobs)
        msg = Message(TASK, (n,), id=f"job{n:04d}", queue=QUEUE, priority=priority)
        self.broker.publish(msg, msg.encode())
        self.jobs[msg.id] = Job(priority=priority)

    # -- consumers ---------------------------------------------------------------------------

    @rule(
        consumer=st.sampled_from(CONSUMERS),
        count=st.integers(0, 4),
        trim=st.booleans(),
        fence=st.booleans(),
    )
    def fetch(self, consumer: str, count: int, trim: bool, fence: bool) -> None:
        """(Unfenced acks and no results take the pipelined path without a script, which can
        bring more than ``count`` from several streams: the consumer keeps the first
        ``count`` and hands the others back.)"""
        state = self.consumers[consumer]
        ready = self._ready()
        acks = [d for _, d in state.done]
        fetched = self.broker.fetch(consumer, count, acks, trim=trim, fence_acks=fence).deliveries
        if len(fetched) > count:
            for extra in fetched[count:]:
                body = extra.body or b""
                assert self.broker.requeue(extra, task=TASK, body=body, owner=consumer)
            fetched = fetched[:count]
        for job_id, _ in state.done:
            if self.jobs[job_id].place == f"pending:{consumer}":  # the fence: only if still ours
                self.jobs[job_id].place = DONE
        state.done.clear()
        self._check_priority(fetched, ready)
        for d in fetched:
            job_id = str(body_of(d.body)["id"])
            job = self.jobs[job_id]
            assert job.place == WAITING, (job_id, job.place)
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
            body = with_retries(d.body or b"", attempt_of(d))
            moved = self.broker.park(d, owner=consumer, task=TASK, body=body, delay_ms=delay_ms)
            new_place = PARKED_LATER if outcome == "later" else PARKED
        elif outcome == "dead":
            entry = Deadletter(
                "", TASK, job_id, d.body or b"", "E", "", "", 1, 0, 0, consumer, "", ""
            )
            moved = self.broker.deadletter(d, owner=consumer, entry=entry) is not None
            new_place = DEAD
        else:
            body = with_retries(d.body or b"", attempt_of(d) - 1)
            moved = self.broker.requeue(d, task=TASK, body=body, owner=consumer) is not None
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
    def promote(self) -> None:
        """The masters' housekeeping: due retries go back into their streams. (The sweep
        parks a lost run for the app's 1 ms backoff: wait it out, so that it is due.)"""
        time.sleep(0.003)
        self.broker.promote(force=True)
        for job in self.jobs.values():
            if job.place == PARKED:
                job.place = WAITING

    @rule()
    def sweep(self) -> None:
        """Every entry pending under a consumer is idle for >= 0 ms: all are recovered, each
        its lost run: parked for a retry (due at once) or, out of attempts, dead."""
        for d in self.broker.recover(QUEUE, min_idle_ms=0):
            self.finisher.recover(d, owner=RECOVER_CONSUMER)
        for job in self.jobs.values():
            if job.place.startswith("pending:"):
                job.place = PARKED if job.attempt < MAX_ATTEMPTS else DEAD

    @rule(consumer=st.sampled_from(CONSUMERS))
    def renew(self, consumer: str) -> None:
        self.broker.renew([consumer])

    @rule()
    def tidy(self) -> None:
        self.broker.tidy(QUEUE)

    @rule()
    def restart_redis(self) -> None:
        self.server.kill()
        self.server.start()
        self.broker.disconnect()

    # -- checks ------------------------------------------------------------------------------

    def _ready(self) -> dict[str, int]:
        """Jobs a fetch may deliver now, per priority."""
        return collections.Counter(j.priority for j in self.jobs.values() if j.place == WAITING)

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
        now = _now_ms(self.client)
        for p in PRIORITIES:
            stream = self.keys.stream(p)
            pending = {
                row["message_id"].decode(): row["consumer"].decode()
                for row in self.client.xpending_range(stream, GROUP, "-", "+", 10_000)
            }
            groups = self.client.xinfo_groups(stream)
            last = groups[0]["last-delivered-id"].decode() if groups else "0-0"
            for entry_id, fields in self.client.xrange(stream):
                eid = entry_id.decode()
                owner = pending.get(eid)
                if owner is not None:
                    place = f"pending:{owner}"
                elif _before(last, eid):
                    place = WAITING
                else:
                    continue  # delivered and acked: a finished job not trimmed yet
                found[str(body_of(fields[b"body"])["id"])].append(place)
            for member, score in self.client.zrange(self.keys.retry(p), 0, -1, withscores=True):
                body = member.split(b"\n", 3)[3]
                found[str(body_of(body)["id"])].append(
                    PARKED_LATER if score > now + 60_000 else PARKED
                )
        for _, fields in self.client.xrange(self.keys.deadletter):
            found[fields[b"job_id"].decode()].append(DEAD)
        for job_id, job in self.jobs.items():
            places = found.get(job_id, [])
            assert len(places) <= 1, (job_id, places)
            assert (places[0] if places else DONE) == job.place, (job_id, places, job)
        assert set(found) <= set(self.jobs)


def _before(a: str, b: str) -> bool:
    """Stream id ``a`` < ``b``."""
    am, as_ = (int(x) for x in a.split("-"))
    bm, bs = (int(x) for x in b.split("-"))
    return (am, as_) < (bm, bs)


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
