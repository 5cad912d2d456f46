"""Encoded bodies as bytes: whether one is signed, and a worker's edits of one (the attempts
it used, ``retries``, and how often it snoozed, ``snoozes``), signed again when signing is
on. Every other field, known or not, is kept as the producer wrote it (a body of a newer
producer keeps its newer fields).
"""

from __future__ import annotations

import msgpack

from taskq.config import MAX_RETRIES
from taskq.message import BATCH_MARK, Message
from taskq.signing import Signer


def with_retries(
    body: bytes, retries: int, signer: Signer | None = None, *, snoozes: int | None = None
) -> bytes:
    """The same body with ``retries`` (and ``snoozes``, if given) set, signed again by
    ``signer`` (a worker's retry stays signed); every other field, known or not, is kept as
    is. A batch job's body becomes its message's (the calls as one argument, as its run had
    them), signed so."""
    if body.startswith(BATCH_MARK):
        one = Message.decode(body)._replace(retries=retries).encode(signer=signer)
        return one if snoozes is None else with_retries(one, retries, signer, snoozes=snoozes)
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


def is_signed(body: bytes) -> bool:
    """Whether ``body`` carries a signature trailer (whether it verifies is the signer's
    question)."""
    try:
        msgpack.unpackb(body, raw=False, strict_map_key=False)
    except msgpack.ExtraData:
        return True
    except Exception:  # not a body at all
        return False
    return False
