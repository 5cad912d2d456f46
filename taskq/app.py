"""App: settings, the task registry and the producer (enqueue).

There is no hidden global app. Shared tasks (``@taskq.task``) enqueue through :func:`current_app`,
which ``taskq worker`` sets to the app it runs and an application sets with :meth:`App.set_current`.
This is the façade: nothing else of the producer imports it (they name what they need of it in
:mod:`taskq.protocols`). What few apps use (schedules, read models) loads on first use.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar, overload

from taskq.broker import Link, connect
from taskq.broker.alink import AsyncLink, connect_async
from taskq.broker.operators import Operators
from taskq.broker.records import Records, find_call_steps, find_steps, status_steps
from taskq.broker.steps import Steps, arun, run
from taskq.config import Settings, redact
from taskq.control import ControlPlane
from taskq.current import current_producer, set_current_app
from taskq.errors import ConfigError
from taskq.fairquery import FairQueries
from taskq.job import Flow, Job
from taskq.keys import check_job_id
from taskq.loaded_late import flow_handle, launch_steps, run_job, run_workflow
from taskq.message import Message
from taskq.middleware import Hooks, Middleware, enqueue_through
from taskq.options import build_options, renamed_options
from taskq.partitions import expand
from taskq.registry import SHARED, Registry
from taskq.sending import send_many_steps, send_steps
from taskq.task import Task

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; only mypy reads this

    from taskq.broker.broker import Broker
    from taskq.broker.reads import Reader
    from taskq.canvas import Workflow
    from taskq.config import SettingsArgs
    from taskq.options import TaskOptionArgs
    from taskq.periodic import Periodic, PeriodicArgs

P = ParamSpec("P")
R = TypeVar("R")


class App(ControlPlane, FairQueries):
    """A taskq application: settings, registered tasks and a lazily opened Redis link.

    Args:
        redis_url: defaults to ``TASKQ_REDIS_URL``, then ``REDIS_URL``, then localhost.
        queue: the default queue of this app's tasks.
        settings: a complete :class:`~taskq.config.Settings` (the environment is then not
            read); ``redis_url``, ``queue`` and keyword settings override it.
        **overrides: any other setting, e.g. ``max_retries=5`` (typed: see
            :class:`~taskq.config.SettingsArgs`).
    """

    def __init__(
        self,
        redis_url: str | None = None,
        queue: str | None = None,
        *,
        settings: Settings | None = None,
        **overrides: Unpack[SettingsArgs],
    ) -> None:
        given: dict[str, Any] = {"redis_url": redis_url, "queue": queue, **overrides}
        changes = {k: v for k, v in given.items() if v is not None}
        if settings is None:
            self.settings = Settings.from_env(**changes)
        else:
            self.settings = settings.replace(**changes) if changes else settings
        self.registry = Registry(fallback=SHARED)
        self.middleware: list[Middleware] = []
        self._enqueue_hooks = Hooks(self.middleware, "before_enqueue")
        self.periodics: dict[str, Periodic] = {}
        self._link: Link | None = None
        self._alinks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncLink]
        self._alinks = weakref.WeakKeyDictionary()
        self._broker: Broker | None = None
        self._pid = 0

    def __repr__(self) -> str:
        return f"<App queue={self.settings.queue} redis={self.link_url}>"

    @property
    def link_url(self) -> str:
        """The Redis URL without its password (for messages and ``repr``)."""
        return redact(self.settings.redis_url)

    # -- tasks ---------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, /, *, bind: Literal[False] = False, **options: Unpack[TaskOptionArgs]
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    @overload
    def task(
        self, /, *, bind: Literal[True], **options: Unpack[TaskOptionArgs]
    ) -> Callable[[Callable[Concatenate[Any, P], R]], Task[P, R]]: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, *, bind: bool = False, **options: Any
    ) -> Any:
        """Register a function as a task: ``@app.task`` or ``@app.task(priority="high", ...)``.

        Options (see :class:`~taskq.task.TaskOptionArgs`): ``name``, ``queue``, ``priority``,
        ``max_retries``, ``time_limit_s``, ``soft_time_limit_s``, ``retry_backoff_ms``,
        ``retry_backoff_max_ms``, ``retry_jitter``, ``dont_autoretry_for`` (exception types never
        retried), ``store_result`` and ``result_ttl_s`` (override the app's), and ``bind=True``
        to receive the task as first argument.
        """
        return decorator(fn, options, bind=bind, app=self, register=self.registry.add)

    def periodic(
        self, **options: Unpack[PeriodicArgs]
    ) -> Callable[[Callable[..., Any]], Task[..., Any]]:
        """Register a function as a task and run it on a schedule: ``@app.periodic(every=30)``
        (seconds or a timedelta, aligned to the epoch) or ``@app.periodic(cron="*/5 * * * *",
        tz="Europe/Paris")``, with ``args``, ``kwargs``, ``queue``, ``priority``, ``catch_up`` and
        ``name``. Stacked on ``@app.task(...)``, it schedules that task.

        Every ``taskq worker`` of the task's queue schedules it (unless ``--no-periodic``);
        exactly one job is enqueued per tick. ``catch_up`` says what happens to ticks missed
        while no worker ran: ``"one"`` (one job for all of them), ``"none"``, or ``"all"``
        (up to 100). See docs/periodic.md.
        """

        def wrap(fn: Callable[..., Any]) -> Task[..., Any]:
            t = fn if isinstance(fn, Task) else self.task(fn)
            self.add_periodic(t, **options)
            return t

        return wrap

    def add_periodic(self, task: Task[..., Any], **options: Unpack[PeriodicArgs]) -> Periodic:
        """Schedule a task (options as for :meth:`periodic`); ``name`` (default: the task's name)
        tells two schedules of one task apart.

        Raises:
            ConfigError: a bad schedule, zone, mode or argument, or a name already used.
        """
        from taskq.periodic import periodic_of  # with cron and zoneinfo: only for schedules

        p = periodic_of(task, options)
        if p.name in self.periodics:
            raise ConfigError(f"periodic {p.name!r} is declared twice; give each a name=")
        self.periodics[p.name] = p
        return p

    def add_middleware(self, middleware: Middleware) -> None:
        """Add lifecycle hooks (see :mod:`taskq.middleware`)."""
        self.middleware.append(middleware)

    def get_task(self, name: str) -> Task[..., Any]:
        """The task registered under ``name`` here or as a shared task.

        Raises:
            TaskNotFound: there is none.
        """
        return self.registry.get(name)

    def registered(self) -> list[str]:
        return self.registry.names()

    def set_current(self) -> App:
        """Make this the app that shared tasks enqueue through (returns the app)."""
        set_current_app(self)
        return self

    # -- Redis ---------------------------------------------------------------------------

    @property
    def link(self) -> Link:
        """This process's connection pool; a forked child opens its own on first use."""
        if self._link is None or self._pid != os.getpid():
            self._link = connect(self.settings.redis_url)
            self._broker = None
            self._pid = os.getpid()
        return self._link

    @property
    def alink(self) -> AsyncLink:
        """The running loop's own asyncio pool, made on first use (``app.aclose()`` closes it)."""
        loop = asyncio.get_running_loop()
        link = self._alinks.get(loop)
        if link is None:
            link = self._alinks[loop] = connect_async(self.settings.redis_url)
        return link

    async def aclose(self) -> None:
        """Close the running event loop's connections (they open again on demand)."""
        link = self._alinks.pop(asyncio.get_running_loop(), None)
        if link is not None:
            await link.close()

    @property
    def broker(self) -> Broker:
        """A broker for the app's queue, on this process's link."""
        from taskq.broker.broker import Broker  # (loaded when first used: see taskq.broker)

        link = self.link
        if self._broker is None:
            self._broker = Broker(link, [self.settings.queue])
        return self._broker

    def broker_for(self, queues: Sequence[str]) -> Broker:
        """A broker for ``queues`` (in the order a worker reads them; a partitioned queue is
        read as all of its partitions), on this process's link."""
        from taskq.broker.broker import Broker

        names, groups = expand(self.settings.partitions, queues)
        fair = expand(self.settings.partitions, self.settings.fair_queues)[0]
        return Broker(self.link, names, groups=groups, fair=fair)

    @property
    def reader(self) -> Reader:
        """Read-only queries (inspect, dead letters) on this process's link."""
        from taskq.broker.reads import Reader  # the read models load when first read

        return Reader(self.link)

    @property
    def records(self) -> Records:
        """Job status records and results, on this process's link."""
        return Records(self.link)

    def job(self, job_id: str, *, queue: str | None = None) -> Job:
        """A handle for a job enqueued elsewhere (another process, an earlier run).

        Its record is looked for in ``queue``, else in every queue this app's tasks use; a job
        with no record anywhere (never kept, expired or forgotten) gets a handle whose status
        is ``unknown`` and whose ``result()`` raises :class:`~taskq.errors.JobNotFound`.

        Raises:
            ConfigError: ``job_id`` is not a plausible job id.
        """
        return run(self.link, self._handle_steps(job_id, queue))

    async def ajob(self, job_id: str, *, queue: str | None = None) -> Job:
        """:meth:`job` for asyncio code."""
        return await arun(self.alink, self._handle_steps(job_id, queue))

    def _handle_steps(self, job_id: str, queue: str | None) -> Steps[Job]:
        check_job_id(job_id)
        queues = [queue] if queue else self.queues()
        found = yield from find_steps(queues, job_id)
        if found is None:
            call = yield from find_call_steps(queues, job_id)
            if call is None:  # no task name: Job.result() raises JobNotFound
                return Job(job_id, "", queues[0], "normal", app=self)
            found, job_id = call  # a batched call: the handle of its batch job
        status = yield from status_steps(found, job_id)
        if not status.task:  # (the batch's record is gone)
            return Job(job_id, "", found, "normal", app=self)
        priority = status.priority or "normal"
        return Job(job_id, status.task, found, priority, stores_result=True, app=self)

    def flow(self, flow_id: str, *, queue: str | None = None) -> Flow | None:
        """The handle of a workflow started elsewhere, from its record (None: no record)."""
        check_job_id(flow_id)
        found = self.records.find([queue] if queue else self.queues(), flow_id, flow=True)
        if found is None:
            return None
        return flow_handle(flow_id, found, self.records.flow(found, flow_id), self)

    def launch(self, workflow: Workflow) -> Flow:
        """Start a workflow (``chain(...)``, ``group(...)``, ``chord(...)``, a signature);
        its ``apply_async()`` does this with the app of its first task."""
        if self.settings.eager:
            return run_workflow(workflow, self)
        return run(self.link, launch_steps(workflow, self))

    async def alaunch(self, workflow: Workflow) -> Flow:
        """:meth:`launch` for asyncio code."""
        if self.settings.eager:
            return run_workflow(workflow, self)
        return await arun(self.alink, launch_steps(workflow, self))

    def queues(self) -> list[str]:
        """The app's queue, then the other queues its tasks name, in registration order (a
        partitioned one as its partitions)."""
        names = [self.settings.queue]
        for name in self.registered():
            q = self.get_task(name).options.queue
            if q and q not in names:
                names.append(q)
        return expand(self.settings.partitions, names)[0]

    @property
    def operators(self) -> Operators:
        """The moves operators start (purge, dead-letter retry), on this process's link."""
        return Operators(self.link)

    def close(self) -> None:
        """Close this process's connections (they open again on demand)."""
        if self._link is not None and self._pid == os.getpid():
            if self._broker is not None:
                self._broker.disconnect()
            self._link.close()
        self._link = self._broker = None

    # -- producer ------------------------------------------------------------------------

    def encode(self, msg: Message) -> bytes:
        """``msg`` as this app sends it: checked against ``max_payload_bytes``, and signed
        if ``signing_keys`` are set.

        Raises:
            EnqueueError: arguments not msgpack-serializable, or payload too large.
        """
        hooks = self._enqueue_hooks()
        if hooks:
            msg = enqueue_through(hooks, msg)
        return msg.encode(max_bytes=self.settings.max_payload_bytes, signer=self.settings.signer)

    def enqueue(self, msg: Message, *, in_ms: int | None = None) -> Job:
        """Send one job (one round trip), or run it at once in eager mode.

        Args:
            msg: the job; one with a future ``eta_ms`` waits in the schedule until then.
            in_ms: a countdown: due this long after Redis receives it (by the Redis clock).

        Raises:
            EnqueueError: arguments not msgpack-serializable, or payload too large.
            BrokerError: Redis could not be reached or refused the job (a
                :class:`~taskq.errors.BrokerUnavailable` whose ``timed_out`` is set means
                the job may or may not have been enqueued).
        """
        body = self.encode(msg)
        if self.settings.eager:
            return run_job(self, body)
        return run(self.link, send_steps(self, msg, body, in_ms))

    async def aenqueue(self, msg: Message, *, in_ms: int | None = None) -> Job:
        """:meth:`enqueue` for asyncio code: the same, without blocking the event loop."""
        body = self.encode(msg)
        if self.settings.eager:
            return run_job(self, body)
        return await arun(self.alink, send_steps(self, msg, body, in_ms))

    def enqueue_many(self, messages: Iterable[Message]) -> list[Job]:
        """Send many jobs, one pipelined round trip per batch of 1,000.

        Every job of a batch is encoded and checked before any is sent, so a bad argument
        sends nothing of its batch.
        """
        if self.settings.eager:
            return [run_job(self, self.encode(m)) for m in messages]
        return run(self.link, send_many_steps(self, messages))

    async def aenqueue_many(self, messages: Iterable[Message]) -> list[Job]:
        """:meth:`enqueue_many` for asyncio code."""
        if self.settings.eager:
            return [run_job(self, self.encode(m)) for m in messages]
        return await arun(self.alink, send_many_steps(self, messages))


@overload
def task(fn: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *, bind: Literal[False] = False, **options: Unpack[TaskOptionArgs]
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


@overload
def task(
    *, bind: Literal[True], **options: Unpack[TaskOptionArgs]
) -> Callable[[Callable[Concatenate[Any, P], R]], Task[P, R]]: ...


def task(fn: Callable[..., Any] | None = None, /, *, bind: bool = False, **options: Any) -> Any:
    """Declare a shared task that any app can run (Celery's ``shared_task``): library code
    uses it without importing an app; enqueueing goes through :func:`current_app`."""
    return decorator(fn, options, bind=bind, app=None, register=SHARED.add)


def current_app() -> App:
    """The app set by :meth:`App.set_current` (``taskq worker`` sets the app it runs).

    Raises:
        ConfigError: no app was set.
    """
    app = current_producer()
    assert isinstance(app, App)  # only App.set_current sets it
    return app


def decorator(
    fn: Callable[..., Any] | None,
    options: Any,
    *,
    bind: bool,
    app: App | None,
    register: Callable[[Task[..., Any]], None],
    cls: type[Task[..., Any]] = Task,
) -> Any:
    """The body of ``@app.task`` and ``@taskq.task``: build, register, return the Task (an
    instance of ``cls``: integrations add methods in a subclass)."""
    given = renamed_options({**options, "bind": bind} if bind else options)

    def wrap(f: Callable[..., Any]) -> Task[..., Any]:
        name, opts = build_options(given, f"{f.__module__}.{f.__qualname__}")
        t = cls(f, name=name, options=opts, app=app)
        register(t)
        return t

    return wrap(fn) if fn is not None else wrap
