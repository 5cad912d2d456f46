"""The control plane (limits, slots, cancel, unique locks, workflow ops) against a model
(hypothesis, stateful).

Two workers' consumers (each the real :class:`Consumer`, its job run in a thread that
blocks inside the task until a rule ends it) take batches of jobs of a rate-limited task,
of a concurrency-limited task (one slot), of a unique task and of chains of three steps,
all with status records. Rules start and end runs (success, retry, failure for good, a
cancel's interrupt), hand back the rest of a batch as the master does behind a long job
(the consumer then reaches the stale deliveries), cancel jobs wherever they are, kill a
worker (its entries go to the sweep: XAUTOCLAIM), promote due retries and restart Redis
(AOF, fsync always). After every step:

- each job is in exactly one place (its stream, pending or not; the schedule; its retry
  set; its task's held set; the dead letters) and its record says the same, or it ended
  and is in none;
- each concurrency slot is held by a job running on that worker (pending under one of its
  consumers), and no job waits for a slot while none is taken nor coming;
- each unique lock is held by a job that has not ended;
- each chain ends: no step is left ``pending`` once the one before it ended, a step after
  one that failed or was cancelled ended too, and no step started before the one before it
  succeeded.

Three faults it found are pinned by a replayed sequence each (a stale delivery of a revoked
batch taking a slot, a job cancelled after its fetch starting, a cancelled job on its way to
a slot stranding the next held one).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

from taskq import App, chain
from taskq.broker import Broker, Delivery
from taskq.broker.records import Records
from taskq.broker.workers import WorkerRegistry
from taskq.context import current_job
from taskq.errors import JobCancelled
from taskq.keys import GROUP, PRIORITIES, RECOVER_CONSUMER, QueueKeys, worker_of
from taskq.results import FINAL
from taskq.worker.cancels import START_CHECK_HOLDS_S
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor
from taskq.worker.finish import Finisher
from taskq.worker.scoreboard import Scoreboard
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUEUE = "cp"
PLAIN, RATE, CONC, UNIQ = "cp.plain", "cp.rate", "cp.conc", "cp.uniq"
CONC_LIMIT = 1
RATE_LIMIT = "7/m"
"""One start, then a slot every 8,571.4 ms (not a whole ms): deferred jobs are not due
within an example, so where a job goes does not depend on the test's pace."""
WORKER_TTL_MS = 600_000
"""Workers are declared dead by the test (their registry entry goes), never by time."""
SWEEP_IDLE_MS = 40
"""The sweep claims entries idle this long; live consumers' leases are renewed just before."""
WAIT_S = 30.0
SLOTS = ("a", "b")
MAX_DEATHS = MAX_RESTARTS = 2
MAX_CANCELS = 4
MAX_JOBS = 12
"""Per example: most steps should be work."""

STREAM, PENDING, SCHEDULED, RETRYING, HELD, DEAD = (
    "stream",
    "pending",
    "scheduled",
    "retrying",
    "held",
    "dead",
)


class Fatal(Exception):
    """A failure the tasks never retry (fail for good)."""


class Died(BaseException):
    """The child's process is gone: nothing after it runs (not an Exception: no outcome)."""


_runner = threading.local()


def _act(*args: Any) -> None:
    """Every task: tell the test the job entered, then do what it says."""
    job = current_job()
    assert job is not None
    runner: Runner = _runner.value
    runner.events.put(("entered", job.id))
    verdict = runner.verdicts.get(timeout=WAIT_S)
    if verdict == "retry":
        raise ValueError("retry me")
    if verdict == "fatal":
        raise Fatal("for good")
    if verdict == "cancel":  # what the cancel signal raises in the task's code
        raise JobCancelled(job.id, "cancelled while running")
    if verdict == "die":
        raise Died()


