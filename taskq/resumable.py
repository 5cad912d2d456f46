"""Resumable jobs: memoized steps (``taskq.step``, ``taskq.astep``) and checkpointed iteration
(``taskq.iterate``) inside ordinary tasks. See docs/resumable.md for the guarantees.

What a run keeps goes through a :class:`Store`: the worker binds one that writes Redis
(:class:`taskq.worker.checkpoints.RedisStore`, fenced on the run's lease); eager mode binds
one that keeps values in memory. A task that calls neither API costs nothing: no store call,
no per-job state (the state of a run, :class:`_Run`, is made at its first call).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from taskq.checkpoint import (
    CURSOR,
    DONE,
    FAILED,
    PENDING,
    STEP,
    VALUE,
    CheckpointError,
    Cursor,
    check_name,
    pack,
    pack_cursor,
    parse_cursor,
    step_mark,
    unpack,
)
from taskq.context import JobContext, current_job
from taskq.errors import BrokerError

T = TypeVar("T")


class Store(Protocol):
    """Where a run's steps and cursors go (fields of the job's steps hash)."""

    max_value_bytes: int
    checkpoint_every_items: int
    checkpoint_every_ms: int

    def begin(self, job: JobContext, field: str, value_field: str, mark: bytes) -> bytes | None:
        """The stored ``value_field`` if there is one; else write ``field = mark``, None."""

    def read(self, job: JobContext, field: str) -> bytes | None:
        """One stored field."""

    def write(self, job: JobContext, fields: dict[str, bytes]) -> None:
        """Store these fields (fenced: raises StaleRun if the run lost its job)."""

    def max_run_s(self, task: str) -> float | None:
        """The task's ``max_run_s`` option."""

    def stopping(self) -> bool:
        """Whether the worker stops (warm shutdown): iterations give their jobs back."""


