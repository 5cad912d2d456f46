"""The extension types (taskq.codec): every type round-trips exactly, nested anywhere, and
bodies of plain types are the bytes they always were."""

from __future__ import annotations

import datetime as dt
import enum
import json
import threading
import uuid
from collections import OrderedDict, namedtuple
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq import codec
from taskq.bodypatch import with_retries
from taskq.dashboard.format import value
from taskq.deadletter import Deadletter
from taskq.errors import DecodeError, EnqueueError
from taskq.flow import spawn
from taskq.message import PLAIN_VERSION, PROTOCOL_VERSION, Message
from taskq.ops.jobview import render_job
from taskq.results import JobStatus, decode_value, encode_args, encode_result


class Color(enum.Enum):
    RED = "red"
    GREEN = (0, 255, 0)


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


NEW_YORK = ZoneInfo("America/New_York")

plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
hashable = st.integers() | st.text() | st.dates() | st.uuids() | st.decimals(allow_nan=False)
extended = st.one_of(
    st.datetimes(),
    st.datetimes(timezones=st.timezones(), allow_imaginary=False),
    st.datetimes(timezones=st.just(dt.timezone(dt.timedelta(hours=5, minutes=30)))),
    st.dates(),
    st.times(),
    st.times(timezones=st.just(dt.timezone.utc)),
    st.timedeltas(),
    st.decimals(allow_nan=False),
    st.uuids(),
    st.sampled_from(list(Color) + list(Level)),
    st.integers().filter(lambda n: not -(2**63) <= n < 2**64) | st.integers(2**64, 2**200),
    st.sets(hashable, max_size=4),
    st.frozensets(hashable, max_size=4),
)
values = st.recursive(
    plain | extended,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
    ),
    max_leaves=12,
)


