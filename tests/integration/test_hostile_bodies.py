"""Every field of a job body is untrusted input: a property test that mutates each field of a
workflow job's body (docs/protocol.md: types, sizes, encodings, key names) and feeds it, with
a good job behind it, to a worker's consumer against a real Redis.

After each example: the consumer did not crash, nothing is left pending, every dead letter
carries a reason, the good job ran, and no key outside the job's own changed (a snapshot of
keys a hostile body might name: the schedule, a lock, another queue, a plain key).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskq import App
from taskq.keys import GROUP
from taskq.testing import drain
from tests.conftest import runs

pytestmark = pytest.mark.integration

VICTIMS = ("victim", "tasks:schedule", "tasks:unique:other", "other:normal", "tasks:workers")
"""Keys that a hostile body may name and that no job's end may touch."""

_FRAG = {
    "t": "job",
    "id": "next1",
    "task": "tests.tasks.tag",
    "args": ["v"],
    "kwargs": {"label": "next"},
    "queue": "tasks",
    "priority": "normal",
    "ttl": 60,
    "imm": True,
    "countdown_ms": 0,
    "wf": None,
}
_REF = ["tasks:job:later1", "tasks:done:later1", 60_000]


def _base(task: str) -> dict[str, Any]:
    wf = {
        "next": [_FRAG],
        "fail": [_REF],
        "abort": [{"key": "tasks:chord:c1", "fail": [_REF], "errback": [_FRAG]}],
        "errback": [{**_FRAG, "id": "err1"}],
        "chord": ["tasks:chord:c1", 0],
    }
    return {
        "v": 1,
        "id": "hostile1",
        "task": task,
        "args": ["x"] if task.endswith("fails_stored") else ["v", "hostile"],
        "kwargs": {},
        "queue": "tasks",
        "priority": "normal",
        "created_ms": 1,
        "retries": 0,
        "result_ttl_s": 60,
        "expires_ms": 2**46,
        "unique": "tasks:unique:k",
        "headers": {"h": "v"},
        "wf": copy.deepcopy(wf),
    }


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*at, i))


HOSTILE = st.one_of(
    st.sampled_from([*VICTIMS, "tasks:chord:../x", "tasks:job:a b", "", "tasks:normal"]),
    st.sampled_from([None, True, 0, -1, 2**62, 2**64 - 1, -(2**63), 0.5, float("nan")]),
    st.binary(max_size=40),
    st.text(max_size=40),
    st.just("x" * 100_000),
    st.lists(st.sampled_from([*VICTIMS, 1, None]), max_size=4),
    st.dictionaries(
        st.sampled_from(["key", "fail", "errback", "t", "id"]),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
    ),
)

BASES = [_base("tests.tasks.fails_stored"), _base("tests.tasks.tag")]
MUTATIONS = [(b, p) for b in range(len(BASES)) for p in _paths(BASES[b]) if p]


def _mutated(base: int, path: tuple[Any, ...], value: Any, drop: bool) -> bytes:
    body = copy.deepcopy(BASES[base])
    *parent_path, last = path
    parent = body
    for step in parent_path:
        parent = parent[step]
    if drop and isinstance(parent, dict):
        del parent[last]
    else:
        parent[last] = value
    return bytes(msgpack.packb(body, use_bin_type=True))