class HandBack(BaseException):
    """Raised out of an iteration that saved its cursor and gives its job back: the worker
    stops (warm shutdown), or the job ran ``max_run_s``. The worker re-enqueues the job
    without spending an attempt. A BaseException, so that ``except Exception`` in a task
    does not swallow it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MemoryStore:
    """A store in this process's memory: eager mode's (its jobs run once, inline)."""

    checkpoint_every_items = 100
    checkpoint_every_ms = 1_000

    def __init__(self, max_value_bytes: int) -> None:
        self.max_value_bytes = max_value_bytes
        self.jobs: dict[str, dict[str, bytes]] = {}

    def begin(self, job: JobContext, field: str, value_field: str, mark: bytes) -> bytes | None:
        fields = self.jobs.setdefault(job.id, {})
        if value_field in fields:
            return fields[value_field]
        fields[field] = mark
        return None

    def read(self, job: JobContext, field: str) -> bytes | None:
        return self.jobs.get(job.id, {}).get(field)

    def write(self, job: JobContext, fields: dict[str, bytes]) -> None:
        self.jobs.setdefault(job.id, {}).update(fields)

    def max_run_s(self, task: str) -> float | None:
        return None

    def stopping(self) -> bool:
        return False


_store: Store | None = None


class _Run:
    """What one run of a job that uses the APIs keeps in its process."""

    __slots__ = ("names", "started", "store")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.names: set[str] = set()
        self.started = time.monotonic()


in_progress: dict[str, _Run] = {}
"""The runs in progress in this process that used the APIs, by job id (empty, and tested
as such per job, while no task uses them)."""


def bind(store: Store | None) -> Store | None:
    """Make ``store`` the one runs here use; returns the one it replaces."""
    global _store
    previous, _store = _store, store
    return previous


def finished(job_id: str) -> bool:
    """Forget the run of ``job_id``; whether it used the APIs (its steps hash then gets the
    job's end TTL). One dict lookup for a job that did not."""
    return in_progress.pop(job_id, None) is not None


def _enter(kind: str, name: str, *, api: str = "") -> tuple[JobContext, _Run]:
    api = api or kind
    job = current_job()
    if job is None:
        raise CheckpointError(f"taskq.{api}() is called outside a task: it needs a running job")
    store = _store
    if store is None:
        raise CheckpointError(f"taskq.{api}() needs a worker, drain() or eager mode to run in")
    check_name(name)
    run = in_progress.get(job.id)
    if run is None:
        run = in_progress[job.id] = _Run(store)
    key = f"{kind}:{name}"
    if key in run.names:
        raise CheckpointError(f"{kind} {name!r} is used twice in this run of job {job.id}")
    run.names.add(key)
    return job, run


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- steps ---------------------------------------------------------------------------------


def step(name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` once per job; later attempts get its stored value.

    The value is stored (msgpack, with the extension types arguments use: docs/protocol.md)
    when ``fn`` returns, and returned as stored, on the first run as on later ones.

    Raises:
        CheckpointError: outside a task; ``name`` used twice in this run; the value cannot be
            encoded or is over ``max_result_bytes``; the stored value does not decode.
        StaleRun: the run lost its job.
        BrokerError: Redis failed.
        Whatever ``fn`` raises (the step is then marked failed and runs again next attempt).
    """
    job, run = _enter("step", name)
    stored = _begin(job, run.store, name)
    if stored is not None:
        return _replayed(name, stored)  # type: ignore[no-any-return]
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:
        _mark_failed(job, run.store, name, exc)
        raise
    return _done(job, run.store, name, value)  # type: ignore[no-any-return]


async def astep(name: str, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """:func:`step` for ``async def`` tasks: ``fn`` is awaited (a plain function's return
    value is taken as is). The Redis round trips are short blocking calls."""
    job, run = _enter("step", name, api="astep")
    stored = _begin(job, run.store, name)
    if stored is not None:
        return _replayed(name, stored)  # type: ignore[no-any-return]
    try:
        value: Any = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        _mark_failed(job, run.store, name, exc)
        raise
    return _done(job, run.store, name, value)  # type: ignore[no-any-return]


def _begin(job: JobContext, store: Store, name: str) -> bytes | None:
    return store.begin(job, STEP + name, VALUE + name, step_mark(PENDING, _now_ms()))


def _replayed(name: str, stored: bytes) -> Any:
    return unpack(stored, what=f"the value of step {name!r}")


def _done(job: JobContext, store: Store, name: str, value: Any) -> Any:
    try:
        raw = pack(value, max_bytes=store.max_value_bytes, what=f"the value of step {name!r}")
    except CheckpointError as exc:
        _mark_failed(job, store, name, exc)
        raise
    store.write(job, {STEP + name: step_mark(DONE, _now_ms()), VALUE + name: raw})
    return unpack(raw, what=name)


def _mark_failed(job: JobContext, store: Store, name: str, exc: BaseException) -> None:
    """Mark the step failed, for status only: a failure to write it does not hide ``exc``."""
    with contextlib.suppress(BrokerError, CheckpointError):
        store.write(job, {STEP + name: step_mark(FAILED, _now_ms(), type(exc).__name__)})


# -- iteration -----------------------------------------------------------------------------

Page = tuple[Sequence[Any], Any]
PageFetcher = Callable[[Any], Page]
"""``fetch_page(cursor) -> (items, next_cursor)``: what :func:`iterate` walks."""


def iterate(name: str, fetch_page: PageFetcher, start: Any = None) -> Iterator[Any]:
    """The items of the pages ``fetch_page`` returns, resumed where the last run stopped.

    ``fetch_page(cursor)`` returns ``(items, next_cursor)``; a ``next_cursor`` of None ends
    the walk. The cursor (with the items handled of its page) is saved every
    ``checkpoint_every_items`` items or ``checkpoint_every_ms``, whichever comes first; at
    warm shutdown, or once the task's ``max_run_s`` has passed, at the next item, after which
    the job is given back (no attempt spent). ``fetch_page`` must return the same items for
    the same cursor, so that a resumed walk skips the ones handled.

    Raises:
        CheckpointError: outside a task; ``name`` used twice in a run; a cursor msgpack cannot
            encode; a stored cursor that does not decode; a page that is not ``(items, cursor)``.
    """
    job, run = _enter("iterate", name)
    return _walk(job, run, name, fetch_page, start)


def _walk(
    job: JobContext, run: _Run, name: str, fetch_page: PageFetcher, start: Any
) -> Iterator[Any]:
    store, field = run.store, CURSOR + name
    raw = store.read(job, field)
    at = parse_cursor(raw, name) if raw is not None else Cursor(start, 0, 0, False, 0)
    if at.finished:
        return
    saver = _Saver(job, run, name)
    cursor, offset, items = at.page, at.offset, at.items
    while True:
        page, next_cursor = _page(name, fetch_page(cursor))
        for i in range(offset, len(page)):
            yield page[i]
            items += 1
            if i + 1 == len(page) and next_cursor is not None:
                saver.after_item(Cursor(next_cursor, 0, items, False, 0))
            else:
                saver.after_item(Cursor(cursor, i + 1, items, False, 0))
        if next_cursor is None:
            saver.save(Cursor(cursor, len(page), items, True, 0))
            return
        cursor, offset = next_cursor, 0


def _page(name: str, page: object) -> tuple[Sequence[Any], Any]:
    if not (isinstance(page, tuple | list) and len(page) == 2):
        raise CheckpointError(
            f"iteration {name!r}: fetch_page must return (items, next_cursor), "
            f"not {type(page).__name__}"
        )
    items, next_cursor = page
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise CheckpointError(
            f"iteration {name!r}: fetch_page's items must be a sequence (a list), "
            f"not {type(items).__name__}"
        )
    return items, next_cursor


class _Saver:
    """Saves an iteration's cursor every N items or T ms, and gives the job back when the
    worker stops or the run is over its ``max_run_s``."""

    __slots__ = ("_due", "_every_items", "_every_ms", "_field", "_job", "_limit", "_n", "_run")

    def __init__(self, job: JobContext, run: _Run, name: str) -> None:
        store = run.store
        self._job, self._run, self._field = job, run, CURSOR + name
        self._every_items = store.checkpoint_every_items
        self._every_ms = store.checkpoint_every_ms
        self._n = 0
        self._due = time.monotonic() + self._every_ms / 1000
        max_run_s = store.max_run_s(job.task)
        self._limit = run.started + max_run_s if max_run_s else None

    def after_item(self, at: Cursor) -> None:
        self._n += 1
        now = time.monotonic()
        reason = _hand_back_reason(self._run.store, now, self._limit)
        if reason or self._n >= self._every_items or now >= self._due:
            self.save(at)
        if reason:
            raise HandBack(reason)

    def save(self, at: Cursor) -> None:
        store = self._run.store
        name = self._field[len(CURSOR) :]
        raw = pack_cursor(at._replace(at_ms=_now_ms()), max_bytes=store.max_value_bytes, name=name)
        store.write(self._job, {self._field: raw})
        self._n = 0
        self._due = time.monotonic() + self._every_ms / 1000


def _hand_back_reason(store: Store, now: float, limit: float | None) -> str:
    if store.stopping():
        return "the worker stops"
    if limit is not None and now >= limit:
        return "max_run_s reached"
    return ""
