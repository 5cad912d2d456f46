"""App: the task registry and the producer (enqueue)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

import redis

from taskq.broker import Broker, connect
from taskq.config import Settings
from taskq.context import JobContext, reset_current, set_current
from taskq.errors import BrokerError, ConfigError, TaskNotFound
from taskq.message import Message, now_ms
from taskq.middleware import Middleware
from taskq.task import Job, Task, TaskOptions

R = TypeVar("R")

BATCH_SIZE = 1000
"""Jobs per pipelined round trip in bulk enqueue."""

_shared_tasks: dict[str, Task[..., Any]] = {}
_current_app: App | None = None


class App:
    """A taskq application: settings, registered tasks and a lazily opened Redis client.

    Args:
        redis_url: defaults to ``TASKQ_REDIS_URL``, then ``REDIS_URL``, then localhost.
        queue: the default queue of this app's tasks.
        **settings: any other :class:`~taskq.config.Settings` field, e.g. ``max_retries=5``.
    """

    def __init__(
        self, redis_url: str | None = None, queue: str | None = None, **settings: Any
    ) -> None:
        global _current_app
        self.settings = Settings.from_env(redis_url=redis_url, queue=queue, **settings)
        self.tasks: dict[str, Task[..., Any]] = {}
        self.middleware: list[Middleware] = []
        self._broker: Broker | None = None
        self._broker_pid = 0
        _current_app = self

    def __repr__(self) -> str:
        return f"<App queue={self.settings.queue} redis={self.settings.redis_url}>"

    @overload
    def task(self, fn: Callable[..., R], /) -> Task[..., R]: ...

    @overload
    def task(self, /, **options: Any) -> Callable[[Callable[..., R]], Task[..., R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a function as a task: ``@app.task`` or ``@app.task(priority="high", ...)``.

        Options: ``name``, ``queue``, ``priority``, ``max_retries``, ``time_limit`` (s),
        ``soft_time_limit`` (s), ``retry_backoff`` (ms), ``retry_backoff_max`` (ms),
        ``retry_jitter``, ``dont_autoretry_for`` (exception types never retried), ``bind``.
        """
        return _decorator(fn, options, app=self, register=self.register)

    def add_middleware(self, middleware: Middleware) -> None:
        """Add lifecycle hooks (see :mod:`taskq.middleware`)."""
        self.middleware.append(middleware)

    def register(self, task: Task[..., Any]) -> None:
        self.tasks[task.name] = task

    def get_task(self, name: str) -> Task[..., Any]:
        """The task registered under ``name`` here or as a shared task."""
        task = self.tasks.get(name) or _shared_tasks.get(name)
        if task is None:
            raise TaskNotFound(f"no task named {name!r} is registered")
        return task

    def registered(self) -> list[str]:
        return sorted({*self.tasks, *_shared_tasks})

    @property
    def broker(self) -> Broker:
        """This process's broker; a forked child gets its own connection on first use."""
        if self._broker is None or self._broker_pid != os.getpid():
            self._broker = Broker(connect(self.settings.redis_url), [self.settings.queue])
            self._broker_pid = os.getpid()
        return self._broker

    def broker_for(self, queues: Iterable[str]) -> Broker:
        """A new broker (and connection) for reading ``queues``."""
        return Broker(connect(self.settings.redis_url), list(queues))

    def enqueue(self, msg: Message, *, in_ms: int | None = None) -> Job:
        """Send one job (one round trip), or run it at once in eager mode.

        Args:
            msg: the job; one with a future ``eta_ms`` waits in the schedule until then.
            in_ms: a countdown: due this long after Redis receives it (by the Redis clock).

        Raises:
            EnqueueError: arguments not msgpack-serializable, or payload too large.
            BrokerError: Redis could not be reached.
        """
        body = msg.encode(max_bytes=self.settings.max_payload_bytes)
        if self.settings.eager:  # the task sees what a worker would: the decoded job
            return self._run_eagerly(Message.decode(body))
        try:
            if in_ms is not None or (msg.eta_ms is not None and msg.eta_ms > now_ms()):
                self.broker.schedule(msg, body, in_ms=in_ms)
                return _job(msg, None)
            return _job(msg, self.broker.publish(msg, body))
        except redis.RedisError as exc:
            raise BrokerError(enqueue_failed(self.settings.redis_url, exc)) from exc

    def enqueue_many(self, messages: Iterable[Message]) -> list[Job]:
        """Send many jobs, one pipelined round trip per batch of 1,000.

        Every job of a batch is encoded and checked before any is sent, so a bad argument
        sends nothing of its batch.
        """
        jobs: list[Job] = []
        iterator = iter(messages)
        while batch := list(itertools.islice(iterator, BATCH_SIZE)):
            encoded = [(m, m.encode(max_bytes=self.settings.max_payload_bytes)) for m in batch]
            if self.settings.eager:
                jobs += [self._run_eagerly(Message.decode(body)) for _, body in encoded]
                continue
            try:
                ids = self.broker.publish_many(encoded)
            except redis.RedisError as exc:
                raise BrokerError(enqueue_failed(self.settings.redis_url, exc)) from exc
            jobs += [_job(m, i) for m, i in zip(batch, ids, strict=True)]
        return jobs

    def _run_eagerly(self, msg: Message) -> Job:
        task = self.get_task(msg.task)
        policy = task.retry_policy(self.settings)
        ctx = JobContext(
            msg.id, msg.task, 1, policy.max_attempts, msg.queue, msg.priority, msg.created_ms, None
        )
        token = set_current(ctx)
        try:
            task.run(msg.args, msg.kwargs)
        finally:
            reset_current(token)
        return _job(msg, None)

    def close(self) -> None:
        if self._broker is not None and self._broker_pid == os.getpid():
            self._broker.disconnect()
            self._broker.client.close()
        self._broker = None


