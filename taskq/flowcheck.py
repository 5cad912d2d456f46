"""Checks on the parts of a body that name Redis keys or feed scripts: its workflow map
(``wf``), its uniqueness lock and its numbers, read as untrusted input before a worker acts.

A body comes from whoever may write the queue's streams (the producer role, or anyone
without signing), and a worker runs every write its ``wf`` describes with the worker's own
rights. So no key is taken as given: each key a body names must be of the kind its place
needs (a record ``Q:job:<id>`` with its ``Q:done:<id>``, a chord ``Q:chord:<id>``, this
job's own ``Q:unique:...``), of a valid queue, and every number must be an integer in range.
A body that fails is refused with a :class:`DecodeError` naming the field, and so is
dead-lettered with that reason, before any script runs (scripts do not roll back).
"""

from __future__ import annotations

from typing import Any

from taskq.config import MAX_RESULT_TTL_S as MAX_TTL_S
from taskq.config import MAX_TIME_MS, check_queue_name
from taskq.errors import ConfigError, DecodeError
from taskq.keys import PRIORITIES, QueueKeys, check_job_id

MAX_DEPTH = 200
"""How deep workflow maps may nest: a chain nests one level per step, and msgpack's own
limit on nested containers (512 to pack, 1024 to unpack) ends a chain well before this."""

MAX_CHORD_MEMBERS = 1_000_000


class Refusal(Exception):
    """A part of ``wf`` that fails its check; :func:`check_wf` names the path."""


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]``.

    Raises:
        Refusal: it is not.
    """
    if type(value) is not int or not low <= value <= high:
        raise Refusal(f"{name} must be an integer in [{low}, {high}], not {value!r:.40}")
    return value


def check_wf(wf: dict[Any, Any], body: bytes, *, digests: bool) -> None:
    """Check a body's ``wf`` map (docs/protocol.md, "Workflows"); ``digests``: a chord
    reference must carry its state's digest (the worker verifies signatures, so the chord's
    stored state must be bound to a signed body).

    Raises:
        DecodeError: naming the first part that is wrong.
    """
    try:
        _wf(wf, 0, digests)
    except Refusal as exc:
        raise DecodeError(f"body field 'wf': {exc}", body) from None


def check_unique(unique: str, queue: str, body: bytes) -> None:
    """A job releases only its own queue's uniqueness locks."""
    prefix = QueueKeys(queue).unique("")
    if not unique.startswith(prefix) or len(unique) == len(prefix):
        raise DecodeError(f"body field 'unique' must be a key {prefix}<key>", body)


def _wf(wf: Any, depth: int, digests: bool) -> None:
    if type(wf) is not dict:
        raise Refusal(f"a workflow map must be a map, not {type(wf).__name__}")
    if depth > MAX_DEPTH:
        raise Refusal(f"workflow nested deeper than {MAX_DEPTH}")
    unknown = set(wf) - {"next", "chord", "fail", "abort", "errback"}
    if unknown:
        raise Refusal(f"unknown key(s) {sorted(map(str, unknown))}")
    for frag in _list(wf.get("next", []), "next"):
        _fragment(frag, depth, digests)
    for frag in _list(wf.get("errback", []), "errback"):
        _job_fragment(frag, depth, digests)
    for ref in _list(wf.get("fail", []), "fail"):
        record_ref(ref)
    for abort in _list(wf.get("abort", []), "abort"):
        _abort(abort, depth, digests)
    if wf.get("chord") is not None:
        chord_ref(wf["chord"], digests)


def _list(value: Any, name: str) -> list[Any]:
    if type(value) is not list:
        raise Refusal(f"{name} must be an array, not {type(value).__name__}")
    return value


def _str(value: Any, name: str) -> str:
    if type(value) is not str:
        raise Refusal(f"{name} must be a string, not {type(value).__name__}")
    return value


def split_key(key: Any, kind: str) -> tuple[str, str]:
    """``(queue, id)`` of a key ``<queue>:<kind>:<id>`` whose queue and id are valid.

    Raises:
        Refusal: ``key`` is not such a key.
    """
    queue, sep, rest = _str(key, f"a {kind} key").partition(":")
    marker, sep2, ident = rest.partition(":")
    try:
        if not (sep and sep2 and marker == kind):
            raise ConfigError("wrong kind")
        check_queue_name(queue)
        check_job_id(ident)
    except ConfigError:
        raise Refusal(f"{key!r:.80} is not a {kind} key <queue>:{kind}:<id>") from None
    return queue, ident


