"""taskq behind Sentinel: a ``redis+sentinel://`` URL finds the master, and a worker survives
the master's SIGKILL mid-drain (the sentinels promote the replica; reconnects find it)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import Job, Settings
from taskq.broker import connect
from taskq.broker.links import MASTER_CHECK_S
from taskq.errors import BrokerUnavailable
from taskq.keys import stream_key
from taskq.ops.inspect import Inspector
from tests import cluster_tasks, tasks
from tests.conftest import FAST_SETTINGS, WorkerProcess, wait_until
from tests.topologies import Sentinels, sentinels_fixture

pytestmark = [pytest.mark.slow, pytest.mark.integration]
__all__ = ["sentinels_fixture"]  # the ``sentinels`` fixture

JOBS = 400


def counts() -> Counter[str]:
    """How many times each job ran (the tasks' own log)."""
    rows = cluster_tasks.app.link.call("LRANGE", cluster_tasks.RUNS, 0, -1)
    return Counter(x.decode().split("|")[0] for x in rows)


def test_a_drain_survives_a_master_sigkill(sentinels: Sentinels, tmp_path: Path) -> None:
    app = cluster_tasks.configure(sentinels.url, **FAST_SETTINGS)
    env = {f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()}
    try:
        # given jobs on the master, replicated
        cluster_tasks.slow_note.starmap((i, 0.01) for i in range(JOBS))
        assert app.link.call("WAIT", 1, 5000) == 1
        worker = WorkerProcess(
            sentinels.url, "-A", "tests.cluster_tasks:app", "-c", "2",
            log_path=tmp_path / "worker.log", **env,
        )  # fmt: skip
        try:
            # when the master is SIGKILLed while a worker drains them
            wait_until(lambda: sum(counts().values()) >= JOBS // 4, 30)
            old = sentinels.kill_master()
            started = time.monotonic()
            sentinels.wait_for_failover()
            failover_s = time.monotonic() - started
            # then every job runs (after the promotion, on the new master)
            wait_until(lambda: len(counts()) >= JOBS, 60)
        finally:
            worker.stop()
        seen = counts()
        lost = JOBS - len(seen)
        duplicates = sum(seen.values()) - len(seen)
        print(f"sentinel failover {failover_s:.1f}s: lost {lost}, duplicates {duplicates}")
        assert lost == 0
        assert duplicates <= 2 * 2  # at least once: at most the jobs in flight at the kill
        assert "Traceback" not in worker.output()
        sentinels.restart_old_master(as_replica=True)
        assert old.alive
    finally:
        app.link.call("FLUSHALL")
        app.close()


def test_an_unknown_master_name_is_a_one_line_error(sentinels: Sentinels) -> None:
    url = sentinels.url.replace(f"/{sentinels.master_name}/", "/nosuch/")
    with pytest.raises(BrokerUnavailable, match="name no reachable master"):
        connect(url).call("PING")


CHILDREN = 2
PREFETCH = 4
"""A fixed batch, so that the jobs a child holds at a switch are known: at most this many."""


def _runs(marks: Path) -> Counter[str]:
    """How many times each job ran (``tests.tasks.mark``'s files: not Redis, whose writes on
    the old master are lost)."""
    seen: Counter[str] = Counter()
    for f in marks.iterdir():
        seen.update(line.split()[0] for line in f.read_text().splitlines())
    return seen


def _queue_idle(sentinels: Sentinels) -> bool:
    """Nothing waiting, pending or retrying on the master the sentinels name now."""
    host, port = sentinels.master_address()
    app = tasks.App(f"redis://{host}:{port}/0")
    try:
        stats = Inspector.for_app(app).queue_stats()
    finally:
        app.close()
    return all(q.waiting == 0 and q.pending == 0 and q.retrying == 0 for q in stats)


def _drain_through_forced_failover(
    sentinels: Sentinels, tmp_path: Path, jobs: int
) -> tuple[Counter[str], float, float, str]:
    """Run ``jobs`` marks of 30 ms on a ``-c 2 --prefetch 4`` worker, force a failover once a
    fifth have run, wait until each ran and the new master holds none. Returns the runs, the
    drain's pace before the switch (jobs/s), the seconds until every sentinel named the new
    master, and the worker's log."""
    marks = tmp_path / "marks"
    marks.mkdir()
    tasks.app.close()
    tasks.app.settings = Settings(redis_url=sentinels.url, **FAST_SETTINGS)
    env = {f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()}
    try:
        tasks.mark.starmap((i, 0.03) for i in range(jobs))
        assert tasks.app.link.call("WAIT", 1, 5000) == 1
        worker = WorkerProcess(
            sentinels.url, "-A", "tests.tasks:app", "-c", str(CHILDREN),
            "--prefetch", str(PREFETCH), log_path=tmp_path / "worker.log",
            TASKQ_TEST_MARK_DIR=str(marks), **env,
        )  # fmt: skip
        try:
            first = wait_until(lambda: sum(_runs(marks).values()) >= 20, 30) and time.monotonic()
            wait_until(lambda: sum(_runs(marks).values()) >= jobs // 5, 30)
            pace = (sum(_runs(marks).values()) - 20) / (time.monotonic() - first)
            started = time.monotonic()
            sentinels.force_failover()
            sentinels.wait_for_failover()
            switch_s = time.monotonic() - started
            wait_until(lambda: len(_runs(marks)) >= jobs and _queue_idle(sentinels), 60)
        finally:
            worker.stop()
        sentinels.wait_for_old_master()
        return _runs(marks), pace, switch_s, worker.output()
    finally:
        tasks.app.close()


def test_a_forced_failover_reruns_only_the_jobs_of_the_switch(
    sentinels: Sentinels, tmp_path: Path
) -> None:
    # given a worker draining a queue, when the sentinels switch masters (both servers up)
    seen, pace, switch_s, log = _drain_through_forced_failover(sentinels, tmp_path, JOBS)
    # then every job ran, and only those run in the switch ran again: the jobs the children
    # held, and those they read and acked on the old master until the sentinels named the
    # new one (and the link asked them). Before the fix the children kept the old master,
    # which serves as a master for ~10 s more: 310 of 400 jobs ran twice.
    duplicates = sum(seen.values()) - len(seen)
    bound = CHILDREN * PREFETCH + pace * (switch_s + 0.5)
    print(f"forced failover: switch {switch_s:.1f}s at {pace:.0f} jobs/s: {duplicates} again")
    assert len(seen) == JOBS
    assert duplicates <= bound
    assert "Traceback" not in log


def test_min_replicas_to_write_bounds_a_failover_to_the_jobs_in_flight(tmp_path: Path) -> None:
    # given servers with min-replicas-to-write 1: a master refuses writes (XREADGROUP and
    # XACK are writes) from the moment its replica leaves it to become the new master
    with Sentinels(tmp_path / "trio", min_replicas_to_write=1) as guarded:
        # when the sentinels switch masters under a drain
        seen, _, switch_s, log = _drain_through_forced_failover(guarded, tmp_path, JOBS)
    # then only the jobs the children held at the switch can run again, and no child died
    # (NOREPLICAS is waited out like an outage, not a refusal)
    duplicates = sum(seen.values()) - len(seen)
    print(f"forced failover with min-replicas-to-write: switch {switch_s:.1f}s: {duplicates}")
    assert len(seen) == JOBS
    assert duplicates <= CHILDREN * PREFETCH
    assert "Traceback" not in log and "died" not in log


async def _enqueue_through_forced_failover(
    sentinels: Sentinels, after_switch: int
) -> tuple[list[tuple[float, Job]], float, float]:
    """An asyncio producer enqueues ``tests.tasks.echo`` one job at a time while the sentinels
    switch masters, until ``after_switch`` jobs went in once every sentinel named the new
    master. Returns each job that went in with the moment its call began, the moment the
    switch was asked for and the moment every sentinel named the new master."""
    sent: list[tuple[float, Job]] = []
    switched_at = named_at = float("inf")
    stop = asyncio.Event()

    async def produce() -> None:
        while not stop.is_set():
            began = time.monotonic()
            try:
                sent.append((began, await tasks.echo.adelay(len(sent))))
            except BrokerUnavailable:  # unknown whether it went in: not counted
                await asyncio.sleep(0)  # (a refusal may not wait: let the test's polls run)
        await tasks.app.aclose()

    def went_in_after(moment: float) -> int:
        return sum(1 for began, _ in sent if began >= moment)

    async def poll(condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, "the producer stalled"
            await asyncio.sleep(0.01)

    producing = asyncio.create_task(produce())
    try:
        await poll(lambda: len(sent) >= 200, 30)
        switched_at = time.monotonic()
        await asyncio.to_thread(sentinels.force_failover)
        await asyncio.to_thread(sentinels.wait_for_failover)
        named_at = time.monotonic()
        await poll(lambda: went_in_after(named_at + MASTER_CHECK_S) >= after_switch, 30)
    finally:
        stop.set()
        await producing
    return sent, switched_at, named_at


def test_an_asyncio_producer_writes_to_the_master_the_sentinels_name(
    sentinels: Sentinels,
) -> None:
    tasks.app.close()
    tasks.app.settings = Settings(redis_url=sentinels.url, **FAST_SETTINGS)
    # given an asyncio producer enqueueing in a loop, when the sentinels switch masters with
    # both servers up (the old one serves as a master for ~10 s, then drops those writes)
    sent, switched_at, named_at = asyncio.run(_enqueue_through_forced_failover(sentinels, 500))
    sentinels.wait_for_old_master()
    host, port = sentinels.master_address()
    master = connect(f"redis://{host}:{port}/0")
    first = sent[0][1]
    entries = master.call("XRANGE", stream_key(first.queue, first.priority), "-", "+")
    kept = {entry_id.decode() for entry_id, _ in entries}
    master.call("FLUSHALL")
    master.close()
    # then every job enqueued once the sentinels named the new master (and the link asked
    # them) is on the new master, as is every job enqueued before the switch; only those sent
    # in the switch (the old master took them until the sentinels named the new one) are
    # lost. Before the fix the asyncio link kept its connection to the old master: every job
    # sent in the ~10 s until it became a replica was lost.
    after = [job for began, job in sent if began >= named_at + MASTER_CHECK_S]
    outside = [job for began, job in sent if began < switched_at] + after
    lost = [job.id for job in outside if job.entry_id not in kept]
    lost_in_switch = sum(1 for _, job in sent if job.entry_id not in kept) - len(lost)
    print(
        f"asyncio producer: {len(sent)} enqueued; of the {len(sent) - len(outside)} sent in "
        f"the {named_at - switched_at:.1f} s switch, {lost_in_switch} lost"
    )
    assert len(after) >= 500
    assert lost == []
