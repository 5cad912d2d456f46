"""Wire protocol v1: what producers write is what docs/protocol.md says, and garbage is refused."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import DecodeError, EnqueueError, PayloadTooLarge
from taskq.message import PROTOCOL_VERSION, Message


def test_body_is_a_plain_msgpack_map_with_the_documented_fields() -> None:
    msg = Message("app.add", (1, [2, 3]), {"x": "y"}, queue="q", priority="high", retries=1)
    data = msgpack.unpackb(msg.encode(), raw=False)
    assert data == {
        "v": PROTOCOL_VERSION,
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
    with pytest.raises(DecodeError, match="protocol version 2 is newer"):
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
    msg = Message("t", (), {"when": {1, 2}})
    with pytest.raises(EnqueueError, match=r"keyword argument 'when' \(set\)"):
        msg.encode()


def test_oversize_payload_is_refused_with_sizes() -> None:
    msg = Message("t", ("x" * 2000,), {})
    with pytest.raises(PayloadTooLarge, match="over the 1000-byte limit"):
        msg.encode(max_bytes=1000)
