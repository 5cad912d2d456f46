"""Task: a function registered with an app, the ways to enqueue it, and its options.

``@app.task`` keeps the function's signature: ``add.delay("x")`` for ``add(a: int, b: int)``
is an error in the user's own mypy run, as is a misspelt task option.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import warnings
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypedDict, TypeVar

from taskq.apply import ApplyOptions, apply_plan
from taskq.broker.steps import arun, run
from taskq.canvas import Signature
from taskq.config import check_queue_name
from taskq.context import JobContext, current_job, reset_current, set_current
from taskq.current import current_app
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.keys import check_priority
from taskq.limits import Rate
from taskq.message import Message, new_job_id
from taskq.partitions import partition_of

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; only mypy reads this

    from taskq.app import App

P = ParamSpec("P")
R = TypeVar("R")


class TaskOptionArgs(TypedDict, total=False):
    """The keyword options of ``@app.task(...)`` (all optional; units in the names).

    ``time_limit``, ``soft_time_limit`` (s), ``retry_backoff`` and ``retry_backoff_max`` (ms)
    are the old spellings, still accepted with a DeprecationWarning.
    """

    name: str
    queue: str
    priority: str
    max_retries: int
    time_limit_s: float
    soft_time_limit_s: float
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    retry_jitter: bool
    dont_autoretry_for: Iterable[type[BaseException]]
    store_result: bool
    result_ttl_s: int
    unique: bool
    unique_for_s: float
    unique_mode: str
    rate_limit: str
    concurrency_limit: int
    limit_key: Callable[..., Any]
    time_limit: float
    soft_time_limit: float
    retry_backoff: int
    retry_backoff_max: int


DEPRECATED_OPTIONS = {
    "time_limit": "time_limit_s",
    "soft_time_limit": "soft_time_limit_s",
    "retry_backoff": "retry_backoff_ms",
    "retry_backoff_max": "retry_backoff_max_ms",
}
"""Old option names (units not in the name) → the names that say their unit."""


@dataclass(frozen=True)
class TaskOptions:
    """Per-task settings; None means "use the app's setting"."""

    queue: str | None = None
    priority: str = "normal"
    max_retries: int | None = None
    time_limit_s: float | None = None
    soft_time_limit_s: float | None = None
    retry_backoff_ms: int | None = None
    retry_backoff_max_ms: int | None = None
    retry_jitter: bool | None = None
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    bind: bool = False
    store_result: bool | None = None
    result_ttl_s: int | None = None
    unique: bool = False
    """Each job is unique by its task and arguments (see :mod:`taskq.unique`)."""
    unique_for_s: float = 3600.0
    unique_mode: str = "until_done"
    rate_limit: str | None = None
    """At most this many starts per window across the fleet (:mod:`taskq.limits`)."""
    concurrency_limit: int | None = None
    """At most this many of the task's jobs run at once across the fleet."""
    limit_key: Callable[..., Any] | None = None
    """Called with the job's arguments: one limit (rate, concurrency) per value it returns."""

    def __post_init__(self) -> None:
        check_priority(self.priority)
        if self.queue is not None:
            check_queue_name(self.queue)
        if self.max_retries is not None and self.max_retries < 0:
            raise ConfigError("max_retries must be >= 0")
        for name in ("time_limit_s", "soft_time_limit_s"):
            check_seconds(name, getattr(self, name))
        if self.rate_limit is not None:
            Rate.parse(self.rate_limit)
        c = self.concurrency_limit
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigError(f"concurrency_limit must be a whole number >= 1, not {c!r}")
        if self.limit_key is not None and self.rate_limit is None and c is None:
            raise ConfigError("limit_key needs a rate_limit or a concurrency_limit")
        if self.unique_mode not in ("until_done", "throttle"):
            raise ConfigError(
                f"unique_mode must be until_done or throttle, not {self.unique_mode!r}"
            )
        if isinstance(self.unique_for_s, bool) or not (
            isinstance(self.unique_for_s, int | float) and self.unique_for_s > 0
        ):
            raise ConfigError(f"unique_for_s must be seconds > 0, not {self.unique_for_s!r}")
        if self.result_ttl_s is not None and (
            isinstance(self.result_ttl_s, bool)
            or not isinstance(self.result_ttl_s, int)
            or self.result_ttl_s <= 0
        ):
            raise ConfigError(
                f"result_ttl_s must be a whole number of seconds > 0, not {self.result_ttl_s!r}"
            )


