"""A master of a real Redis Cluster SIGKILLed under load: its replica is promoted, a producer and
a worker carry on by themselves, and the jobs lost and run twice are counted, with and without
``durable_enqueue``."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from taskq import App
from taskq.errors import BrokerError
from tests import cluster_tasks
from tests.conftest import FAST_SETTINGS, WorkerProcess, wait_until
from tests.topologies import RedisCluster, redis_cluster_fixture

pytestmark = [pytest.mark.slow, pytest.mark.integration]
__all__ = ["redis_cluster_fixture"]  # the ``redis_cluster`` fixture

PRODUCE_S = 6.0
KILL_AFTER_S = 2.0
BATCH = 10
"""Jobs per pipelined enqueue (``enqueue_many``; with ``durable_enqueue``, one WAIT each)."""


class Producer(threading.Thread):
    """Enqueues batch after batch for PRODUCE_S; remembers which jobs were acknowledged."""

    def __init__(self, app: App, queue: str) -> None:
        super().__init__(daemon=True)
        self.app, self.queue = app, queue
        self.acked: set[int] = set()
        self.failed: list[str] = []
        self.longest_s = 0.0

    def run(self) -> None:
        deadline, i = time.monotonic() + PRODUCE_S, 0
        while time.monotonic() < deadline:
            ids = range(i + 1, i + 1 + BATCH)
            i += BATCH
            msgs = [cluster_tasks.note.message((n,), {}, queue=self.queue) for n in ids]
            started = time.monotonic()
            try:
                self.app.enqueue_many(msgs)
            except BrokerError as exc:  # unknown whether they went in: not counted as acked
                self.failed.append(str(exc)[:120])
                time.sleep(0.05)
                continue
            finally:
                self.longest_s = max(self.longest_s, time.monotonic() - started)
            self.acked.update(ids)


def ran(app: App) -> Counter[int]:
    rows = app.link.call("LRANGE", cluster_tasks.RUNS, 0, -1)
    return Counter(int(x.decode().split("|")[0]) for x in rows)


def test_failover_under_load(redis_cluster: RedisCluster, tmp_path: Path) -> None:
    # The jobs' queue on one master, the runs log (the count) on another.
    runs_master = redis_cluster.master_of(cluster_tasks.RUNS)
    queue = next(
        f"{{fo{i}}}"
        for i in range(500)
        if redis_cluster.master_of(f"{{fo{i}}}:high") is not runs_master
    )
    report = [one_failover(redis_cluster, queue, durable, tmp_path) for durable in (False, True)]
    print("\n".join(report))


def one_failover(cluster: RedisCluster, queue: str, durable: bool, tmp_path: Path) -> str:
    env = {f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()}
    app = App(cluster.url, queue, durable_enqueue=durable, **FAST_SETTINGS)
    worker = WorkerProcess(
        cluster.url, "-A", "tests.cluster_tasks:app", "-Q", queue, "-c", "2",
        log_path=tmp_path / f"worker-{durable}.log", **env,
    )  # fmt: skip
    producer = Producer(app, queue)
    try:
        # given a producer and a worker at work
        producer.start()
        time.sleep(KILL_AFTER_S)
        # when the queue's master is SIGKILLed
        killed = cluster.kill_master_of(f"{queue}:high")
        started = time.monotonic()
        cluster.wait_for_failover(f"{queue}:high")
        failover_s = time.monotonic() - started
        producer.join(PRODUCE_S + 30)
        # then every acknowledged job runs, unless it was lost with the master (counted)
        settle_until = time.monotonic() + 25
        wait_until(lambda: producer.acked <= set(ran(app)) or time.monotonic() > settle_until, 30)
    finally:
        worker.stop()
    runs = ran(app)
    lost = len(producer.acked - set(runs))
    duplicates = sum(n - 1 for i, n in runs.items() if i in producer.acked)
    line = (
        f"durable_enqueue={durable}: {len(producer.acked)} acked, {len(producer.failed)} "
        f"batches of {BATCH} raised, failover {failover_s:.1f}s, longest enqueue "
        f"{producer.longest_s:.1f}s, lost {lost}, duplicates {duplicates}"
    )
    assert "Traceback" not in worker.output(), worker.output()[-3000:]
    if durable:
        assert lost == 0, line
    app.link.call("FLUSHALL")
    app.close()
    cluster.restart(killed)  # it rejoins as a replica of its successor
    return line


def test_a_lagging_replica_loses_acknowledged_jobs_unless_durable(
    redis_cluster: RedisCluster,
) -> None:
    """The case ``durable_enqueue`` is for: the replica has fallen behind (here: cut off)
    when the master dies, so the promoted replica lacks the master's last writes. (A replica
    that is merely slow still has them in its socket buffer: SIGKILLing the master alone, as
    above, loses nothing on one machine.)"""
    queue = "{lag}"
    master = redis_cluster.master_of(f"{queue}:high")
    [replica] = [r for r in redis_cluster.replicas_of(master) if r.alive]
    plain = App(redis_cluster.url, queue, **FAST_SETTINGS)
    durable = App(redis_cluster.url, queue, durable_enqueue=True, durable_enqueue_timeout_ms=200)
    note = cluster_tasks.note
    plain.broker_for([queue]).ensure_groups()
    assert durable.link.call("WAIT", 1, 1000) == 1  # a WAIT alone goes to some master
    # given a replica cut off from its master (stopped, its link closed by the master)
    replica.pause()
    try:
        with master.client() as r:
            assert r.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
        acked = [plain.enqueue(note.message((i,), {}, queue=queue)) for i in range(50)]
        refused = 0
        for i in range(5):
            with pytest.raises(BrokerError, match="no replica confirmed"):
                durable.enqueue(note.message((100 + i,), {}, queue=queue))
            refused += 1
        # when the master dies and the replica, back, takes over
        killed = redis_cluster.kill_master_of(f"{queue}:high")
    finally:
        replica.resume()
    redis_cluster.wait_for_failover(f"{queue}:high", timeout_s=30)
    # then the acknowledged jobs without durable_enqueue are gone; none was acknowledged with it
    left = int(plain.link.call("XLEN", f"{queue}:normal"))
    lost = len(acked) - min(left, len(acked))
    print(
        f"lagging replica: durable_enqueue=False: {len(acked)} acked, {lost} lost; "
        f"durable_enqueue=True: 0 acked, {refused} raised BrokerUnavailable, 0 lost"
    )
    assert lost == len(acked)  # the replica had none of them
    plain.link.call("FLUSHALL")
    plain.close()
    durable.close()
    redis_cluster.restart(killed)