def _snapshot(r: redis.Redis) -> dict[str, bytes | None]:
    return {key: r.dump(key) for key in VICTIMS}


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutation=st.sampled_from(MUTATIONS), value=HOSTILE, drop=st.booleans())
def test_a_mutated_body_is_run_or_dead_lettered_and_touches_no_other_key(
    task_app: App, r: redis.Redis, mutation: tuple[int, tuple[Any, ...]], value: Any, drop: bool
) -> None:
    # given the victims, a mutated body, and a good job behind it
    r.flushdb()
    r.set("victim", "v")
    r.zadd("tasks:schedule", {"a delayed job": 2**45})
    r.set("tasks:unique:other", "someone")
    r.xadd("other:normal", {"task": "t", "body": b"\x80"})
    r.zadd("tasks:workers", {"w": 1})
    before = _snapshot(r)
    base, path = mutation
    body = _mutated(base, path, value, drop)
    r.xadd("tasks:normal", {"task": "tests.tasks.tag", "body": body, "job": "hostile1"})
    task_app.get_task("tests.tasks.tag").delay("good", "good")
    # when a worker's consumer takes both (and whatever steps the first one starts)
    drain(task_app, timeout_s=20)
    # then nothing is left pending, every dead letter says why, the good job ran, and no
    # key that the body may have named changed
    for stream in ("tasks:high", "tasks:normal", "tasks:low"):
        if r.exists(stream):
            assert r.xpending(stream, GROUP)["pending"] == 0
    assert all(fields[b"error"] for _, fields in r.xrange("tasks:deadletter"))
    assert any(x.get("tag") == "good" for x in runs(r))
    assert _snapshot(r) == before


ENTRY_FIELDS = st.dictionaries(
    st.sampled_from([b"task", b"body", b"job", b"ff", b"extra"]),
    st.one_of(
        st.binary(max_size=30),
        st.sampled_from([b"\xff\xfe", b"abc", b"1.5", b"-1", b"99999999999999999999999", b""]),
    ),
    max_size=4,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fields=ENTRY_FIELDS)
def test_a_mutated_stream_entry_is_dead_lettered_alone(
    task_app: App, r: redis.Redis, fields: dict[bytes, bytes]
) -> None:
    # given an entry whose fields are anything, between two good jobs
    r.flushdb()
    tag = task_app.get_task("tests.tasks.tag")
    tag.delay("good", "before")
    good = bytes(
        msgpack.packb({"v": 1, "id": "fine1", "task": "tests.tasks.tag", "args": [1, "x"]})
    )
    entry = {b"task": b"tests.tasks.tag", b"body": good, **fields}
    r.xadd("tasks:normal", entry)
    tag.delay("good", "after")
    # when a worker's consumer takes them
    drain(task_app, timeout_s=20)
    # then nothing is pending, every dead letter says why, and both good jobs ran
    assert r.xpending("tasks:normal", GROUP)["pending"] == 0
    assert all(f[b"error"] for _, f in r.xrange("tasks:deadletter"))
    assert {"before", "after"} <= {x.get("tag") for x in runs(r)}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(at=st.integers(min_value=0), cut=st.booleans(), extra=st.binary(max_size=80))
def test_a_mutated_signed_body_is_refused_and_touches_no_other_key(
    task_app: App, r: redis.Redis, at: int, cut: bool, extra: bytes
) -> None:
    # given a signing worker, and a signed workflow body whose bytes (map or trailer) were
    # changed at one place: cut there and followed by other bytes, or one byte replaced
    before_settings = task_app.settings
    task_app.settings = before_settings.replace(signing_keys=("fuzz-key-0123456789",))
    try:
        r.flushdb()
        r.set("victim", "v")
        r.zadd("tasks:schedule", {"a delayed job": 2**45})
        before = _snapshot(r)
        signed = task_app.settings.signer.sign(_mutated(0, ("kwargs",), {}, False))
        at %= len(signed)
        changed = (
            signed[:at] + extra
            if cut
            else signed[:at] + bytes([signed[at] ^ 0x5A]) + signed[at + 1 :]
        )
        r.xadd("tasks:normal", {"task": "tests.tasks.tag", "body": changed})
        task_app.get_task("tests.tasks.tag").delay("good", "good")
        # when a worker's consumer takes both
        drain(task_app, timeout_s=20)
        # then the changed body never ran (refused with a reason), and the good one did
        assert r.xpending("tasks:normal", GROUP)["pending"] == 0
        dead = [f for _, f in r.xrange("tasks:deadletter")]
        assert changed == signed or (len(dead) == 1 and dead[0][b"error"])
        assert any(x.get("tag") == "good" for x in runs(r))
        assert _snapshot(r) == before
    finally:
        task_app.settings = before_settings
