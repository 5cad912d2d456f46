"""What ``apply_async`` sends: its options, checked and turned into a job (or a one-step
workflow), shared by the blocking and the asyncio producer."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

from taskq.batching import batch_steps, batching, eager_call
from taskq.broker.steps import Steps
from taskq.canvas import Signature, Workflow
from taskq.debounce import Debounce, debounce_steps, debouncing
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.keys import check_job_id
from taskq.message import Message, now_ms
from taskq.sending import send_steps
from taskq.unique import unique_steps, uniqueness

if TYPE_CHECKING:
    from taskq.protocols import TaskLike


class ApplyOptions(TypedDict, total=False):
    """The options of ``apply_async`` and ``aapply_async`` (see :meth:`Task.apply_async`)."""

    priority: str | None
    countdown: float | None
    eta: datetime | float | None
    queue: str | None
    link: Workflow | Iterable[Workflow] | None
    link_error: Signature | Iterable[Signature] | None
    expires: datetime | float | None
    unique_key: str | None
    unique_for: float | None
    unique_mode: str | None
    job_id: str | None
    partition_key: str | None
    fair_key: str | None
    debounce_key: str | None
    debounce_s: float | None
    debounce_max_wait_s: float | None


def apply_plan(
    task: TaskLike, args: tuple[Any, ...], kwargs: dict[str, Any], o: ApplyOptions
) -> Job | Steps[Job] | Signature:
    """What an enqueue with options sends: a job's steps, or a one-step workflow (with
    callbacks); in eager mode, the job that already ran."""
    if task.options.batch_size is not None:
        return _batched(task, args, kwargs, o)
    link, link_error = o.get("link"), o.get("link_error")
    expires, unique_key, job_id = o.get("expires"), o.get("unique_key"), o.get("job_id")
    debounced = _debounce_asked(task, o)
    if link is not None or link_error is not None:
        if expires is not None or unique_key is not None or job_id is not None:
            raise ConfigError("expires, unique_key and job_id do not go with link yet")
        if debounced:
            raise ConfigError("debounce_key does not go with link or link_error")
        return _linked(task, args, kwargs, o)
    eta_ms, in_ms = due_time(o.get("countdown"), o.get("eta"))
    msg = task.message(
        args,
        kwargs,
        priority=o.get("priority"),
        eta_ms=eta_ms,
        queue=o.get("queue"),
        partition_key=o.get("partition_key"),
        fair_key=o.get("fair_key"),
    )
    if expires is not None:
        msg = msg._replace(expires_ms=expiry_ms(expires))
    if job_id is not None:
        check_job_id(job_id)
        msg = msg._replace(id=job_id)
    u = uniqueness(
        task, msg, unique_key=unique_key, unique_for=o.get("unique_for"),
        unique_mode=o.get("unique_mode"), job_id=job_id,
    )  # fmt: skip
    d = _debounce(task, msg, o) if debounced else None
    if d is not None and not task.app.settings.eager:
        return debounce_steps(task.app, msg, d, u)
    if u is not None and not task.app.settings.eager:
        return unique_steps(task.app, msg, u, in_ms)
    if task.app.settings.eager:
        return task.app.enqueue(msg, in_ms=in_ms)
    return send_steps(task.app, msg, task.app.encode(msg), in_ms)


def _batched(
    task: TaskLike, args: tuple[Any, ...], kwargs: dict[str, Any], o: ApplyOptions
) -> Job | Steps[Job]:
    """A call of a batching task joins its batch (in eager mode it runs, a batch of one)."""
    msg = task.message(args, kwargs, queue=o.get("queue"))
    b = batching(task, msg, dict(o))
    if task.app.settings.eager:
        return task.app.enqueue(eager_call(msg))
    return batch_steps(task.app, msg, b)


def _debounce_asked(task: TaskLike, o: ApplyOptions) -> bool:
    """Whether the call is debounced, or names a debounce time (checked by ``debouncing``)."""
    return task.options.debounce_key is not None or any(
        o.get(name) is not None for name in ("debounce_key", "debounce_s", "debounce_max_wait_s")
    )


def _debounce(task: TaskLike, msg: Message, o: ApplyOptions) -> Debounce | None:
    """The burst of a call that asks for one (see :func:`debouncing`).

    Raises:
        ConfigError: with a countdown, an eta or a job id (a burst sets its own start and id).
    """
    if o.get("countdown") is not None or o.get("eta") is not None:
        raise ConfigError("debounce_key sets when the job starts: give no countdown or eta")
    if o.get("job_id") is not None:
        raise ConfigError("debounce_key and job_id do not go together (a burst has one id)")
    return debouncing(
        task, msg, key=o.get("debounce_key"), debounce_s=o.get("debounce_s"),
        max_wait_s=o.get("debounce_max_wait_s"),
    )  # fmt: skip


def _linked(
    task: TaskLike, args: tuple[Any, ...], kwargs: dict[str, Any], o: ApplyOptions
) -> Job | Signature:
    """``apply_async`` with callbacks: the job runs as a one-step workflow (this
    signature; run at once in eager mode)."""
    if o.get("eta") is not None:
        raise ConfigError("link and link_error take a countdown, not an eta")
    sig = Signature(task.name, args, kwargs, task_obj=task)
    sig = sig.set(priority=o.get("priority"), queue=o.get("queue"), countdown=o.get("countdown"))
    sig = sig.on_success(*_many(o.get("link"))).on_error(*_many(o.get("link_error")))
    if not task.app.settings.eager:
        return sig
    flow = task.app.launch(sig)
    msg = task.message(args, kwargs)
    return Job(msg.id, msg.task, msg.queue, msg.priority, eager_value=flow.eager_value)


def due_time(
    countdown: float | None, eta: datetime | float | None
) -> tuple[int | None, int | None]:
    """``(eta_ms, in_ms)`` for a delayed job, or ``(None, None)`` for "now".

    A countdown is relative: ``in_ms`` is counted from when Redis receives the job, by the
    Redis clock, so a producer with a wrong clock cannot shift it (``eta_ms`` is then this
    machine's estimate, for the handle and the body). An ``eta`` is an absolute time
    (``in_ms`` None). A naive ``eta`` datetime is taken as UTC, as Celery does
    (``datetime.utcnow() + ...``).
    """
    if countdown is not None and eta is not None:
        raise ConfigError("give countdown or eta, not both")
    if countdown is not None:
        if isinstance(countdown, bool) or not isinstance(countdown, int | float):
            raise ConfigError(f"countdown must be a number of seconds, not {countdown!r}")
        if not math.isfinite(countdown):
            raise ConfigError(f"countdown must be finite, not {countdown!r}")
        in_ms = int(countdown * 1000)
        return (now_ms() + in_ms, in_ms) if in_ms > 0 else (None, None)
    if eta is None:
        return None, None
    if isinstance(eta, datetime):
        aware = eta if eta.tzinfo is not None else eta.replace(tzinfo=timezone.utc)
        due_ms = int(aware.timestamp() * 1000)
    elif isinstance(eta, int | float) and not isinstance(eta, bool) and math.isfinite(eta):
        due_ms = int(eta * 1000)
    else:
        raise ConfigError(f"eta must be a datetime or a POSIX timestamp, not {eta!r}")
    return (due_ms, None) if due_ms > now_ms() else (None, None)


def expiry_ms(expires: datetime | float) -> int:
    """When a job expires (ms since the epoch): ``expires`` seconds from now, or at a
    ``datetime`` (a naive one is UTC, as for ``eta``).

    Raises:
        ConfigError: not a finite number or a datetime.
    """
    if isinstance(expires, datetime):
        aware = expires if expires.tzinfo is not None else expires.replace(tzinfo=timezone.utc)
        return int(aware.timestamp() * 1000)
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        raise ConfigError(f"expires must be seconds or a datetime, not {expires!r}")
    if not math.isfinite(expires):
        raise ConfigError(f"expires must be finite, not {expires!r}")
    return now_ms() + int(expires * 1000)


def _many(value: Any) -> list[Any]:
    """One callback or an iterable of them, as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple | Iterator) else [value]
