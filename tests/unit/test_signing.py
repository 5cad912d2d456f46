"""Signed job bodies (issue 17, point 3): the signer, the codec, settings and their secrets."""

from __future__ import annotations

import hashlib
import hmac

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq import App
from taskq.bodypatch import is_signed, with_retries
from taskq.config import Settings, redact
from taskq.errors import ConfigError, DecodeError
from taskq.message import Message
from taskq.signing import KeyedMac, SignatureError, Signer, key_id

K1, K2 = "first-key-0123456789abcdef", "second-key-0123456789abcdef"


def _body(**kwargs: object) -> bytes:
    return Message("tests.tasks.echo", (1, "two"), dict(kwargs), id="j1").encode()


def test_a_signed_body_decodes_and_verifies() -> None:
    signer = Signer([K1])
    body = Message("tests.tasks.echo", (1,), id="j1").encode(signer=signer)
    assert is_signed(body)
    assert Message.decode(body, signer).args == (1,)
    assert Message.decode(body).args == (1,)  # a worker without keys ignores the trailer


def test_a_body_signed_by_hand_as_the_protocol_doc_says() -> None:
    """What a Node or Go producer does: HMAC-SHA256 over the map's bytes, then append the
    msgpack array [key id, hex digest]; the key id is 8 hex digits of SHA-256 over
    b"taskq key id\\0" + key."""
    payload = msgpack.packb(
        {"v": 1, "id": "go-1", "task": "tests.tasks.echo", "args": [7], "kwargs": {}}
    )
    kid = hashlib.sha256(b"taskq key id\x00" + K1.encode()).hexdigest()[:8]
    mac = hmac.new(K1.encode(), payload, hashlib.sha256).hexdigest()
    body = payload + msgpack.packb([kid, mac])
    assert kid == key_id(K1)
    assert Message.decode(body, Signer([K1])).args == (7,)


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda b: b.replace(b"two", b"tw0"), "bad signature"),
        (lambda b: _body(), "unsigned job"),
        (lambda b: _body() + msgpack.packb(["abcdef01", "00" * 32]), "unknown key id 'abcdef01'"),
        (lambda b: _body() + msgpack.packb("not a trailer"), "malformed signature trailer"),
        (lambda b: _body() + msgpack.packb([1, 2, 3]), "malformed signature trailer"),
    ],
)
def test_bodies_that_are_refused(mangle: object, reason: str) -> None:
    signer = Signer([K1])
    body = mangle(Message("tests.tasks.echo", (1, "two"), id="j1").encode(signer=signer))  # type: ignore[operator]
    with pytest.raises(SignatureError, match=reason):
        Message.decode(body, signer)


def test_rotation_accepts_every_listed_key_and_signs_with_the_first() -> None:
    old, new = Signer([K1]), Signer([K2, K1])
    by_old = Message("t", id="a").encode(signer=old)
    by_new = Message("t", id="b").encode(signer=new)
    Message.decode(by_old, new)
    Message.decode(by_new, new)
    with pytest.raises(SignatureError, match="unknown key id"):
        Message.decode(by_new, old)
    assert msgpack.unpackb(by_new[len(_strip(by_new)) :])[0] == key_id(K2)


def _strip(body: bytes) -> bytes:
    try:
        msgpack.unpackb(body)
    except msgpack.ExtraData as extra:
        return body[: len(body) - len(extra.extra)]
    return body


def test_a_retry_is_signed_again() -> None:
    signer = Signer([K1])
    body = Message("t", id="a").encode(signer=signer)
    again = with_retries(body, 2, signer)
    assert Message.decode(again, signer).retries == 2
    unsigned = with_retries(body, 1)
    assert not is_signed(unsigned) and Message.decode(unsigned).retries == 1


def _chord_template(*later_args: object) -> tuple[bytes, bytes]:
    """A chord body's ``pre`` and ``post``: the bytes around its first argument, which Redis
    fills in with the header's results."""
    mark = msgpack.ExtType(71, b"mark")
    template = Message("t", (mark, *later_args), id="c").encode()
    pre, _, post = template.partition(msgpack.packb(mark))
    return pre, post


