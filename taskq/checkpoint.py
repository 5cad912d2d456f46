"""What a resumable job keeps between its runs: its steps' values and its iterations' cursors.

One hash per job, ``<queue>:steps:<job id>`` (:meth:`taskq.keys.QueueKeys.steps`), written
by the run that holds the job (``checkpoint.lua``, fenced on the job's entry being pending
under that run's consumer) and read back by later runs and by ``job.status()``. Its fields:

- ``s:<step>``: the step's state, msgpack ``[state, ms, error]`` (pending, done, failed);
- ``v:<step>``: the step's value (msgpack), present once the step is done;
- ``c:<iteration>``: the iteration's cursor, msgpack ``[cursor, offset, items, finished, ms]``.

Everything read back is untrusted: :func:`parse_cursor` and :func:`views_of` check shapes and
types, and a field that is not what this module writes is a :class:`CheckpointError` for the
run (or left out of a status), never a crash of the worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgpack

from taskq import codec
from taskq.errors import TaskqError

STEP, VALUE, CURSOR = "s:", "v:", "c:"
"""Field prefixes in a job's steps hash."""
PENDING, DONE, FAILED = "pending", "done", "failed"
"""The states of a step: its function runs (or its run was lost); it returned; it raised."""
MAX_NAME_CHARS = 200


class CheckpointError(TaskqError):
    """A step or an iteration cannot go on: a name used twice in a run, a value or cursor
    msgpack cannot encode or over ``max_result_bytes``, a stored value that does not decode,
    or the API called outside a task."""


class StaleRun(CheckpointError):
    """The run no longer holds its job (it was taken back after a lost lease): its steps and
    cursors are not written."""


class StepView(NamedTuple):
    """A step as ``job.status()`` shows it."""

    name: str
    state: str
    at_ms: int
    error: str = ""


class CursorView(NamedTuple):
    """An iteration as ``job.status()`` shows it: the items handled up to its saved cursor."""

    name: str
    items: int
    finished: bool
    at_ms: int


class Cursor(NamedTuple):
    """Where an iteration stands: the page cursor it fetched last, how many items of that
    page it handled (``offset``), the items handled in all, and whether it ended."""

    page: Any
    offset: int
    items: int
    finished: bool
    at_ms: int


def check_name(name: object) -> str:
    """A step or iteration name: a non-empty str of at most 200 characters.

    Raises:
        CheckpointError: it is not.
    """
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise CheckpointError(
            f"a step or iteration name must be a non-empty str of at most {MAX_NAME_CHARS} "
            f"characters, not {name!r:.80}"
        )
    return name


def pack(value: Any, *, max_bytes: int, what: str) -> bytes:
    """``value`` in msgpack with taskq's extension types (a datetime, Decimal or tuple comes
    back as itself, as in arguments and results), checked against ``max_bytes`` (``what``
    names it in errors).

    Raises:
        CheckpointError: msgpack cannot encode it, or it is too large.
    """
    try:
        raw = codec.packb(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(
            f"{what} ({type(value).__name__}) is not msgpack-serializable: {exc}"
        ) from None
    if len(raw) > max_bytes:
        raise CheckpointError(
            f"{what} is {len(raw)} bytes encoded, over the {max_bytes}-byte limit "
            "(max_result_bytes)"
        )
    return raw


def unpack(raw: object, *, what: str) -> Any:
    """A stored msgpack value, decoded defensively.

    Raises:
        CheckpointError: it is not bytes, or not valid msgpack.
    """
    if not isinstance(raw, bytes):
        raise CheckpointError(f"{what}: stored value is {type(raw).__name__}, not bytes")
    try:
        return codec.unpackb(raw)
    except Exception as exc:  # any decoder failure is bad stored data, not a worker bug
        raise CheckpointError(f"{what}: stored value does not decode ({exc})") from None


def step_mark(state: str, at_ms: int, error: str = "") -> bytes:
    """The ``s:<step>`` field of a step in ``state``."""
    return bytes(msgpack.packb([state, at_ms, error[:500]], use_bin_type=True))


def pack_cursor(c: Cursor, *, max_bytes: int, name: str) -> bytes:
    """The ``c:<iteration>`` field (raises CheckpointError as :func:`pack` does)."""
    return pack(list(c), max_bytes=max_bytes, what=f"the cursor of iteration {name!r}")


def parse_cursor(raw: object, name: str) -> Cursor:
    """A stored cursor, checked.

    Raises:
        CheckpointError: it is not one this module wrote.
    """
    what = f"the cursor of iteration {name!r}"
    v = unpack(raw, what=what)
    if (
        not isinstance(v, list)
        or len(v) != 5
        or not all(_count(x) for x in (v[1], v[2], v[4]))
        or not isinstance(v[3], bool)
    ):
        raise CheckpointError(f"{what}: stored value is not a cursor")
    return Cursor(v[0], v[1], v[2], v[3], v[4])


def _count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63


def _step_view(name: str, raw: bytes) -> StepView | None:
    try:
        v = unpack(raw, what=name)
    except CheckpointError:
        return None
    ok = isinstance(v, list) and len(v) == 3 and v[0] in (PENDING, DONE, FAILED)
    if not ok or not _count(v[1]) or not isinstance(v[2], str):
        return None
    return StepView(name, v[0], v[1], v[2])


def _cursor_view(name: str, raw: bytes) -> CursorView | None:
    try:
        c = parse_cursor(raw, name)
    except CheckpointError:
        return None
    return CursorView(name, c.items, c.finished, c.at_ms)


def views_of(raw: Mapping[bytes, bytes]) -> tuple[tuple[StepView, ...], tuple[CursorView, ...]]:
    """The steps and cursors of a steps hash (HGETALL), oldest first; fields that do not
    parse are left out."""
    steps: list[StepView] = []
    cursors: list[CursorView] = []
    for key, value in raw.items():
        field = key.decode(errors="replace")
        if field.startswith(STEP) and (s := _step_view(field[2:], value)) is not None:
            steps.append(s)
        elif field.startswith(CURSOR) and (c := _cursor_view(field[2:], value)) is not None:
            cursors.append(c)
    steps.sort(key=lambda s: (s.at_ms, s.name))
    cursors.sort(key=lambda c: (c.at_ms, c.name))
    return tuple(steps), tuple(cursors)