class Runner:
    """One consumer's thread: ``process`` of one delivery, which blocks in the task."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.verdicts: queue.Queue[str] = queue.Queue()
        self.thread: threading.Thread | None = None

    def start(self, consumer: Consumer, d: Delivery, rest: list[Delivery]) -> tuple[str, Any]:
        """Run the delivery; returns ("entered", job id) or ("done", process's result)."""

        def target() -> None:
            _runner.value = self
            try:
                self.events.put(("done", consumer.process(d, rest)))
            except Died:
                self.events.put(("died", None))
            except BaseException as exc:  # the test's failure, raised in the main thread
                self.events.put(("error", exc))

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        return self._next()

    def finish(self, verdict: str) -> tuple[str, Any]:
        self.verdicts.put(verdict)
        return self._next()

    def _next(self) -> tuple[str, Any]:
        kind, value = self.events.get(timeout=WAIT_S)
        if kind == "error":
            raise value
        if kind != "entered":
            assert self.thread is not None
            self.thread.join(WAIT_S)
        return kind, value


@dataclass
class Worker:
    """One worker with one child: its consumer, the batch it holds, the job it runs."""

    wid: str
    consumer: Consumer
    runner: Runner = field(default_factory=Runner)
    batch: list[Delivery] = field(default_factory=list)
    running: str | None = None
    """The id of the job blocked in the task, if any."""
    revoked: bool = False


def body_of(raw: bytes) -> dict[str, Any]:
    data: dict[str, Any] = msgpack.unpackb(raw, raw=False)
    return data


class ControlPlaneModel(RuleBasedStateMachine):
    server: RedisServer

    @initialize()
    def start(self) -> None:
        self.client = redis.Redis.from_url(self.server.url)
        self.client.flushall()
        self.app = App(
            self.server.url,
            queue=QUEUE,
            store_results=True,
            retry_backoff_ms=1,
            retry_backoff_factor=1.0,
            retry_jitter=False,
            max_retries=2,
            worker_ttl_ms=WORKER_TTL_MS,
        )
        common: dict[str, Any] = {"dont_autoretry_for": (Fatal,)}
        self.tasks = {
            PLAIN: self.app.task(name=PLAIN, **common)(_act),
            RATE: self.app.task(name=RATE, rate_limit=RATE_LIMIT, **common)(_act),
            CONC: self.app.task(name=CONC, concurrency_limit=CONC_LIMIT, **common)(_act),
            UNIQ: self.app.task(name=UNIQ, unique=True, **common)(_act),
        }
        self.master = Broker(self.app.link, [QUEUE])
        self.master.ensure_groups()
        self.executor = Executor(self.app)
        self.master_finisher = Finisher(self.master, self.executor)
        self.records = Records(self.app.link)
        self.registry = WorkerRegistry(self.app.link, [QUEUE])
        self.keys = QueueKeys(QUEUE)
        self.scoreboard = Scoreboard(len(SLOTS))
        self.generation = 0
        self.workers = {s: self._new_worker(i) for i, s in enumerate(SLOTS)}
        self.dead_consumers: list[str] = []
        self.deaths = self.restarts = self.cancels = 0
        self.cancelled_at: dict[str, float] = {}
        """When each job was last asked to cancel (monotonic, before the script ran)."""
        self.jobs: list[str] = []
        """Every job id, in the order they were made (draws index into it)."""
        self.chains: list[list[str]] = []
        self.final: dict[str, str] = {}
        """Jobs seen ended, and how: an end never changes."""

    def _new_worker(self, index: int) -> Worker:
        self.generation += 1
        wid = f"host{index}:{self.generation}:abcdef"
        name = f"{wid}:0:{100 + self.generation}"
        self.scoreboard.prepare(index)
        consumer = Consumer(
            Broker(self.app.link, [QUEUE]),
            self.executor,
            name=name,
            options=ConsumerOptions(),
            slot=self.scoreboard.slot(index),
        )
        self.registry.heartbeat(wid, {}, ttl_ms=WORKER_TTL_MS, visibility_timeout_ms=30_000)
        return Worker(wid, consumer)

    def teardown(self) -> None:
        if not hasattr(self, "workers"):
            return
        for w in self.workers.values():
            if w.running is not None:
                w.runner.finish("die")
            w.consumer.broker.disconnect()
        self.master.disconnect()
        self.client.close()
        self.app.close()

    # -- producers -------------------------------------------------------------------------

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(
        kind=st.sampled_from(("job", "job", "unique", "chain")),
        tasks=st.lists(st.sampled_from((PLAIN, RATE, CONC)), min_size=3, max_size=3),
        priority=st.sampled_from(PRIORITIES),
        arg=st.integers(0, 1),
    )
    def enqueue(self, kind: str, tasks: list[str], priority: str, arg: int) -> None:
        """A job of a plain, rate-limited or concurrency-limited task; a unique job (two
        keys: a second enqueue of a key whose job has not ended adds nothing); or a chain of
        three steps of those tasks."""
        if kind == "job":
            job = self.tasks[tasks[0]].apply_async((len(self.jobs),), priority=priority)
            self.jobs.append(job.id)
        elif kind == "unique":
            job = self.tasks[UNIQ].delay(arg)
            if job.id in self.jobs:  # a duplicate, only of a live job
                assert self._state(job.id) not in FINAL, (job.id, self._state(job.id))
            else:
                self.jobs.append(job.id)
        else:
            steps = (self.tasks[t].si(len(self.jobs), i) for i, t in enumerate(tasks))
            flow = chain(*steps).delay()
            ids = [job_id for job_id, _ in self.records.flow_steps(QUEUE, flow.id)]
            assert len(ids) == 3, ids
            self.jobs += ids
            self.chains.append(ids)

    # -- consumers -------------------------------------------------------------------------

    @precondition(
        lambda self: (
            self._waiting()
            and any(not w.batch and w.running is None for w in self.workers.values())
        )
    )
    @rule(data=st.data(), count=st.integers(1, 4))
    def fetch(self, data: st.DataObject, count: int) -> None:
        """An idle consumer sends its queued acks and takes a batch (listed for its master)."""
        idle = [s for s, w in self.workers.items() if not w.batch and w.running is None]
        w = self.workers[data.draw(st.sampled_from(idle))]
        c = w.consumer
        c._ahead.clear()
        c._settled.clear()
        w.batch = c.keep(c._fetch(count).deliveries, count)
        w.revoked = False
        assert c.slot is not None
        c.slot.list_batch([(c.broker.stream_position[d.stream], d.entry_id) for d in w.batch])

    @precondition(lambda self: any(w.batch and w.running is None for w in self.workers.values()))
    @rule(data=st.data())
    def start_next(self, data: st.DataObject) -> None:
        """The consumer's turn at the next job of its batch: the real ``process`` (expiry,
        limits, the scoreboard's start), which runs the task until a rule ends it."""
        ready = [s for s, w in self.workers.items() if w.batch and w.running is None]
        w = self.workers[data.draw(st.sampled_from(ready))]
        d = w.batch.pop(0)
        job_id = str(body_of(d.body or b"")["id"])
        asked = bool(self.records.cancel_requested([(QUEUE, job_id)]))
        # A consumer's read of its batch's tombstones answers for START_CHECK_HOLDS_S: a
        # cancel after that read may find the job started (docs/cancellation.md), as here.
        starts = w.consumer.starts
        if job_id in starts._read and self.cancelled_at.get(job_id, 0.0) > starts._read_at:
            asked &= time.monotonic() - starts._read_at > START_CHECK_HOLDS_S
        kind, value = w.runner.start(w.consumer, d, w.batch)
        if kind == "entered":
            w.running = value
            self.master.mark_running([(QUEUE, value, w.consumer.name, 0)])
        elif value is False:  # the master revoked the rest of the batch
            w.batch.clear()
        assert kind != "entered" or not asked, f"{job_id} started after its cancel"

    @precondition(lambda self: any(w.running for w in self.workers.values()))
    @rule(data=st.data(), verdict=st.sampled_from(("ok", "ok", "retry", "fatal")))
    def finish(self, data: st.DataObject, verdict: str) -> None:
        """The running job ends; a job asked to stop is interrupted instead (the master
        signals its child on the tombstone)."""
        busy = [s for s, w in self.workers.items() if w.running]
        w = self.workers[data.draw(st.sampled_from(busy))]
        assert w.running is not None
        if self.records.cancel_requested([(QUEUE, w.running)]):
            verdict = "cancel"
        kind, _ = w.runner.finish(verdict)
        assert kind == "done", kind
        w.running = None

    @precondition(lambda self: any(w.running and w.batch for w in self.workers.values()))
    @rule(data=st.data())
    def revoke(self, data: st.DataObject) -> None:
        """The master hands back the rest of a batch behind a long job (as pool.py does); the
        child still holds those deliveries and reaches them at its next turns."""
        busy = [i for i, (s, w) in enumerate(self.workers.items()) if w.running and w.batch]
        index = data.draw(st.sampled_from(busy))
        w = self.workers[SLOTS[index]]
        rest = self.scoreboard.revoke_rest(index, self.scoreboard.read(index))
        for d in self.master.deliveries_at(rest):
            self.master_finisher.hand_back(d, owner=w.consumer.name)
        w.revoked = w.revoked or bool(rest)

    @precondition(lambda self: self.deaths < MAX_DEATHS)
    @rule(slot=st.sampled_from(SLOTS))
    def die(self, slot: str) -> None:
        """The worker is gone (its child killed mid-job, its queued acks lost, its heartbeat
        gone); a new worker takes its place."""
        self.deaths += 1
        index = SLOTS.index(slot)
        w = self.workers[slot]
        if w.running is not None:
            kind, _ = w.runner.finish("die")
            assert kind == "died", kind
        self.registry.unregister(w.wid)
        self.dead_consumers.append(w.consumer.name)
        self.workers[slot] = self._new_worker(index)

    # -- operators, maintenance --------------------------------------------------------------

    @precondition(lambda self: self.jobs and self.cancels < MAX_CANCELS)
    @rule(data=st.data(), terminate=st.booleans())
    def cancel(self, data: st.DataObject, terminate: bool) -> None:
        """``job.cancel()`` of a job wherever it is (one not seen ended, while there is one)."""
        self.cancels += 1
        live = [j for j in self.jobs if j not in self.final]
        job_id = data.draw(st.sampled_from(live or self.jobs))
        before = self._state(job_id)
        self.cancelled_at[job_id] = time.monotonic()
        got = self.records.cancel(QUEUE, job_id, ttl_ms=86_400_000, terminate=terminate)
        if before in FINAL:
            assert got == before, (job_id, before, got)
        elif got == "cancelled":
            assert self._state(job_id) == "cancelled"

    @precondition(lambda self: self.dead_consumers)
    @rule()
    def sweep(self) -> None:
        """The fleet's sweep: the dead workers' entries, idle past the lease, are claimed
        (XAUTOCLAIM) and settled as lost runs; the live consumers' leases were renewed."""
        deadline = time.monotonic() + WAIT_S
        while self._dead_idle_ms() < SWEEP_IDLE_MS:
            assert time.monotonic() < deadline, "dead consumers' entries never went idle"
            time.sleep(0.005)
        self.master.renew([w.consumer.name for w in self.workers.values()])
        for d in self.master.recover(QUEUE, min_idle_ms=SWEEP_IDLE_MS):
            self.master_finisher.recover(d, owner=RECOVER_CONSUMER)
        self.dead_consumers.clear()

    @rule()
    def promote(self) -> None:
        """The masters' housekeeping: due retries (1 ms backoff) go back to their streams."""
        time.sleep(0.003)
        self.master.promote(force=True)

    @precondition(lambda self: self.restarts < MAX_RESTARTS)
    @rule()
    def restart_redis(self) -> None:
        self.restarts += 1
        self.server.kill()
        self.server.start()
        self.master.disconnect()
        for w in self.workers.values():
            w.consumer.broker.disconnect()

    # -- checks ------------------------------------------------------------------------------

    def _state(self, job_id: str) -> str | None:
        raw = self.client.hget(self.keys.job(job_id), "state")
        return raw.decode() if raw is not None else None

    def _waiting(self) -> bool:
        """Whether a stream holds jobs not delivered yet (a fetch would find some)."""
        return any(g["lag"] for s in self.keys.streams for g in self.client.xinfo_groups(s))

    def _task(self, job_id: str) -> str | None:
        raw = self.client.hget(self.keys.job(job_id), "task")
        return raw.decode() if raw is not None else None

    def _dead_idle_ms(self) -> int:
        """The least idle time of the entries pending under dead consumers (a large number
        when there are none)."""
        idle = [1 << 30]
        for stream in self.keys.streams:
            for c in self.dead_consumers:
                rows = self.client.xpending_range(stream, GROUP, "-", "+", 1000, consumername=c)
                idle += [int(r["time_since_delivered"]) for r in rows]
        return min(idle)

    def _places(self) -> tuple[dict[str, list[str]], dict[str, str]]:
        """Where each job is in Redis, and the consumer of each pending one."""
        found: dict[str, list[str]] = {}
        owners: dict[str, str] = {}
        for p in PRIORITIES:
            for body, owner in self._stream_entries(p):
                job_id = _add(found, body, PENDING if owner else STREAM)
                if owner:
                    owners[job_id] = owner
            for m in self.client.zrange(self.keys.retry(p), 0, -1):
                _add(found, m.split(b"\n", 3)[3], RETRYING)
        for m in self.client.zrange(self.keys.schedule, 0, -1):
            _add(found, m.split(b"\n", 2)[2], SCHEDULED)
        for task in (RATE, CONC, PLAIN, UNIQ):
            for m in self.client.zrange(self.keys.held(task), 0, -1):
                _add(found, m.split(b"\n", 2)[2], HELD)
        for _, fields in self.client.xrange(self.keys.deadletter):
            found.setdefault(fields[b"job_id"].decode(), []).append(DEAD)
        return found, owners

    def _stream_entries(self, priority: str) -> Iterator[tuple[bytes, str | None]]:
        """The bodies of a stream's jobs not ended yet, each with the consumer it is
        pending under (None: not delivered yet). Acked entries the trim has not removed
        yet are finished jobs: left out."""
        stream = self.keys.stream(priority)
        pending = {
            r["message_id"]: r["consumer"].decode()
            for r in self.client.xpending_range(stream, GROUP, "-", "+", 10_000)
        }
        groups = self.client.xinfo_groups(stream)
        last = _parse_id(groups[0]["last-delivered-id"]) if groups else (0, 0)
        for entry_id, fields in self.client.xrange(stream):
            if entry_id in pending:
                yield fields[b"body"], pending[entry_id]
            elif _parse_id(entry_id) > last:
                yield fields[b"body"], None

    @invariant()
    def every_job_is_in_exactly_one_place(self) -> None:
        if not hasattr(self, "workers"):
            return
        found, owners = self._places()
        assert set(found) <= set(self.jobs), set(found) - set(self.jobs)
        for job_id in self.jobs:
            places, state = found.get(job_id, []), self._state(job_id)
            assert state is not None, f"{job_id} lost its record"
            if state in FINAL:
                assert self.final.setdefault(job_id, state) == state, (job_id, state)
                allowed = [DEAD] if state == "failed" else []
                assert places in ([], allowed), (job_id, state, places)
                continue
            assert job_id not in self.final, (job_id, self.final[job_id], state, places)
            held = self.client.hexists(self.keys.job(job_id), "held")
            expected = {
                "pending": [],  # a later workflow step, not started
                "scheduled": [SCHEDULED],
                "retrying": [RETRYING],
                "running": [PENDING],
            }.get(state, [HELD] if held else [STREAM, PENDING])
            assert len(places) == 1 or (places == [] and expected == []), (job_id, state, places)
            assert places == [] or places[0] in expected, (job_id, state, places)
        self._check_slots(found, owners)

    def _check_slots(self, found: dict[str, list[str]], owners: dict[str, str]) -> None:
        running = self.client.zrange(self.keys.running(CONC), 0, -1)
        for m in running:
            wid, job_id = m.decode().rsplit("|", 1)
            owner = owners.get(job_id)
            assert owner is not None and worker_of(owner) == wid, (
                f"slot {m!r} held by a job that does not run there: "
                f"{found.get(job_id)} {owner} {self._state(job_id)}"
            )
        assert len(running) <= CONC_LIMIT, running
        # A job waits for a slot only while one is taken, or a job of the task is on its way
        # to take one (in its stream, or back there after its delay or backoff): that job's
        # end lets the next one in.
        waiting = self.client.zcard(self.keys.held(CONC))
        coming = [
            j
            for j, places in found.items()
            if places[0] != HELD and places[0] != DEAD and self._task(j) == CONC
        ]
        assert not waiting or running or coming, f"{waiting} job(s) wait, no slot is taken"

    @invariant()
    def every_unique_lock_is_held_by_a_live_job(self) -> None:
        if not hasattr(self, "workers"):
            return
        for key in self.client.scan_iter(match=f"{QUEUE}:unique:*"):
            holder = (self.client.get(key) or b"").decode()
            assert holder in self.jobs, (key, holder)
            assert self._state(holder) not in FINAL, (key, holder, self._state(holder))

    @invariant()
    def every_chain_ends(self) -> None:
        if not hasattr(self, "workers"):
            return
        for ids in self.chains:
            states = [self._state(j) for j in ids]
            for before, after in itertools.pairwise(states):
                if before in ("failed", "expired"):
                    assert after in FINAL, (ids, states)
                elif before == "succeeded":
                    assert after != "pending", (ids, states)
                elif before != "cancelled" and after not in ("pending", "cancelled"):
                    raise AssertionError(f"a step started before the one before it: {states}")
            if "pending" in states:  # (a step cancelled before its turn ends the later ones
                # when the chain reaches it: a later step may wait that long)
                assert any(s not in FINAL and s != "pending" for s in states), (ids, states)


def _add(found: dict[str, list[str]], body: bytes, place: str) -> str:
    job_id = str(body_of(body)["id"])
    found.setdefault(job_id, []).append(place)
    return job_id


def _parse_id(raw: bytes | str) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, seq = text.split("-")
    return int(ms), int(seq)


@pytest.fixture(scope="module")
def fsync_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(
        Path(tmp_path_factory.mktemp("cp-redis")), appendonly=True, appendfsync="always"
    )
    server.start()
    yield server
    server.kill()


def _run(server: RedisServer, examples: int) -> None:
    model = type("Model", (ControlPlaneModel,), {"server": server})
    run_state_machine_as_test(
        model,
        settings=settings(
            max_examples=examples,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_control_plane_keeps_jobs_slots_locks_and_chains_consistent(
    fsync_server: RedisServer,
) -> None:
    _run(fsync_server, 50)


class _Pick:
    """Stands in for hypothesis's data in a replayed sequence: every draw is ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def draw(self, strategy: Any) -> Any:
        return self.value


def _machine(server: RedisServer) -> ControlPlaneModel:
    model = type("Model", (ControlPlaneModel,), {"server": server})()
    model.start()
    return model


def _check(model: ControlPlaneModel) -> None:
    try:
        model.every_job_is_in_exactly_one_place()
        model.every_chain_ends()
    finally:
        model.teardown()


def test_a_stale_delivery_of_a_revoked_batch_leaves_no_slot_taken(
    fsync_server: RedisServer,
) -> None:
    m = _machine(fsync_server)
    for task in (PLAIN, CONC):
        m.enqueue(kind="job", tasks=[task] * 3, priority="normal", arg=0)
    m.fetch(_Pick("a"), 2)
    m.start_next(_Pick("a"))  # the plain job runs, long
    m.revoke(_Pick(0))  # the master hands the other one back
    m.finish(_Pick("a"), "ok")
    m.start_next(_Pick("a"))  # the child reaches the stale one
    _check(m)


def test_a_job_cancelled_before_its_start_does_not_start(fsync_server: RedisServer) -> None:
    m = _machine(fsync_server)
    m.enqueue(kind="job", tasks=[PLAIN] * 3, priority="normal", arg=0)
    m.fetch(_Pick("a"), 1)
    m.cancel(_Pick(m.jobs[0]), terminate=True)
    try:
        m.start_next(_Pick("a"))
    finally:
        m.teardown()


def test_a_cancelled_job_on_its_way_to_a_slot_lets_the_next_one_in(
    fsync_server: RedisServer,
) -> None:
    m = _machine(fsync_server)
    for _ in range(3):
        m.enqueue(kind="job", tasks=[CONC] * 3, priority="normal", arg=0)
    m.fetch(_Pick("a"), 1)
    m.start_next(_Pick("a"))  # the first job takes the slot
    m.fetch(_Pick("b"), 2)
    m.start_next(_Pick("b"))  # the second and third wait in held
    m.start_next(_Pick("b"))
    m.finish(_Pick("a"), "ok")
    m.workers["a"].consumer._fetch(0)  # its ack releases the slot: the second goes back
    m.cancel(_Pick(m.jobs[1]), terminate=False)  # cancelled in its stream
    _check(m)