def test_a_chord_body_joined_in_redis_verifies_with_its_split_trailer() -> None:
    signer = Signer([K1])
    pre, post = _chord_template("x")
    post += signer.split_trailer(pre, post)
    joined = pre + msgpack.packb([1, 2, 3]) + post
    assert Message.decode(joined, signer).args == ([1, 2, 3], "x")
    with pytest.raises(SignatureError, match="bad signature"):  # the rest was changed
        Message.decode(joined.replace(b"\xa1x", b"\xa1y"), signer)
    with pytest.raises(DecodeError):  # two values where one was: refused, however it parses
        Message.decode(pre + msgpack.packb(1) + msgpack.packb(2) + post, signer)


def test_signer_keys_are_checked() -> None:
    for bad in ([], [""], ["  "], "k1"):
        with pytest.raises(ConfigError, match="signing_keys"):
            Signer(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="listed twice"):
        Signer([K1, K1])
    with pytest.raises(ConfigError, match="not one string"):
        Settings(signing_keys="k1")  # type: ignore[arg-type]


def test_signing_keys_from_the_environment() -> None:
    settings = Settings.from_env({"TASKQ_SIGNING_KEYS": f" {K2}, {K1} "})
    assert settings.signing_keys == (K2, K1)
    assert settings.signer is not None and settings.signer.key_ids == (key_id(K2), key_id(K1))
    assert Settings.from_env({}).signer is None


def test_no_secret_in_reprs() -> None:
    url = "rediss://user:hunter2-secret@127.0.0.1:6390/0?password=hunter2-secret&ssl_password=hunter2-secret"
    settings = Settings(redis_url=url, signing_keys=(K1, K2))
    app = App(url, signing_keys=[K1, K2])
    shown = " ".join([repr(settings), str(settings), repr(app), str(app), redact(url)])
    shown += repr(settings.signer)
    for secret in ("hunter2-secret", K1, K2):
        assert secret not in shown
    assert "user:***@127.0.0.1:6390" in redact(url)
    assert "?password=***&ssl_password=***" in redact(url)
    assert "2 key(s)" in repr(settings)


@pytest.mark.parametrize("key", [b"k", b"k" * 64, b"k" * 65, bytes(range(200))])
def test_the_keyed_mac_is_hmac_sha256(key: bytes) -> None:
    for data in (b"", b"x", bytes(range(256)) * 3):
        assert KeyedMac(key).digest(data) == hmac.digest(key, data, "sha256")


def test_a_body_that_only_ends_like_a_trailer_is_decoded_the_general_way() -> None:
    """The fast split of a plain trailer must not misread a body whose last argument holds
    the same bytes."""
    signer = Signer([K1])
    head = b"\x92" + msgpack.packb(key_id(K1)) + b"\xd9\x40"
    tricky = Message("t", ((head + b"0" * 64).decode("latin-1"),), id="a").encode()
    assert Message.decode(tricky).args[0].endswith("0" * 64)
    with pytest.raises(SignatureError, match="unsigned job"):
        Message.decode(tricky, signer)
    signed = Message("t", (1,), id="b").encode(signer=signer)
    assert signer.plain_trailer(signed) == signed[-76:]
    assert Message.decode(signed, signer).args == (1,)


def test_a_chord_body_cannot_be_split_again_elsewhere() -> None:
    """The trailer's lengths are under the MAC: moving the split point (``pre + post`` still
    the same bytes) to put a value at another place is refused."""
    signer = Signer([K1])
    pre, post = _chord_template(5, 6)
    honest = signer.split_trailer(pre, post)
    assert post.startswith(b"\x05")  # the second argument, a fixint
    kid, mac, _, _ = msgpack.unpackb(honest)
    # Given: the split moved one byte on: the 5 becomes the first argument, "evil" the second.
    forged = pre + b"\x05" + msgpack.packb("evil") + post[1:]
    forged += msgpack.packb([kid, mac, len(pre) + 1, len(post) - 1])
    assert Message.decode(forged).args == (5, "evil", 6)
    # Then: refused.
    with pytest.raises(SignatureError, match="bad signature"):
        Message.decode(forged, signer)


def test_a_split_trailer_whose_mac_leaves_out_the_split_point_is_refused() -> None:
    """A trailer made before the MAC covered ``len(pre)`` (MAC over ``pre + post`` only)."""
    signer = Signer([K1])
    pre, post = _chord_template("x")
    old_mac = hmac.new(K1.encode(), pre + post, hashlib.sha256).hexdigest()
    trailer = msgpack.packb([key_id(K1), old_mac, len(pre), len(post)])
    body = pre + msgpack.packb([1]) + post + trailer
    with pytest.raises(SignatureError, match="bad signature"):
        Message.decode(body, signer)


