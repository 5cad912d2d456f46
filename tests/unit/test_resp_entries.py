"""The reply reader's stream-entry run (taskq.broker.resp._entries) reads exactly what the
element-by-element parse reads, whatever bytes a client put in the fields: any reply built
from known entries parses back to them, however the socket cuts it, and the run is taken for
the batches a fetch reads and refused for anything it cannot read exactly."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.broker import resp
from taskq.broker.resp import _entries, _Replies
from tests.resp_support import Chunks

Entry = tuple[bytes, list[bytes]]

TRAPS = [b"\r\n", b"$5\r\n", b"*2\r\n$", b"*x\r\n$", b"$", b"*2", b"\r", b"\n"]
"""Bytes that look like RESP inside a value (a field is whatever a client wrote)."""
values = st.one_of(
    st.binary(max_size=40),
    st.lists(st.sampled_from([*TRAPS, b"ab", b"0"]), max_size=5).map(b"".join),
)


def encode(value: Any) -> bytes:
    """RESP2 of bytes, None (nil bulk), an int, or a list of those."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    return b"*%d\r\n" % len(value) + b"".join(encode(v) for v in value)


def xreadgroup(stream: bytes, rows: list[Entry]) -> list[Any]:
    """An XREADGROUP reply (one stream) as redis-py's parser gives it."""
    return [[stream, [[entry_id, fields] for entry_id, fields in rows]]]


def parse(replies: list[Any], size: int) -> list[Any]:
    data = b"".join(encode(r) for r in replies)
    return _Replies(Chunks(data, size), len(replies)).read()  # type: ignore[arg-type]


@st.composite
def batches(draw: st.DrawFn) -> list[Entry]:
    """Up to 12 entries: mostly of one shape (a fetch's batch), sometimes of several."""
    n = draw(st.integers(0, 12))
    fields = draw(st.integers(1, 4)) * 2
    uniform = draw(st.booleans())
    rows = []
    for i in range(n):
        k = fields if uniform else draw(st.integers(0, 3)) * 2
        rows.append((b"1-%d" % i, draw(st.lists(values, min_size=k, max_size=k))))
    return rows


@settings(max_examples=400, deadline=None)
@given(rows=batches(), size=st.sampled_from([1, 3, 7, 50, 1 << 16]), after=st.booleans())
def test_any_batch_of_entries_parses_back_to_itself(
    rows: list[Entry], size: int, after: bool
) -> None:
    reply = xreadgroup(b"tasks:normal", rows)
    replies: list[Any] = [7, reply, [b"x", None]] if after else [reply]
    assert parse(replies, size) == replies


@settings(max_examples=200, deadline=None)
@given(rows=batches())
def test_a_run_on_any_part_of_a_reply_is_exact_or_refused(rows: list[Entry]) -> None:
    """Wherever a socket read stops in a reply, a run reads all of its entries exactly or
    none, and never raises (a reply before it holds bytes that look like an array's header
    and are not)."""
    truth = [[e, f] for e, f in rows]
    before = encode(b"*x\r\n$")
    data = before + encode(truth).split(b"\r\n", 1)[1]
    for cut in range(len(before), len(data) + 1):
        found = _entries(data[:cut], len(before), len(rows))
        assert found is None or found == (truth, len(data)), cut


def test_a_fetch_s_batch_is_read_as_one_run() -> None:
    rows = [(b"1-%d" % i, [b"task", b"t", b"body", bytes([i]) * i]) for i in range(8)]
    data = encode([[e, f] for e, f in rows]).split(b"\r\n", 1)[1] + b":1\r\n"
    found = _entries(data, 0, len(rows))
    assert found is not None
    assert found == ([[e, f] for e, f in rows], len(data) - len(b":1\r\n"))


def test_what_a_run_cannot_read_exactly_is_left_to_the_element_parse() -> None:
    def run(rows: list[Any], cut: int = 0) -> tuple[list[Any], int] | None:
        data = encode(rows).split(b"\r\n", 1)[1]
        return _entries(data[: len(data) - cut], 0, len(rows))

    plain = [[b"1-%d" % i, [b"task", b"t", b"body", b"b"]] for i in range(6)]
    assert run(plain) is not None
    crlf = [*plain[:3], [b"1-9", [b"task", b"t", b"body", b"a\r\n$1\r\nb"]], *plain[3:]]
    assert run(crlf) is None  # a value holding CRLF: its first piece is short of its header
    mixed = [*plain[:3], [b"1-9", [b"task", b"t"]], *plain[3:]]
    assert run(mixed) is None
    assert run([*plain, [b"1-9", None]]) is None  # a deleted entry (a pending read)
    for cut in (1, 2, 3):  # not all of it in the buffer yet (2: all but the last CRLF)
        assert run(plain, cut=cut) is None
    assert run([[b"tasks:normal", plain]] * 4) is None  # streams, not entries


def test_an_entry_smuggled_inside_a_field_is_not_read() -> None:
    """A value that holds the bytes of whole entries: cut at each CRLF they line up with the
    real ones, and only the headers' lengths tell them apart."""
    plain = [(b"1-%d" % i, [b"task", b"t", b"body", b"b"]) for i in range(6)]
    fake = encode([[b"9-9", [b"task", b"evil", b"body", b"x"]]] * 2).split(b"\r\n", 1)[1]
    smuggler = (b"1-6", [b"task", b"t", b"body", b"b\r\n" + fake.removesuffix(b"\r\n")])
    for rows in ([*plain, smuggler], [smuggler, *plain]):
        data = encode([[e, f] for e, f in rows]).split(b"\r\n", 1)[1]
        assert _entries(data, 0, len(rows)) is None
        reply = xreadgroup(b"s", rows)
        assert parse([reply], 1 << 16) == [reply]


def test_an_entry_of_another_shape_that_mimics_the_others_is_not_read() -> None:
    """Extra fields whose values spell the next entry's header: the array headers tell."""
    plain = [(b"1-%d" % i, [b"task", b"t", b"body", b"b"]) for i in range(6)]
    odd = (b"1-6", [b"task", b"t", b"body", b"b", b"*2", b"$3"])
    for rows in ([*plain, odd, *plain], [odd, *plain]):
        data = encode([[e, f] for e, f in rows]).split(b"\r\n", 1)[1]
        assert _entries(data, 0, len(rows)) is None
        reply = xreadgroup(b"s", rows)
        assert parse([reply], 1 << 16) == [reply]


def test_an_array_that_is_not_all_entries_is_not_read_as_entries() -> None:
    """An entry, then an element that is not one, then bytes of the replies after the array
    that would pass for the rest of an entry: the array headers every entry starts with
    tell."""
    entry = encode([b"1-0", [b"task", b"t"]])
    after = b"$3\r\n1-1\r\n*2\r\n$4\r\ntask\r\n$1\r\nt\r\n"
    assert _entries(entry + b":7\r\n" + after, 0, 2) is None
    not_fields = b"*2\r\n$3\r\n1-1\r\n:5\r\n"  # an entry whose second element is no array
    assert _entries(entry + not_fields + b"$4\r\ntask\r\n$1\r\nt\r\n", 0, 2) is None


def test_a_fetch_of_fewer_entries_is_read_element_by_element() -> None:
    rows = [(b"1-%d" % i, [b"task", b"t"]) for i in range(resp.MIN_ENTRIES - 1)]
    reply = xreadgroup(b"s", rows)
    assert parse([reply], 1 << 16) == [reply]
