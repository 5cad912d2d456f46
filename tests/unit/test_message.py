"""Wire protocol v1: what producers write is what docs/protocol.md says, and garbage is refused."""

from __future__ import annotations

from collections.abc import Callable

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq import bodycheck
from taskq.config import MAX_TIME_MS
from taskq.errors import DecodeError, EnqueueError, PayloadTooLarge
from taskq.message import PLAIN_VERSION, PROTOCOL_VERSION, Message


@pytest.mark.parametrize("retries", [-1, -7, -(2**63)])
def test_body_with_negative_retries_is_malformed(retries: int) -> None:
    """A negative ``retries`` was accepted and bought the job extra attempts."""
    # Given: a body that is well formed except for a negative attempt count.
    body = msgpack.packb({"v": 1, "id": "j", "task": "t", "args": [], "retries": retries})
    # When / Then: decoding refuses it, naming the field.
    with pytest.raises(DecodeError, match="retries"):
        Message.decode(body)


def test_zero_and_positive_retries_still_decode() -> None:
    body = msgpack.packb({"v": 1, "id": "j", "task": "t", "retries": 0})
    assert Message.decode(body).retries == 0
    body = msgpack.packb({"v": 1, "id": "j", "task": "t", "retries": 5})
    assert Message.decode(body).retries == 5


def test_body_is_a_plain_msgpack_map_with_the_documented_fields() -> None:
    msg = Message("app.add", (1, [2, 3]), {"x": "y"}, queue="q", priority="high", retries=1)
    data = msgpack.unpackb(msg.encode(), raw=False)
    assert data == {
        "v": PLAIN_VERSION,
        "id": msg.id,
        "task": "app.add",
        "args": [1, [2, 3]],
        "kwargs": {"x": "y"},
        "queue": "q",
        "priority": "high",
        "created_ms": msg.created_ms,
        "retries": 1,
    }


def test_round_trip_keeps_lists_as_lists_and_bytes_as_bytes() -> None:
    msg = Message("t", ([1, 2], b"\x00\xff", {"k": [None, True, 1.5]}), {"n": -(2**63)})
    back = Message.decode(msg.encode())
    assert back == msg
    assert isinstance(back.args[0], list)


def test_unknown_fields_are_ignored() -> None:
    body = msgpack.packb({"v": 1, "id": "a", "task": "t", "future": {"x": 1}})
    assert Message.decode(body).task == "t"


def test_minimal_body_takes_defaults() -> None:
    msg = Message.decode(msgpack.packb({"v": 1, "id": "j1", "task": "t"}))
    assert (msg.args, msg.kwargs, msg.priority, msg.retries) == ((), {}, "normal", 0)


