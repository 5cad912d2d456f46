"""HMAC-SHA256 signatures on job bodies, so that a worker runs only jobs its producers wrote.

A signed body is the job's msgpack map followed by a second msgpack value, the *trailer*:
``[key id, hex HMAC-SHA256 of the map's bytes]``. Appending keeps everything that reads
bodies working unchanged: Redis's scripts decode the first value (``cmsgpack.unpack``
returns the trailer as a second result they ignore), the body moves between streams and
sets byte for byte, and a worker without keys simply ignores the trailer.

A chord's body is the one job whose bytes are completed inside Redis: the script that counts
the last header result joins the results into its first argument. Its trailer is
``[key id, hex HMAC, len(pre), len(post)]`` and the HMAC covers the body without that joined
value, then where it goes: ``pre + post + len(pre)`` (8 bytes, big-endian), so a holder of
the body cannot move the joined value elsewhere (``pre + post`` split at another point). The
worker checks that exactly one msgpack value sits between ``pre`` and ``post``.

A MAC is 64 lowercase hex digits; a trailer of any other shape is refused, never compared.
See docs/protocol.md (Signed bodies) for producers in other languages.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import logging
import re
from collections.abc import Sequence
from typing import Any

import msgpack

from taskq.errors import ConfigError, DecodeError

logger = logging.getLogger(__name__)

KEY_ID_PREFIX = b"taskq key id\x00"
KEY_ID = re.compile(r"[0-9a-f]{8}")
MAC = re.compile(r"[0-9a-f]{64}")
"""The shapes of a trailer's key id and MAC (lowercase hex, as :func:`key_id` and
:meth:`KeyedMac.hex` write them)."""


class SignatureError(DecodeError):
    """A body that this worker must not run: unsigned, signed with an unknown key, or changed
    since it was signed."""


def key_id(key: str) -> str:
    """The public name of a signing key: 8 hex digits of SHA-256 over a fixed prefix and the
    key. It says which key signed a body without saying anything useful about the key."""
    return hashlib.sha256(KEY_ID_PREFIX + key.encode()).hexdigest()[:8]


class KeyedMac:
    """HMAC-SHA256 (RFC 2104) of one key, its two padded key blocks hashed once: the MAC of
    ``hmac.digest(key, data, "sha256")`` without setting the key up again on every call
    (which is most of the cost for a job-sized body)."""

    __slots__ = ("_inner", "_outer")

    BLOCK = 64  # SHA-256's block size

    def __init__(self, key: bytes) -> None:
        if len(key) > self.BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(self.BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def digest(self, data: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def hex(self, data: bytes) -> str:
        return self.digest(data).hex()


class Signer:
    """Signs with the first of ``keys`` and accepts a body signed with any of them, so keys
    rotate without downtime (docs/security.md, Signed jobs).

    Raises:
        ConfigError: no key, an empty key, or a key given twice.
    """

    __slots__ = ("_heads", "_keys", "_sign_id", "_sign_key", "_trailer_head")

    PLAIN_TRAILER_BYTES = 76
    """A ``[key id, hex MAC]`` trailer: array, str of 8, str8 of 64."""

    def __init__(self, keys: Sequence[str]) -> None:
        if isinstance(keys, str) or not keys:
            raise ConfigError("signing_keys must be a non-empty list of keys")
        known: dict[str, KeyedMac] = {}
        for key in keys:
            if not isinstance(key, str) or not key.strip():
                raise ConfigError("signing_keys must be non-empty strings")
            kid = key_id(key)
            if kid in known:
                raise ConfigError(f"signing key {kid} is listed twice")
            known[kid] = KeyedMac(key.encode())
        self._keys = known
        self._sign_id = key_id(keys[0])
        self._sign_key = known[self._sign_id]
        # The trailer up to its MAC, packed once: a 2-array, the key id, a str8 of 64 bytes.
        self._heads = {b"\x92" + bytes(msgpack.packb(kid)) + b"\xd9\x40" for kid in known}
        self._trailer_head = b"\x92" + bytes(msgpack.packb(self._sign_id)) + b"\xd9\x40"

    def __repr__(self) -> str:
        return f"<Signer signs with {self._sign_id}, accepts {', '.join(self._keys)}>"

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def sign(self, body: bytes) -> bytes:
        """``body`` with its trailer."""
        return body + self._trailer_head + binascii.hexlify(self._sign_key.digest(body))

    def plain_trailer(self, body: bytes) -> bytes | None:
        """The last bytes of ``body`` if they have the shape of a plain trailer of one of
        these keys (its MAC still to be checked), so the map before them can be decoded
        without msgpack raising ExtraData for them; else None."""
        n = self.PLAIN_TRAILER_BYTES
        if len(body) > n and body[-n : 12 - n] in self._heads:
            return body[-n:]
        return None

    def split_trailer(self, pre: bytes, post: bytes) -> bytes:
        """The trailer of a body that Redis completes as ``pre + value + post``."""
        mac = self._sign_key.hex(_split_payload(pre, post))
        return bytes(msgpack.packb([self._sign_id, mac, len(pre), len(post)]))

    def verify(self, body: bytes, trailer: bytes | None) -> None:
        """Check the signature of ``body``, whose last ``len(trailer)`` bytes are its
        trailer (``None``: the body has none).

        Raises:
            SignatureError: the reason, naming key ids only.
        """
        if trailer is None:
            raise SignatureError("unsigned job: this worker runs only signed jobs", body)
        parts = _parts(trailer)
        if parts is None:
            raise SignatureError("malformed signature trailer", body)
        kid, mac = parts[0], parts[1]
        key = self._keys.get(kid)
        if key is None:
            # The known ids go to the worker's log only: the reason reaches dead letters.
            logger.warning("a job signed with unknown key id %r; known: %s", kid, self.key_ids)
            raise SignatureError(f"signed with unknown key id {kid!r}", body)
        payload = body[: len(body) - len(trailer)]
        if len(parts) == 4:
            signed = _without_joined_value(payload, parts[2], parts[3])
            if signed is None:
                raise SignatureError("malformed signature trailer (joined value)", body)
            payload = signed
        if not hmac.compare_digest(key.digest(payload), bytes.fromhex(mac)):
            raise SignatureError(f"bad signature (key id {kid}): the body was changed", body)


@functools.lru_cache(maxsize=8)
def signer_for(keys: tuple[str, ...]) -> Signer | None:
    """The signer of ``keys`` (None for none), built once per process."""
    return Signer(keys) if keys else None


def _parts(trailer: bytes) -> list[Any] | None:
    try:
        parts = msgpack.unpackb(trailer, raw=False)
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if not isinstance(parts, list) or len(parts) not in (2, 4):
        return None
    kid, mac = parts[0], parts[1]
    if not (type(kid) is str and KEY_ID.fullmatch(kid) and type(mac) is str and MAC.fullmatch(mac)):
        return None
    if len(parts) == 4 and not all(type(n) is int and n >= 0 for n in parts[2:]):
        return None
    return parts


def _split_payload(pre: bytes, post: bytes) -> bytes:
    """What the MAC of a split body covers: ``pre + post``, then ``len(pre)`` (8 bytes,
    big-endian), which pins where the joined value goes."""
    return pre + post + len(pre).to_bytes(8, "big")


def _without_joined_value(payload: bytes, pre_len: int, post_len: int) -> bytes | None:
    """What the MAC of ``payload`` split as ``pre + value + post`` covers, if exactly one
    msgpack value sits between them, else None (anything else could change how the rest of
    the body parses)."""
    if pre_len + post_len > len(payload):
        return None
    try:
        msgpack.unpackb(payload[pre_len : len(payload) - post_len], raw=False, strict_map_key=False)
    except Exception:  # not one whole value: more, fewer, or garbage
        return None
    return _split_payload(payload[:pre_len], payload[len(payload) - post_len :])