def record_ref(ref: Any) -> None:
    """``[record key, done key, ttl ms]`` of one job: the record and done list of one id."""
    if type(ref) is not list or len(ref) != 3:
        raise Refusal("a record reference must be [record key, done key, ttl ms]")
    queue, ident = split_key(ref[0], "job")
    if ref[1] != QueueKeys(queue).done(ident):
        raise Refusal(f"{ref[1]!r:.80} is not the done list of {ref[0]!r:.80}")
    check_int(ref[2], "a record's ttl ms", 1, MAX_TTL_S * 1000)


def chord_ref(ref: Any, digests: bool) -> None:
    """``[chord key, index]``, or ``[chord key, index, digest of the chord's state]``."""
    if type(ref) is not list or len(ref) not in (2, 3):
        raise Refusal("chord must be [chord key, index, digest]")
    split_key(ref[0], "chord")
    check_int(ref[1], "a chord index", 0, MAX_CHORD_MEMBERS - 1)
    if len(ref) == 3:
        digest = _str(ref[2], "a chord digest")
        if len(digest) != 40 or digest.strip("0123456789abcdef"):
            raise Refusal("a chord digest must be 40 hex digits")
    elif digests:
        raise Refusal("a chord reference without its state's digest (signing is on)")


def _abort(abort: Any, depth: int, digests: bool) -> None:
    if type(abort) is not dict or set(abort) != {"key", "fail", "errback"}:
        raise Refusal("an abort entry must be a map {key, fail, errback}")
    split_key(abort["key"], "chord")
    for ref in _list(abort["fail"], "abort fail"):
        record_ref(ref)
    for frag in _list(abort["errback"], "abort errback"):
        _job_fragment(frag, depth, digests)


def _fragment(frag: Any, depth: int, digests: bool) -> None:
    if type(frag) is dict and frag.get("t") == "chord":
        _chord_fragment(frag, depth, digests)
    else:
        _job_fragment(frag, depth, digests)


_JOB_FRAGMENT_KEYS = frozenset(
    {"t", "id", "task", "args", "kwargs", "queue", "priority", "ttl", "imm", "countdown_ms", "wf"}
)


def _job_fragment(frag: Any, depth: int, digests: bool) -> None:
    """A job to start later: every field of the body it becomes, checked as a body's is."""
    if type(frag) is not dict or frag.get("t") != "job":
        raise Refusal("a fragment must be a map with t 'job' or 'chord'")
    missing = _JOB_FRAGMENT_KEYS - set(frag)
    if missing or not set(frag) <= _JOB_FRAGMENT_KEYS | {"headers"}:
        raise Refusal(f"a job fragment must have exactly the keys {sorted(_JOB_FRAGMENT_KEYS)}")
    try:
        check_job_id(frag["id"])
        check_queue_name(_str(frag["queue"], "a fragment's queue"))
    except ConfigError as exc:
        raise Refusal(str(exc)) from None
    if not _str(frag["task"], "a fragment's task") or frag["priority"] not in PRIORITIES:
        raise Refusal("a fragment needs a task name and a known priority")
    _list(frag["args"], "a fragment's args")
    if type(frag["kwargs"]) is not dict or any(type(k) is not str for k in frag["kwargs"]):
        raise Refusal("a fragment's kwargs must be a map with string keys")
    if frag["ttl"] is not None:
        check_int(frag["ttl"], "a fragment's ttl", 1, MAX_TTL_S)
    if type(frag["imm"]) is not bool:
        raise Refusal("a fragment's imm must be a bool")
    check_int(frag["countdown_ms"], "a fragment's countdown_ms", 0, MAX_TIME_MS)
    headers = frag.get("headers")
    if headers is not None and (
        type(headers) is not dict
        or not all(type(k) is str and type(v) is str for k, v in headers.items())
    ):
        raise Refusal("a fragment's headers must map strings to strings")
    if frag["wf"] is not None:
        _wf(frag["wf"], depth + 1, digests)


def _chord_fragment(frag: dict[Any, Any], depth: int, digests: bool) -> None:
    if set(frag) != {"t", "key", "n", "ttl", "body", "members"}:
        raise Refusal("a chord fragment must be a map {t, key, n, ttl, body, members}")
    split_key(frag["key"], "chord")
    n = check_int(frag["n"], "a chord's n", 1, MAX_CHORD_MEMBERS)
    check_int(frag["ttl"], "a chord's ttl", 1, MAX_TTL_S)
    _job_fragment(frag["body"], depth, digests)
    members = _list(frag["members"], "a chord's members")
    if len(members) != n:
        raise Refusal(f"a chord of n={n} has {len(members)} members")
    for member in members:
        _job_fragment(member, depth, digests)