@pytest.mark.parametrize(
    "mac",
    ["é" * 64, "é" + "0" * 63, "0" * 63, "0" * 65, "A" * 64, " " + "0" * 63, "0" * 63 + "\n"],
)
def test_a_mac_that_is_not_64_lowercase_hex_digits_is_a_malformed_trailer(mac: str) -> None:
    signer = Signer([K1])
    body = _body() + msgpack.packb([key_id(K1), mac])
    with pytest.raises(SignatureError, match="malformed signature trailer"):
        Message.decode(body, signer)


def test_the_refusal_of_an_unknown_key_id_does_not_name_the_known_ones() -> None:
    signer = Signer([K1, K2])
    body = Message("t", id="a").encode(signer=Signer(["a-third-key-0123456789abcdef"]))
    with pytest.raises(SignatureError) as refused:
        Message.decode(body, signer)
    assert "unknown key id" in refused.value.reason
    assert key_id(K1) not in refused.value.reason and key_id(K2) not in refused.value.reason


SIGNER = Signer([K1])


ARGS = st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=8), st.binary(max_size=8)))
RESULTS = st.lists(st.integers(-(2**63), 2**64 - 1), max_size=3)


def _signed_chord(later: list[object], results: list[int]) -> bytes:
    pre, post = _chord_template(*later)
    return pre + msgpack.packb(results) + post + SIGNER.split_trailer(pre, post)


TRAILER_PARTS = st.one_of(
    st.text(max_size=70),
    st.text(alphabet="0123456789abcdefABCDEF", min_size=8, max_size=8),
    st.text(alphabet="0123456789abcdef", min_size=63, max_size=65),
    st.binary(max_size=70),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.none(),
    st.booleans(),
    st.lists(st.integers(0, 2**20), max_size=2),
)


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[bytes, bytes, bool]:
    """A signed body (plain or a chord's), and a copy with one change: a byte flipped, cut,
    bytes added, or its trailer replaced by one whose parts have any type, encoding and size
    (the real key id first, sometimes, so that the MAC and the lengths are checked)."""
    chord = draw(st.booleans())
    later = draw(ARGS)
    if chord:
        body = _signed_chord(later, draw(RESULTS))
    else:
        body = Message("t", tuple(later), id="j").encode(signer=SIGNER)
    how = draw(st.sampled_from(["flip", "cut", "extend", "trailer"]))
    if how == "flip":
        i = draw(st.integers(0, len(body) - 1))
        changed = body[:i] + bytes([body[i] ^ draw(st.integers(1, 255))]) + body[i + 1 :]
    elif how == "cut":
        changed = body[: draw(st.integers(0, len(body) - 1))]
    elif how == "extend":
        changed = body + draw(st.binary(min_size=1, max_size=80))
    else:
        payload = draw(st.sampled_from([_body(), body[: len(body) - len(_trailer_of(body))], body]))
        parts = draw(st.lists(TRAILER_PARTS, max_size=5))
        if parts and draw(st.booleans()):
            parts[0] = key_id(K1)
        raw = msgpack.packb(parts) if draw(st.booleans()) else draw(st.binary(max_size=90))
        changed = payload + raw
    return body, changed, chord


@settings(max_examples=500, deadline=None)
@given(case=_mutated())
def test_a_mutated_signed_body_is_only_ever_refused(case: tuple[bytes, bytes, bool]) -> None:
    """Whatever the change, decoding with keys raises a SignatureError or a DecodeError (the
    executor's rejection), never anything else; a changed body verifies only if the change
    was inside a chord's joined value (the header results, which no MAC covers)."""
    original, changed, chord = case
    try:
        msg = Message.decode(changed, SIGNER)
    except (SignatureError, DecodeError):
        return
    assert chord or changed == original, "a changed plain body verified"
    signed = Message.decode(original, SIGNER)
    assert msg._replace(args=msg.args[1:]) == signed._replace(args=signed.args[1:])


def _trailer_of(body: bytes) -> bytes:
    try:
        msgpack.unpackb(body)
    except msgpack.ExtraData as extra:
        return extra.extra
    return b""
