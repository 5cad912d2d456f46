"""Tasks that can wait for the database: ``delay_on_commit`` and ``apply_async_on_commit``.

A job enqueued inside ``transaction.atomic()`` with plain ``delay()`` may reach a worker
before the transaction commits (the worker then does not see the row it was sent for), or
after a rollback (it was sent for a row that never existed). The ``_on_commit`` variants
hand the enqueue to ``transaction.on_commit``: it happens once the outermost transaction
commits, never on a rollback, and at once where no transaction is open (autocommit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar, overload

from django.db import transaction

from taskq.app import App, decorator
from taskq.apply import ApplyOptions
from taskq.errors import ConfigError
from taskq.options import TaskOptionArgs
from taskq.registry import SHARED
from taskq.task import Task

if TYPE_CHECKING:
    from typing_extensions import Unpack

P = ParamSpec("P")
R = TypeVar("R")

APPLY_OPTIONS = frozenset(ApplyOptions.__annotations__)
"""The options ``apply_async`` takes (an unknown one is refused before it waits for a commit)."""


class DjangoTask(Task[P, R]):
    """A :class:`taskq.Task` that can also enqueue once the current transaction commits."""

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """``delay(*args, **kwargs)`` once the transaction of the default database commits
        (at once outside a transaction; never if it rolls back).

        Returns nothing: the job does not exist yet. To know its id beforehand, give one:
        ``apply_async_on_commit(args, job_id=...)``. An enqueue that fails then (Redis
        unreachable) raises from the end of the ``atomic()`` block, after the commit.
        """
        transaction.on_commit(partial(self.delay, *args, **kwargs))

    def apply_async_on_commit(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        using: str | None = None,
        robust: bool = False,
        **options: Unpack[ApplyOptions],
    ) -> None:
        """``apply_async(args, kwargs, **options)`` once the transaction of the database
        ``using`` (default: ``"default"``) commits; nothing if it rolls back.

        Args:
            robust: log an enqueue that fails at commit instead of raising it (Django's
                ``on_commit(robust=True)``; the data is committed either way).

        Raises:
            ConfigError: an option ``apply_async`` does not take (checked now, not at commit).
        """
        unknown = sorted(set(options) - APPLY_OPTIONS)
        if unknown:
            raise ConfigError(f"unknown apply_async option(s): {', '.join(unknown)}")
        # The arguments as they are now: a list the caller changes before the commit, or a
        # generator, must not change what is sent.
        send = partial(self.apply_async, tuple(args), dict(kwargs or {}), **options)
        transaction.on_commit(send, using=using, robust=robust)


class DjangoApp(App):
    """An :class:`taskq.App` whose ``@app.task`` makes :class:`DjangoTask` s."""

    @overload
    def task(self, fn: Callable[P, R], /) -> DjangoTask[P, R]: ...

    @overload
    def task(
        self, /, *, bind: Literal[False] = False, **options: Unpack[TaskOptionArgs]
    ) -> Callable[[Callable[P, R]], DjangoTask[P, R]]: ...

    @overload
    def task(
        self, /, *, bind: Literal[True], **options: Unpack[TaskOptionArgs]
    ) -> Callable[[Callable[Concatenate[Any, P], R]], DjangoTask[P, R]]: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, *, bind: bool = False, **options: Any
    ) -> Any:
        """As :meth:`taskq.App.task`."""
        return decorator(
            fn, options, bind=bind, app=self, register=self.registry.add, cls=DjangoTask
        )


@overload
def task(fn: Callable[P, R], /) -> DjangoTask[P, R]: ...


@overload
def task(
    *, bind: Literal[False] = False, **options: Unpack[TaskOptionArgs]
) -> Callable[[Callable[P, R]], DjangoTask[P, R]]: ...


@overload
def task(
    *, bind: Literal[True], **options: Unpack[TaskOptionArgs]
) -> Callable[[Callable[Concatenate[Any, P], R]], DjangoTask[P, R]]: ...


def task(fn: Callable[..., Any] | None = None, /, *, bind: bool = False, **options: Any) -> Any:
    """A shared task (as ``@taskq.task``, Celery's ``shared_task``) with ``delay_on_commit``:
    declare it in an app's ``tasks.py``; it enqueues through the project's app."""
    return decorator(fn, options, bind=bind, app=None, register=SHARED.add, cls=DjangoTask)