MAX_TIME_LIMIT_S = 366 * 86_400.0
"""The longest time limit (a year): a limit is kept in ms on monotonic clocks and in records."""


def check_seconds(name: str, value: float | None) -> None:
    """A time limit: None (the app's), else a finite number of seconds > 0, at most a year.

    Raises:
        ConfigError: 0, a negative number, NaN, infinity, or anything but a number.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}")
    if not 0 < value <= MAX_TIME_LIMIT_S:  # False for NaN too
        raise ConfigError(f"{name} must be > 0 and at most {MAX_TIME_LIMIT_S:.0f}, not {value!r}")


class Task(Generic[P, R]):
    """A registered task. Call it to run inline; ``delay``/``apply_async`` to enqueue it."""

    def __init__(
        self, fn: Callable[..., R], *, name: str, options: TaskOptions, app: App | None
    ) -> None:
        """Use ``@app.task`` or ``@taskq.task`` rather than this.

        Args:
            app: the app it enqueues through; None for a shared task (the current app).
        """
        if "\n" in name or not name:
            raise ConfigError(f"invalid task name {name!r}")
        self.fn = fn
        self.name = name
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        """An ``async def`` task: a worker runs it on its children's event loops."""
        self._app = app
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    @property
    def app(self) -> App:
        """The app this task enqueues through (the current app for shared tasks)."""
        return self._app if self._app is not None else current_app()

    @property
    def request(self) -> JobContext | None:
        """The running job, for ``bind=True`` tasks (Celery's ``self.request``)."""
        return current_job()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run inline, as attempt 1 of a job of its own (so ``current_job()`` works)."""
        msg = Message(self.name, args, kwargs, new_job_id(), self.options.queue or "")
        job = JobContext.of(msg, 1, 1, None)
        if self.is_async:  # the job is current while the coroutine runs, not while it is made
            return self._inline(job, args, kwargs)  # type: ignore[return-value]
        token = set_current(job)
        try:
            return self.run(args, kwargs)
        finally:
            reset_current(token)

    async def _inline(self, job: JobContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        token = set_current(job)
        try:
            return await self.run(args, kwargs)  # type: ignore[misc]
        finally:
            reset_current(token)

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """Run the function in this process."""
        if self.options.bind:
            return self.fn(self, *args, **kwargs)
        return self.fn(*args, **kwargs)

    def run_to_end(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """:meth:`run`, and for an async task its coroutine to its end, on a loop of its own
        (eager mode); in a thread when the caller runs a loop already (``await adelay()``)."""
        value: Any = self.run(args, kwargs)
        if not self.is_async:
            return value
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            running = False
        else:
            running = True
        if not running:  # (not inside the except: the task's errors would chain to it)
            return asyncio.run(value)
        ctx = contextvars.copy_context()  # current_job() travels to the thread
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: ctx.run(asyncio.run, value)).result()

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue with the task's default options."""
        if self.options.unique:
            return self.apply_async(args, kwargs)
        return self.app.enqueue(self.message(args, kwargs))

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """:meth:`delay` for asyncio code: the same, without blocking the event loop."""
        if self.options.unique:
            return await self.aapply_async(args, kwargs)
        return await self.app.aenqueue(self.message(args, kwargs))

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature: this call, to make later or in a workflow (it gets the previous
        step's result as its first argument)."""
        return Signature(self.name, args, kwargs, task_obj=self)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: it ignores the previous step's result."""
        return Signature(self.name, args, kwargs, immutable=True, task_obj=self)

    def apply_async(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Unpack[ApplyOptions],
    ) -> Job:
        """Enqueue with options.

        Args:
            priority: ``high``, ``normal`` or ``low``.
            countdown: run no sooner than this many seconds from now.
            eta: run no sooner than this time (an aware ``datetime`` or a POSIX timestamp).
            queue: queue name, overriding the task's.
            link: workflows to start with the result when the job succeeds.
            link_error: signatures to start, with the job's id, if it fails for good.
            expires: seconds from now, or an aware ``datetime``: a job not started by then
                is not run (its status becomes ``expired``), by the worker's clock.
            unique_key: while a job with this key is held, another enqueue adds nothing and
                returns that job's handle (see :mod:`taskq.unique`).
            unique_for: seconds the key is held at most (default: the task's, 3,600).
            unique_mode: ``until_done`` (the job's end releases the key) or ``throttle``.
            job_id: a caller-chosen id, refused while a job with it is held: the enqueue
                then returns the existing job's handle.
            partition_key: for a partitioned queue, the key whose partition the job goes to
                (jobs of one key keep their order); without it, round robin.
        """
        plan = apply_plan(self, tuple(args), kwargs or {}, options)
        if isinstance(plan, Job):
            return plan
        if isinstance(plan, Generator):
            return run(self.app.link, plan)
        return self.app.launch(plan).jobs[0]

    async def aapply_async(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Unpack[ApplyOptions],
    ) -> Job:
        """:meth:`apply_async` for asyncio code (the same options)."""
        plan = apply_plan(self, tuple(args), kwargs or {}, options)
        if isinstance(plan, Job):
            return plan
        if isinstance(plan, Generator):
            return await arun(self.app.alink, plan)
        return (await self.app.alaunch(plan)).jobs[0]

    def map(self, items: Iterable[Any]) -> list[Job]:
        """Enqueue one job per item (the item is the single argument), pipelined in batches."""
        return self.starmap((item,) for item in items)

    def starmap(self, items: Iterable[Iterable[Any]]) -> list[Job]:
        """Enqueue one job per argument tuple, pipelined in batches (one round trip each for
        a ``unique`` task, whose every enqueue takes its lock)."""
        if self.options.unique:
            return [self.apply_async(tuple(item)) for item in items]
        first = self.message((), {})  # queue and priority are checked once, not per job
        name, queue, priority, ttl = self.name, first.queue, first.priority, first.result_ttl_s
        if self.app.settings.partitions:  # each job to its own turn's partition
            return self.app.enqueue_many(self.message(tuple(item), {}) for item in items)
        return self.app.enqueue_many(
            Message(name, tuple(item), {}, queue=queue, priority=priority, result_ttl_s=ttl)
            for item in items
        )

    def message(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        priority: str | None = None,
        eta_ms: int | None = None,
        queue: str | None = None,
        partition_key: str | None = None,
    ) -> Message:
        """The Message that enqueueing these arguments would send (to one partition of a
        partitioned queue: by ``partition_key``, else round robin)."""
        priority = priority or self.options.priority
        check_priority(priority)
        settings = self.app.settings
        queue = queue or self.options.queue or settings.queue
        check_queue_name(queue)
        if settings.partitions:
            queue = partition_of(settings.partitions, queue, partition_key)
        return Message(
            self.name,
            args,
            kwargs,
            queue=queue,
            priority=priority,
            eta_ms=eta_ms,
            result_ttl_s=self.result_ttl_s(settings.store_results, settings.result_ttl_s),
        )

    def result_ttl_s(self, app_stores: bool, app_ttl_s: int) -> int | None:
        """How long this task's results live (None: it stores none), from its options and
        the app's ``store_results`` / ``result_ttl_s``."""
        o = self.options
        stores = app_stores if o.store_result is None else o.store_result
        return (o.result_ttl_s or app_ttl_s) if stores else None


def renamed_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with old spellings renamed (a DeprecationWarning at the decorator)."""
    opts: dict[str, Any] = dict(options)
    for old, new in DEPRECATED_OPTIONS.items():
        if old in opts:
            warnings.warn(
                f"task option {old!r} is deprecated: use {new!r}", DeprecationWarning, stacklevel=4
            )
            opts[new] = opts.pop(old)
    return opts


def build_options(options: Mapping[str, Any], default_name: str) -> tuple[str, TaskOptions]:
    """The task's name (``name=``, else ``default_name``: from the function) and options.

    Raises:
        ConfigError: an unknown option, or an invalid value; the message names the task.
    """
    opts: dict[str, Any] = dict(options)
    name = opts.pop("name", None) or default_name
    if "dont_autoretry_for" in opts:
        opts["dont_autoretry_for"] = tuple(opts["dont_autoretry_for"])
    try:
        return name, TaskOptions(**opts)
    except TypeError as exc:
        raise ConfigError(f"task {name!r}: unknown task option: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"task {name!r}: {exc}") from None
