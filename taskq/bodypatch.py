"""A worker's edits of an encoded body: the attempts it used (``retries``) and how often it
snoozed (``snoozes``), signed again when signing is on. Every other field, known or not, is
kept as the producer wrote it (a body of a newer producer keeps its newer fields).
"""

from __future__ import annotations

import msgpack

from taskq.config import MAX_RETRIES
from taskq.signing import Signer


def with_retries(
    body: bytes, retries: int, signer: Signer | None = None, *, snoozes: int | None = None
) -> bytes:
    """The same body with ``retries`` (and ``snoozes``, if given) set, signed again by
    ``signer`` (a worker's retry stays signed); every other field, known or not, is kept as
    is."""
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except msgpack.ExtraData as extra:  # its old signature no longer holds
        data = extra.unpacked
    data["retries"] = retries
    if snoozes is not None:
        data["snoozes"] = snoozes
    patched = bytes(msgpack.packb(data, use_bin_type=True))
    return patched if signer is None else signer.sign(patched)


def snoozes_of(body: bytes) -> int:
    """How often the job of ``body`` snoozed so far (its ``snoozes`` field; 0 when absent or
    not a whole number in range). Read only when the job snoozes again."""
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except msgpack.ExtraData as extra:
        data = extra.unpacked
    except Exception:  # (a body that decoded before cannot fail here; be safe anyway)
        return 0
    n = data.get("snoozes", 0) if isinstance(data, dict) else 0
    return n if type(n) is int and 0 <= n <= MAX_RETRIES else 0