def _job(msg: Message, entry_id: str | None) -> Job:
    """The handle; ``eta_ms`` only for a job that waits in the schedule (no entry id yet)."""
    return Job(
        msg.id, msg.task, msg.queue, msg.priority, entry_id, None if entry_id else msg.eta_ms
    )


def unreachable(redis_url: str, exc: BaseException) -> str:
    """The one-line error every command prints when Redis cannot be reached."""
    return (
        f"cannot reach Redis at {redact(redis_url)} ({exc}); start one with `taskq server` "
        "or point TASKQ_REDIS_URL at yours"
    )


def enqueue_failed(redis_url: str, exc: redis.RedisError) -> str:
    """Why an enqueue failed, saying when the job may have been sent all the same."""
    if isinstance(exc, redis.TimeoutError):
        return (
            f"Redis at {redact(redis_url)} did not answer in time ({exc}); the job may or may "
            "not have been enqueued"
        )
    if isinstance(exc, redis.ConnectionError):
        return unreachable(redis_url, exc)
    return f"Redis at {redact(redis_url)} refused the job: {exc}"


def redact(url: str) -> str:
    """The URL with any password replaced by ***."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"


def current_app() -> App:
    """The most recently created App, or one configured from the environment."""
    return _current_app if _current_app is not None else App()


def task(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Declare a shared task that any app can run (Celery's ``shared_task``).

    Library code can use it without importing an app; enqueueing goes through the current
    app (the last one created, else one configured from ``TASKQ_*``/``REDIS_URL``).
    """
    return _decorator(fn, options, app=None, register=_register_shared)


def _register_shared(t: Task[..., Any]) -> None:
    _shared_tasks[t.name] = t


def _decorator(
    fn: Callable[..., Any] | None,
    options: dict[str, Any],
    *,
    app: App | None,
    register: Callable[[Task[..., Any]], None],
) -> Any:
    def wrap(f: Callable[..., Any]) -> Task[..., Any]:
        opts = dict(options)
        name = opts.pop("name", None) or f"{f.__module__}.{f.__qualname__}"
        t: Task[..., Any] = Task(f, name=name, options=_options(opts), app=app)
        register(t)
        return t

    return wrap(fn) if fn is not None else wrap


def _options(opts: dict[str, Any]) -> TaskOptions:
    renamed = {
        "time_limit": "time_limit_s",
        "soft_time_limit": "soft_time_limit_s",
        "retry_backoff": "retry_backoff_ms",
        "retry_backoff_max": "retry_backoff_max_ms",
    }
    kwargs = {renamed.get(k, k): v for k, v in opts.items()}
    if "dont_autoretry_for" in kwargs:
        kwargs["dont_autoretry_for"] = tuple(kwargs["dont_autoretry_for"])
    try:
        return TaskOptions(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"unknown task option: {exc}") from None