def test_newer_major_version_is_refused_with_a_clear_reason() -> None:
    body = msgpack.packb({"v": PROTOCOL_VERSION + 1, "id": "a", "task": "t"})
    with pytest.raises(DecodeError, match="protocol version 3 is newer"):
        Message.decode(body)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([1, 2], "not a map"),
        ({"id": "a", "task": "t"}, "no integer protocol version"),
        ({"v": 1, "task": "t"}, "no 'id'"),
        ({"v": 1, "id": "a", "task": 5}, "'task' must be str"),
        ({"v": 1, "id": "a", "task": "t", "args": {"a": 1}}, "'args' must be list"),
        ({"v": 1, "id": "a", "task": "t", "kwargs": {1: 2}}, "string keys"),
        ({"v": 1, "id": "a", "task": "t", "priority": "urgent"}, "unknown priority"),
    ],
)
def test_schema_violations_are_decode_errors(data: object, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        Message.decode(msgpack.packb(data))


@given(st.binary(max_size=200))
def test_garbage_never_decodes_to_anything_but_a_decode_error(raw: bytes) -> None:
    try:
        Message.decode(raw)
    except DecodeError:
        return
    # The rare random bytes that are a valid job must still be a well-formed one.
    assert isinstance(Message.decode(raw).task, str)


def test_unserializable_argument_is_named() -> None:
    msg = Message("t", (1, object()), {})
    with pytest.raises(EnqueueError, match=r"argument 1 \(object\) is not msgpack-serializable"):
        msg.encode()


def test_unserializable_keyword_argument_is_named() -> None:
    msg = Message("t", (), {"when": {1, object()}})
    with pytest.raises(EnqueueError, match=r"keyword argument 'when' \(set\)"):
        msg.encode()


def test_oversize_payload_is_refused_with_sizes() -> None:
    msg = Message("t", ("x" * 2000,), {})
    with pytest.raises(PayloadTooLarge, match="over the 1000-byte limit"):
        msg.encode(max_bytes=1000)


# -- untrusted bodies: every key a body names and every number it carries is checked --------

_REF = ["tasks:job:b", "tasks:done:b", 60_000]
_FRAG = {
    "t": "job",
    "id": "b",
    "task": "t",
    "args": [],
    "kwargs": {},
    "queue": "tasks",
    "priority": "normal",
    "ttl": 60,
    "imm": False,
    "countdown_ms": 0,
    "wf": None,
}


def _body(**fields: object) -> bytes:
    return bytes(msgpack.packb({"v": 1, "id": "a", "task": "t", **fields}))


def test_a_well_formed_workflow_map_decodes() -> None:
    chord = {"t": "chord", "key": "tasks:chord:c", "n": 1, "ttl": 60, "body": _FRAG}
    wf = {
        "next": [_FRAG, {**chord, "members": [_FRAG]}],
        "fail": [_REF],
        "chord": ["tasks:chord:c", 0, "0" * 40],
        "abort": [{"key": "tasks:chord:c", "fail": [_REF], "errback": [_FRAG]}],
        "errback": [_FRAG],
    }
    assert Message.decode(_body(wf=wf, unique="tasks:unique:k")).wf == wf


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"wf": {"fail": 5}}, "fail must be an array"),
        ({"wf": {"abort": [7]}}, "an abort entry must be a map"),
        ({"wf": {"next": 5}}, "next must be an array"),
        ({"wf": {"chord": ["tasks:chord:c", "0"]}}, "a chord index must be an integer"),
        ({"wf": {"chord": ["tasks:schedule", 0]}}, "is not a chord key"),
        ({"wf": {"fail": [["tasks:schedule", "tasks:done:b", 1]]}}, "is not a job key"),
        ({"wf": {"fail": [["tasks:job:b", "tasks:schedule", 1]]}}, "is not the done list"),
        ({"wf": {"fail": [["tasks:job:b", "tasks:done:b", 0.5]]}}, "ttl ms must be an integer"),
        (
            {"wf": {"abort": [{"key": "tasks:schedule", "fail": [], "errback": []}]}},
            "is not a chord key",
        ),
        ({"wf": {"next": [{**_FRAG, "queue": "a:b"}]}}, "invalid queue name"),
        ({"wf": {"next": [{**_FRAG, "id": "../x"}]}}, "invalid job id"),
        ({"wf": {"next": [{**_FRAG, "priority": "urgent"}]}}, "known priority"),
        ({"wf": {"next": [{**_FRAG, "ttl": 2**62}]}}, "a fragment's ttl must be"),
        ({"wf": {"next": [{**_FRAG, "countdown_ms": -1}]}}, "countdown_ms must be"),
        ({"wf": {"next": [{**_FRAG, "wf": {"fail": "x"}}]}}, "fail must be an array"),
        ({"wf": {"run": []}}, "unknown key"),
        ({"unique": "tasks:normal"}, "body field 'unique' must be a key tasks:unique:"),
        ({"unique": "other:unique:k"}, "body field 'unique' must be a key tasks:unique:"),
        ({"result_ttl_s": 2**62}, "'result_ttl_s' must be in"),
        ({"retries": 2**40}, "'retries' must be in"),
        ({"created_ms": -1}, "'created_ms' must be in"),
        ({"expires_ms": 2**63}, "'expires_ms' must be in"),
        ({"id": "a/../b"}, "invalid job id"),
        ({"id": "has space"}, "invalid job id"),
        ({"id": "x" * 100_000}, "invalid job id"),
    ],
)
def test_a_body_naming_foreign_keys_or_wild_numbers_is_refused(
    fields: dict[str, object], reason: str
) -> None:
    with pytest.raises(DecodeError, match=reason):
        Message.decode(_body(**fields))


def test_a_chain_nested_past_the_limit_is_refused_not_a_recursion_error() -> None:
    wf: dict[str, object] = {}
    for _ in range(300):
        wf = {"next": [{**_FRAG, "wf": wf or None}]}
    body = msgpack.packb({"v": 1, "id": "a", "task": "t", "wf": wf})
    with pytest.raises(DecodeError, match="nested deeper"):
        Message.decode(body)


def test_what_encode_writes_without_optional_fields_is_a_plain_body() -> None:
    """The bodies most jobs have are read in one step (``Message._plain``): that needs the keys
    and types encode writes to be the ones the decoder looks for."""
    for ttl in (None, 60):
        body = Message("t", (1,), {"k": 2}, retries=3, result_ttl_s=ttl).encode()
        data = msgpack.unpackb(body, raw=False)
        assert bodycheck.PLAIN_SHAPES[tuple(data)] == tuple(map(type, data.values()))
        assert Message.decode(body).result_ttl_s == ttl


def _outcome(decode: Callable[[], Message]) -> object:
    try:
        return decode()
    except DecodeError as exc:
        return ("DecodeError", str(exc))


@settings(max_examples=400)
@given(
    task=st.sampled_from(["app.add", "", "x" * 300]),
    job_id=st.sampled_from(["c81d2b301588e1ee9311a4f89b4110da", "", "a b", "é" * 3, "x" * 200]),
    kwargs=st.sampled_from([{}, {"k": 1}, {1: 2}, {"": 0}]),
    queue=st.sampled_from(["tasks", "", "q:1"]),
    priority=st.sampled_from(["high", "normal", "low", "urgent", ""]),
    created_ms=st.sampled_from([0, 1_796_605_750_380, -1, 2**62, MAX_TIME_MS + 1]),
    retries=st.sampled_from([0, 2, -1, 10**6]),
    version=st.sampled_from([1, 2]),
    ttl=st.sampled_from([None, 1, 86_400, 0, -5, 10**12]),
)
def test_a_plain_body_decodes_as_the_field_by_field_checks_say(
    task: str,
    job_id: str,
    kwargs: dict[object, object],
    queue: str,
    priority: str,
    created_ms: int,
    retries: int,
    version: int,
    ttl: int | None,
) -> None:
    values = (version, job_id, task, [1], kwargs, queue, priority, created_ms, retries)
    data = dict(zip(bodycheck.PLAIN_KEYS, values, strict=True))
    if ttl is not None:
        data["result_ttl_s"] = ttl
    body = msgpack.packb(data)
    got = _outcome(lambda: Message.decode(body))
    assert got == _outcome(lambda: Message._checked(body, data, None))
