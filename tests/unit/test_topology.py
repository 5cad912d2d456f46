"""Topology URLs, cluster routing of taskq's commands, and the scripts' key declarations."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis
import redis.utils

from taskq.broker.cluster import ClusterLink
from taskq.broker.link import Link, script_command
from taskq.broker.links import client_from_url, connect
from taskq.broker.routing import command_keys, hash_tag
from taskq.broker.slots import slot_runs
from taskq.broker.topology import kind_of, parse_seeds
from taskq.errors import ConfigError


def test_url_kinds_and_seeds() -> None:
    assert kind_of("redis://localhost:6379/0") == "single"
    assert kind_of("rediss+cluster://a:1") == "cluster"
    seeds = parse_seeds("redis+cluster://u:pw@a:7000,b:7001?socket_timeout=3")
    assert seeds.hosts == (("a", 7000), ("b", 7001))
    assert seeds.options["password"] == "pw" and seeds.options["socket_timeout"] == 3
    assert "db" not in seeds.options
    s = parse_seeds("redis+sentinel://:pw@s1:26379,s2:26380/mymaster/2?sentinel_password=sp")
    assert s.master_name == "mymaster" and s.options["db"] == 2 and s.options["password"] == "pw"
    assert s.sentinel_options == {"password": "sp"} and len(s.hosts) == 2


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis+cluster://", "no host:port seed"),
        ("redis+cluster://a:x", "bad port"),
        ("redis+cluster://a:1/3", "db 0 only"),
        ("redis+sentinel://a:1", "no master name"),
    ],
)
def test_bad_topology_urls(url: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        connect(url)


def test_connect_picks_the_link_and_sends_nothing() -> None:
    assert isinstance(connect("redis+cluster://127.0.0.1:1"), ClusterLink)
    link = connect("redis+sentinel://127.0.0.1:1/m")
    assert type(link) is Link and not link.cluster


def test_a_client_names_its_library_version_without_reading_package_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py's own version is given (CLIENT SETINFO LIB-VER), so that making the first
    client of a process does not read the package metadata (a worker's start)."""

    def metadata_read() -> str:
        raise AssertionError("the package metadata was read")

    monkeypatch.setattr(redis.utils, "get_lib_version", metadata_read)
    for url in ("redis://127.0.0.1:1/0", "unix:///nonexistent.sock"):
        kwargs = client_from_url(redis.Redis.from_url, url).connection_pool.connection_kwargs
        assert kwargs["driver_info"].lib_version == redis.__version__
        assert kwargs["driver_info"].formatted_name == "redis-py"


