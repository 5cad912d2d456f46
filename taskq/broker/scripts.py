"""The Lua scripts of ``lua/`` as Redis runs them: each after the prologues it uses, and the
SHA1 it is known by. A script is sent by its SHA1 and loaded only when Redis answers
``NOSCRIPT`` (:mod:`taskq.broker.link`)."""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources

PROLOGUES = ("_fence", "_now", "_stream", "_record", "_fair", "_flow")
"""Files of helper functions a script may start with: the ownership fence, the Redis clock,
stream ids and the trim of finished jobs, the job status records, fair queues' slots and
staging, and workflows (whose enqueues stage a unique or periodic job of a fair queue). A
script starts with those it calls, directly or through another, in this order
(:func:`script_text`): Redis runs a script's prologues at every call, so one that defined
every helper would pay for all of them (about 5 µs of Redis time per call)."""

_DEFINED = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.MULTILINE)
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
"""A name as a script's text uses it: a whole word, and not a table's field."""
_COMMENT = re.compile(r"--[^\n]*")


@functools.cache
def _lua(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return resources.files("taskq.broker").joinpath("lua").joinpath(f"{name}.lua").read_text()


@functools.cache
def _names(name: str) -> frozenset[str]:
    """The names ``lua/<name>.lua`` uses, comments left out."""
    return frozenset(_NAME.findall(_COMMENT.sub("", _lua(name))))


@functools.cache
def _defines(prologue: str) -> frozenset[str]:
    """The names a prologue declares at its top level."""
    return frozenset(_DEFINED.findall(_lua(prologue)))


@functools.cache
def script_text(name: str) -> str:
    """A script of ``lua/``, as Redis runs it: the prologues it uses (however deep), then its
    own text. Found with sets of names, not a pattern per prologue: the first script a
    process sends (a worker's first heartbeat) should not wait for regular expressions to
    compile."""
    names, used = set(_names(name)), set[str]()
    while found := {p for p in PROLOGUES if p not in used and not _defines(p).isdisjoint(names)}:
        used |= found
        for prologue in found:
            names |= _names(prologue)
    return "".join(_lua(p) for p in PROLOGUES if p in used) + _lua(name)


@functools.cache
def script_sha(name: str) -> str:
    """The SHA1 Redis knows a script by (computed here: no round trip)."""
    return hashlib.sha1(script_text(name).encode()).hexdigest()
