"""Task: a function registered with an app, and the ways to enqueue it.

``@app.task`` keeps the function's signature: ``add.delay("x")`` for ``add(a: int, b: int)``
is an error in the user's own mypy run, as is a misspelt task option.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from taskq.argspec import ArgSpec
from taskq.broker.steps import arun, run
from taskq.config import check_queue_name
from taskq.context import JobContext, current_job, reset_current, set_current
from taskq.current import current_producer
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.keys import DEFAULT_FAIR_KEY, check_fair_key, check_priority
from taskq.message import Message, new_job_id
from taskq.options import TaskOptions
from taskq.partitions import partition_of

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; only mypy reads this

    from taskq.apply import ApplyOptions
    from taskq.canvas import Signature
    from taskq.protocols import Producer

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A registered task. Call it to run inline; ``delay``/``apply_async`` to enqueue it."""

    def __init__(
        self, fn: Callable[..., R], *, name: str, options: TaskOptions, app: Producer | None
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
        self.spec = ArgSpec(name, fn, bound=options.bind)
        """Its signature: arguments are checked against it at enqueue, and dataclasses and
        pydantic models rebuilt from its annotations in the worker."""
        self._app = app
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    @property
    def app(self) -> Producer:
        """The app this task enqueues through (the current app for shared tasks)."""
        return self._app if self._app is not None else current_producer()

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
        """Run the function in this process (dataclass and model arguments that came as
        their fields rebuilt first)."""
        if self.spec.rebuilds_args is not False:
            args, kwargs = self.spec.rebuilt(args, kwargs)
        if self.options.bind:
            return self.fn(self, *args, **kwargs)
        return self.fn(*args, **kwargs)

    def run_to_end(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """:meth:`run`, and for an async task its coroutine to its end (eager mode's way to
        run it: :func:`taskq.eager.run_to_end`)."""
        from taskq.eager import run_to_end  # (loaded when first used: import taskq stays light)

        return run_to_end(self, args, kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue with the task's default options."""
        self.check(args, kwargs)
        if self.options.unique or self.options.debounce_key or self.options.batch_size:
            return self.apply_async(args, kwargs)
        return self.app.enqueue(self.message(args, kwargs))

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """:meth:`delay` for asyncio code: the same, without blocking the event loop."""
        self.check(args, kwargs)
        if self.options.unique or self.options.debounce_key or self.options.batch_size:
            return await self.aapply_async(args, kwargs)
        return await self.app.aenqueue(self.message(args, kwargs))

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature: this call, to make later or in a workflow (it gets the previous
        step's result as its first argument)."""
        from taskq.canvas import Signature  # (workflows load when first used, as options do)

        return Signature(self.name, args, kwargs, task_obj=self)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: it ignores the previous step's result."""
        from taskq.canvas import Signature

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
            unique_mode: ``until_done`` (the job's end releases the key), ``throttle``, or
                ``keep_last`` (while the key's job runs, one follow-up job keeps the last
                enqueue's arguments and starts when it ends).
            job_id: a caller-chosen id, refused while a job with it is held: the enqueue
                then returns the existing job's handle.
            debounce_key: a burst of enqueues of this key runs once, with the last
                arguments (see :mod:`taskq.debounce`; the task's ``debounce_key`` function
                gives a default).
            debounce_s: each enqueue of the burst moves its start to this many seconds later.
            debounce_max_wait_s: but never later than this many seconds after the burst's
                first enqueue (default: ten times ``debounce_s``).
            partition_key: for a partitioned queue, the key whose partition the job goes to
                (jobs of one key keep their order); without it, round robin (on a fair
                queue: the partition of the fairness key).
            fair_key: on a fair queue, the job's fairness key (a tenant, say; the task's
                ``fair_key`` function gives a default, else ``default``; docs/fairness.md).
        """
        from taskq.apply import apply_plan  # with uniqueness, debounce and batching: on first use

        args, kwargs = tuple(args), kwargs or {}
        self.check(args, kwargs)
        plan = apply_plan(self, args, kwargs, options)
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
        from taskq.apply import apply_plan  # with uniqueness, debounce and batching: on first use

        args, kwargs = tuple(args), kwargs or {}
        self.check(args, kwargs)
        plan = apply_plan(self, args, kwargs, options)
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
        a ``unique`` or debounced task, whose every enqueue is its own script)."""
        if self.options.unique or self.options.debounce_key or self.options.batch_size:
            return [self.apply_async(tuple(item)) for item in items]
        checked = (self._checked(tuple(item)) for item in items)  # (per batch, before it goes)
        settings = self.app.settings
        if settings.partitions or (self.options.queue or settings.queue) in settings.fair_queues:
            # each job to its own turn's partition, or with its own fairness key
            return self.app.enqueue_many(self.message(item, {}) for item in checked)
        first = self.message((), {})  # queue and priority are checked once, not per job
        name, queue, priority, ttl = self.name, first.queue, first.priority, first.result_ttl_s
        return self.app.enqueue_many(
            Message(name, item, {}, queue=queue, priority=priority, result_ttl_s=ttl)
            for item in checked
        )

    def _checked(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.check(args, {})
        return args

    def check(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refuse, before anything is sent, arguments that do not bind to the signature and,
        with ``validate``, values that do not fit the annotations.

        Raises:
            EnqueueError: naming the parameter.
        """
        if self.options.batch_size:  # its function takes the list of calls, not a call's
            return
        self.spec.check(args, kwargs)
        validate = self.options.validate
        if validate or (validate is None and self.app.settings.validate):
            self.spec.validate(args, kwargs)

    def message(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        priority: str | None = None,
        eta_ms: int | None = None,
        queue: str | None = None,
        partition_key: str | None = None,
        fair_key: str | None = None,
    ) -> Message:
        """The Message that enqueueing these arguments would send (to one partition of a
        partitioned queue: by ``partition_key``, else by the fairness key on a fair queue,
        else round robin)."""
        priority = priority or self.options.priority
        check_priority(priority)
        settings = self.app.settings
        queue = queue or self.options.queue or settings.queue
        check_queue_name(queue)
        fair = self.fair_key_of(args, kwargs, fair_key) if queue in settings.fair_queues else None
        if settings.partitions:
            queue = partition_of(settings.partitions, queue, partition_key or fair)
        return Message(
            self.name,
            args,
            kwargs,
            queue=queue,
            priority=priority,
            eta_ms=eta_ms,
            result_ttl_s=self.result_ttl_s(settings.store_results, settings.result_ttl_s),
            fair_key=fair,
        )

    def fair_key_of(self, args: tuple[Any, ...], kwargs: dict[str, Any], given: str | None) -> str:
        """A job's fairness key on a fair queue: the call's, else the task's ``fair_key``
        function of the arguments, else the default key (checked: it names Redis keys)."""
        if given is None and self.options.fair_key is not None:
            given = self.options.fair_key(*args, **kwargs)
        return check_fair_key(DEFAULT_FAIR_KEY if given is None else given)

    def result_ttl_s(self, app_stores: bool, app_ttl_s: int) -> int | None:
        """How long this task's results live (None: it stores none), from its options and
        the app's ``store_results`` / ``result_ttl_s``."""
        o = self.options
        stores = app_stores if o.store_result is None else o.store_result
        return (o.result_ttl_s or app_ttl_s) if stores else None