def test_hash_tags_and_keys_of_commands() -> None:
    assert hash_tag("{tasks}:high") == "tasks" and hash_tag("{app}.x:job:1") == "app"
    assert hash_tag("tasks:high") is None and hash_tag("{}:x") is None
    assert command_keys(
        ("XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "STREAMS", "a", "b", ">", ">")
    ) == (
        "a",
        "b",
    )
    assert command_keys(script_command("enqueue", ["k1", "k2"], ["x"])) == ("k1", "k2")
    assert command_keys(("XGROUP", "CREATE", "s", "g", "0")) == ("s",)
    assert command_keys(("DEL", "a", "b")) == ("a", "b") and command_keys(("TIME",)) == ()


def test_queues_are_cut_into_runs_that_share_a_slot() -> None:
    link = connect("redis+cluster://127.0.0.1:1")
    assert slot_runs(link, ["{a}.x", "{a}.y", "{b}", "{a}.z"]) == [
        ("{a}.x", "{a}.y"),
        ("{b}",),
        ("{a}.z",),
    ]
    with pytest.raises(ConfigError, match=r"name it '\{tasks\}'"):
        slot_runs(link, ["tasks"])
    assert slot_runs(connect("redis://127.0.0.1:1"), ["a", "b"]) == [("a", "b")]


_CHECKS = (
    "return queue ~= nil and ref[2] == queue .. ':done:' .. id and whole(ref[3])",
    "if job[2] ~= queue .. ':' .. priority or job[8] ~= queue or type(job[3]) ~= 'string' then",
    "if record ~= '' and (record ~= queue .. ':job:' .. id or not whole(job[7])) then",
)

_FOLLOW_UP_XADD = (
    "local entry = redis.call('XADD', queue .. ':' .. PRIORITY_NAMES[tonumber(p) + 1], '*',"
)
_HOLDER_RECORD = (
    "local h = redis.call('HMGET', queue .. ':job:' .. held, 'state', 'entry', 'priority')"
)

_FAIR_NAMES = "names = {turns = head .. priority .. ':turns', staged = head .. priority .. ':k:',"
_FAIR_COUNTS = "staged_count = head .. priority .. ':staged', last = head .. priority .. ':last',"
_FAIR_MODE = (
    "mode = head .. 'mode', waiting = head .. 'waiting', weights = queue .. ':fairweights'}"
)
_FAIR_LISTS = "for i, p in ipairs(PRIORITY_NAMES) do names.lists[i] = head .. p .. ':k:' end"
_BATCH_STREAM = "flush_batch(KEYS[1], queue .. ':' .. PRIORITY_NAMES[p + 1], ARGV[6])"


def test_scripts_declare_their_keys() -> None:
    """Every script names its KEYS in its header, and the only key names built inside Lua are
    derived from the queue's own name or a declared key of the same queue (same prefix, so
    same hash tag and slot), or built only to compare a stored name with the one it must be
    (docs/architecture.md lists each)."""
    folder = resources.files("taskq.broker").joinpath("lua")
    built = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        text = path.read_text()
        if not path.name.startswith("_"):
            assert re.search(r"^-- KEYS:", text, re.M), f"{path.name} documents no KEYS"
        built += [
            (path.name, line.strip())
            for line in text.splitlines()
            if re.search(r"\.\. *'[:]", line) and not line.strip().startswith("--")
        ]
    # Each is the queue's own prefix (`prefix`/ARGV[8]: the queue whose declared streams the
    # script also got) or a declared stream's prefix, so it carries the queue's hash tag; the
    # chord checks build names only to compare a stored key with the one it must be.
    assert built == [
        # (a fair stream's keys: its queue's, from the stream's own name)
        ("_fair.lua", "local head = queue .. ':fair:'"),
        ("_fair.lua", _FAIR_NAMES),
        ("_fair.lua", _FAIR_COUNTS),
        ("_fair.lua", _FAIR_MODE),
        ("_fair.lua", _FAIR_LISTS),
        ("_flow.lua", "redis.call('HINCRBY', prefix .. ':counts', 'held', -1)"),
        ("_flow.lua", "local stream = prefix .. ':' .. PRIORITY_NAMES[p + 1]"),
        ("_flow.lua", "local rec = prefix .. ':job:' .. job"),
        # (a keep_last follow-up: `queue` is the declared lock's own prefix)
        ("_flow.lua", "local stored = redis.call('GET', queue .. ':keeplast:' .. key)"),
        ("_flow.lua", "redis.call('DEL', queue .. ':keeplast:' .. key)"),
        ("_flow.lua", _FOLLOW_UP_XADD),
        ("_flow.lua", "local rec = queue .. ':job:' .. id"),
        ("_flow.lua", "local index, member = queue .. ':gathering', string.sub(key, #queue + 2)"),
        ("_flow.lua", "local rec = queue .. ':job:' .. first"),  # (of a batch's declared list)
        ("_flow.lua", _CHECKS[0]),
        ("_flow.lua", _CHECKS[1]),
        ("_flow.lua", _CHECKS[2]),
        ("_record.lua", "return queue .. ':job:' .. job_id, queue .. ':done:' .. job_id"),
        ("aside.lua", "local paused = string.sub(KEYS[3], 1, #KEYS[3] - 7) .. ':paused'"),
        ("batch.lua", "if not queue or KEYS[2] ~= queue .. ':schedule'"),
        ("batch.lua", "or KEYS[4] ~= queue .. ':batchcall:' .. ARGV[1] then"),
        ("batch.lua", "local rec = queue .. ':job:' .. first"),
        ("batch.lua", _BATCH_STREAM),
        ("cancel.lua", "local ended, tombs = prefix .. ':ended', prefix .. ':cancelled'"),
        ("cancel.lua", "local held_head, lock_head = prefix .. ':held:', prefix .. ':unique:'"),
        ("cancel.lua", "local running = prefix .. ':running:' .. string.sub(held, #held_head + 1)"),
        ("debounce.lua", "if not queue or KEYS[2] ~= queue .. ':schedule' then"),
        ("drop.lua", "redis.call('HDEL', prefix .. ':cancelled', ARGV[7])"),
        ("drop.lua", "local ended_key = prefix .. ':ended'"),
        ("jobs_remove.lua", "local rec = prefix .. ':job:' .. job"),
        ("jobs_remove.lua", "local lock_head = prefix .. ':unique:'"),
        ("jobs_remove.lua", "local rec = prefix .. ':job:' .. job"),
        ("jobs_remove.lua", "finish_record(rec, prefix .. ':done:' .. job, 'cancelled', ttl, now)"),
        ("jobs_retry_now.lua", "local rec = prefix .. ':job:' .. job"),
        ("keeplast.lua", _HOLDER_RECORD),
        ("keeplast.lua", "local last = last_delivered(queue .. ':' .. h[3], 'taskq')"),
        # (a fair queue's staged count, from the declared stream's own name)
        ("queue_stats.lua", "local staged_key = queue .. ':fair:' .. priority .. ':staged'"),
    ]


def test_partitions_from_the_environment_and_their_names() -> None:
    from taskq.config import Settings
    from taskq.keys import partition_names
    from taskq.partitions import expand, partition_of

    s = Settings.from_env({"TASKQ_PARTITIONS": "tasks=3, {mail}=2"})
    assert s.partitions == {"tasks": 3, "{mail}": 2}
    with pytest.raises(ConfigError, match="name=N"):
        Settings.from_env({"TASKQ_PARTITIONS": "tasks"})
    assert partition_names("{mail}", 2) == ("{mail.0}", "{mail.1}")
    assert partition_of(s.partitions, "other") == "other"
    assert partition_of(s.partitions, "tasks", "k") == partition_of(s.partitions, "tasks", "k")
    names, groups = expand(s.partitions, ["a", "tasks", "b"])
    assert names == ["a", "{tasks.0}", "{tasks.1}", "{tasks.2}", "b"] and len(groups) == 1