def same(a: Any, b: Any) -> bool:
    """Equal, of the same type all the way down, and for times the same offset and zone
    (two aware datetimes are == when they are the same instant in different zones)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, dt.datetime | dt.time):
        return a == b and a.utcoffset() == b.utcoffset() and str(a.tzinfo) == str(b.tzinfo)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    return bool(a == b)


@settings(max_examples=300)
@given(values)
def test_every_type_round_trips_exactly_nested_anywhere(value: Any) -> None:
    assert same(codec.unpackb(codec.packb(value)), value)


@given(values, st.dictionaries(st.text(), values, max_size=3))
def test_a_job_carries_its_arguments_exactly(args: Any, kwargs: dict[str, Any]) -> None:
    msg = Message("t", (args,), kwargs)
    decoded = Message.decode(msg.encode())
    assert same(decoded.args, (args,)) and same(decoded.kwargs, kwargs)
    assert same(decode_value(encode_result(args, max_bytes=1 << 30)), args)


@given(st.lists(plain, max_size=4), st.dictionaries(st.text(), plain, max_size=4))
def test_plain_bodies_are_the_bytes_they_always_were(args: list[Any], kw: dict[str, Any]) -> None:
    """What the encoder wrote before extension types: msgpack.packb of the map, version 1."""
    msg = Message("t", tuple(args), kw, queue="q", priority="high", eta_ms=5, headers={"a": "b"})
    before = msgpack.packb(
        {
            "v": 1,
            "id": msg.id,
            "task": "t",
            "args": tuple(args),
            "kwargs": kw,
            "queue": "q",
            "priority": "high",
            "created_ms": msg.created_ms,
            "retries": 0,
            "eta_ms": 5,
            "headers": {"a": "b"},
        },
        use_bin_type=True,
    )
    assert msg.encode() == before
    assert encode_result(args, max_bytes=1 << 30) == msgpack.packb(args, use_bin_type=True)


def test_a_body_is_version_2_only_when_it_holds_an_extension() -> None:
    assert msgpack.unpackb(Message("t", (1, [2])).encode())["v"] == PLAIN_VERSION == 1
    body = Message("t", (dt.date(2026, 1, 1),)).encode()
    assert msgpack.unpackb(body)["v"] == PROTOCOL_VERSION == 2
    assert Message.decode(body).args == (dt.date(2026, 1, 1),)


@pytest.mark.parametrize("fold", [0, 1])
def test_an_aware_datetime_across_a_dst_change_keeps_its_instant_and_zone(fold: int) -> None:
    # 01:30 on 2026-11-01 happens twice in New York: EDT (-04:00), then EST (-05:00).
    when = dt.datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=fold)
    back = Message.decode(Message("t", (when,)).encode()).args[0]
    assert back.tzinfo is NEW_YORK and back.fold == fold
    assert back.timestamp() == when.timestamp() and back.utcoffset() == when.utcoffset()
    text = codec.packb(when)[3:].decode()
    assert text == f"2026-11-01T01:30:00{'-05:00' if fold else '-04:00'}[America/New_York]"


@pytest.mark.parametrize("text", ["-0.00", "1E+40", "0E-7", "-1.2345678901234567890123456789E-300"])
def test_decimals_keep_sign_digits_and_exponent(text: str) -> None:
    back = codec.unpackb(codec.packb(Decimal(text)))
    assert str(back) == text and back.as_tuple() == Decimal(text).as_tuple()


def test_subclasses_are_carried_as_their_base() -> None:
    point = namedtuple("point", "x y")
    assert codec.unpackb(codec.packb(point(1, 2))) == (1, 2)
    assert codec.packb(OrderedDict(a=1)) == msgpack.packb({"a": 1})
    assert codec.unpackb(codec.packb([Level.HIGH])) == [Level.HIGH]


def test_an_unknown_extension_code_is_a_clear_decode_error() -> None:
    body = msgpack.packb({"v": 2, "id": "j", "task": "t", "args": [msgpack.ExtType(99, b"?")]})
    with pytest.raises(DecodeError, match="unknown msgpack extension type 99"):
        Message.decode(body)


@pytest.mark.parametrize(
    ("code", "payload", "says"),
    [
        (codec.DATETIME, b"yesterday", "datetime"),
        (codec.DATETIME, b"2026-01-01T00:00:00[Nowhere/Land]", "datetime"),
        (codec.UUID, b"short", "UUID"),
        (codec.ENUM, msgpack.packb(["os:path", 1]), "no Enum class"),
        (codec.ENUM, msgpack.packb(["not_loaded_anywhere:E", 1]), "not loaded"),
        (codec.SET, msgpack.packb([[1]]), "set"),
    ],
)
def test_a_bad_payload_is_a_decode_error_naming_the_type(
    code: int, payload: bytes, says: str
) -> None:
    with pytest.raises(codec.ExtensionError, match=says):
        codec.unpackb(msgpack.packb(msgpack.ExtType(code, payload)))


def test_values_render_readably() -> None:
    value = [dt.date(2026, 3, 1), Decimal("9.90"), (1,), Color.RED, uuid.UUID(int=1)]
    assert codec.readable(value) == (
        "[2026-03-01, 9.90, (1,), Color.RED, 00000000-0000-0000-0000-000000000001]"
    )
    assert codec.jsonable({"at": dt.datetime(2026, 3, 1, 12), "n": {Decimal("1.5")}}) == {
        "at": "2026-03-01T12:00:00",
        "n": ["1.5"],
    }


def test_a_worker_of_version_1_refuses_a_body_with_extensions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a worker from before extension types does with one: the version check it has."""
    body = Message("t", (Decimal("1"),)).encode()
    monkeypatch.setattr("taskq.message.PROTOCOL_VERSION", 1)
    with pytest.raises(DecodeError, match="protocol version 2 is newer than this worker's 1"):
        Message.decode(body)
    assert Message.decode(Message("t", (1,)).encode()).args == (1,)


def test_a_retry_from_the_dead_letters_keeps_the_extensions_bytes() -> None:
    msg = Message("t", ((1, 2), dt.date(2026, 1, 1)), {"at": Decimal("1.0")})
    again = Message.decode(with_retries(msg.encode(), 3))
    assert again.retries == 3 and again.args == msg.args and again.kwargs == msg.kwargs
    assert msgpack.unpackb(with_retries(msg.encode(), 3))["v"] == PROTOCOL_VERSION


def test_taskq_job_and_the_dashboard_show_values_readably() -> None:
    args = encode_args((dt.date(2026, 3, 1), Decimal("9.90")), {"who": uuid.UUID(int=1)})
    unknown = msgpack.packb([msgpack.ExtType(99, b"??"), 1])
    raw = {b"state": b"succeeded", b"task": b"t", b"args": args, b"result": unknown}
    status = JobStatus.from_record("j", raw, now_ms=0)
    text = "\n".join(render_job(status, 0))
    assert "args      (2026-03-01, 9.90, who=00000000-0000-0000-0000-000000000001)" in text
    assert "result    [<msgpack extension type 99: 2 bytes>, 1]" in text
    assert status.to_json()["args"] == ["2026-03-01", "9.90"]
    assert value(dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)) == "2026-03-01T00:00:00+00:00"


def test_a_dead_letter_with_typed_arguments_shows_as_json() -> None:
    body = Message("t", (dt.date(2026, 1, 1), b"\x00"), {"n": Decimal("1.5")}).encode()
    dead = Deadletter("1-0", "t", "j", body, "E", "e", "", 1, 0, 0, "w", "q:normal", "1-0")
    shown = json.loads(json.dumps(dead.detail()))["body"]
    assert (shown["args"], shown["kwargs"]) == (["2026-01-01", "\x00"], {"n": "1.5"})


def test_extensions_nested_thousands_deep_fail_the_job_not_the_process() -> None:
    payload = msgpack.packb([])
    for _ in range(5_000):  # (each level is a nested msgpack call: its C stack would overflow)
        payload = msgpack.packb(msgpack.ExtType(codec.TUPLE, payload))
    body = msgpack.packb({"v": 2, "id": "j", "task": "t", "args": [msgpack.ExtType(7, payload)]})
    with pytest.raises(DecodeError, match="nested more than 32 deep"):
        Message.decode(body)
    deep: tuple[Any, ...] = ()
    for _ in range(40):
        deep = (deep,)
    with pytest.raises(EnqueueError, match="nested more than 32 deep"):
        Message("t", (deep,)).encode()


def test_a_huge_int_shows_by_its_size() -> None:
    huge = codec.unpackb(codec.packb(10**5000))
    assert huge == 10**5000 and codec.readable(huge) == "<int of 16610 bits>"
    assert codec.jsonable(2**70) == "1180591620717411303424"


def test_a_chain_step_is_version_2_when_its_parents_result_holds_an_extension() -> None:
    frag = {
        "t": "job", "id": "b", "task": "t", "args": [{"v": 1}], "kwargs": {}, "queue": "tasks",
        "priority": "normal", "ttl": None, "imm": False, "countdown_ms": 0, "wf": None,
    }  # fmt: skip
    for result, version in ((codec.packb([1, "v"]), 1), (codec.packb((1, "v")), 2)):
        [op] = spawn([frag], result, None).ops
        body = op[3]
        assert msgpack.unpackb(body)["v"] == version
        assert Message.decode(body).args == (codec.unpackb(result), {"v": 1})
    assert not codec.uses_extensions(msgpack.packb([b"\xc7\xd4 (ext heads, in a bin)"]))


def test_threads_packing_at_once_each_get_their_own_bytes() -> None:
    """Each thread packs with a packer of its own (a packer writes into its own buffer)."""
    values = [[i, f"v{i}", {"k": i}, b"x" * (i % 50)] for i in range(300)]
    expected = [msgpack.packb(v, use_bin_type=True) for v in values]
    start = threading.Barrier(4)
    wrong: list[int] = []

    def pack_all() -> None:
        start.wait()
        for _ in range(20):
            wrong.extend(i for i, v in enumerate(values) if codec.pack(v) != (expected[i], False))

    threads = [threading.Thread(target=pack_all) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_a_value_after_one_the_plain_packer_refused_packs_alone() -> None:
    """A value the plain packer hands to the extension hook, or that cannot be packed, leaves
    nothing behind in the packer the next value uses."""
    assert codec.pack([1, (2, 3)]) == (
        msgpack.packb([1, msgpack.ExtType(codec.TUPLE, msgpack.packb([2, 3]))]),
        True,
    )
    assert codec.pack(None) == (b"\xc0", False)
    with pytest.raises(TypeError):
        codec.pack({"x": [1, object()]})
    assert codec.pack({"a": 1}) == (msgpack.packb({"a": 1}), False)
