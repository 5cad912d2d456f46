"""Unique jobs: at most one job per key is enqueued while the key is held.

The lock is a string ``<queue>:unique:<key>`` holding the id of the job that took it, set
with ``NX PX`` in the same script that enqueues that job (``unique.lua``), so of many
concurrent enqueues of one key exactly one adds a job and the others get its handle.

Modes (compare BullMQ's deduplication): ``until_done`` (BullMQ's "simple mode" with a TTL
as a cap) holds the key until the job ends (succeeded, dead-lettered, cancelled, expired),
released by the script that records the end, or for ``unique_for`` seconds at most;
``throttle`` (BullMQ's "throttle mode") holds it for ``unique_for`` seconds after the enqueue,
whatever becomes of the job.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskq.broker.enqueue import unique_command
from taskq.broker.steps import Steps
from taskq.errors import ConfigError
from taskq.flow import enqueue_ops
from taskq.job import Job
from taskq.keys import QueueKeys
from taskq.message import Message, now_ms
from taskq.results import encode_args

if TYPE_CHECKING:
    from taskq.protocols import Producer, TaskLike

UNTIL_DONE, THROTTLE = "until_done", "throttle"
MODES = (UNTIL_DONE, THROTTLE)
DEFAULT_UNIQUE_FOR_S = 3600.0
"""How long a key is held at most when neither the call nor the task says."""
MAX_KEY_CHARS = 200


@dataclass(frozen=True)
class Uniqueness:
    """The lock an enqueue takes: its Redis key, how long, and whether the job's end
    releases it."""

    lock: str
    hold_ms: int
    released_at_end: bool


def uniqueness(
    task: TaskLike,
    msg: Message,
    *,
    unique_key: str | None,
    unique_for: float | None,
    unique_mode: str | None,
    job_id: str | None,
) -> Uniqueness | None:
    """The lock an ``apply_async`` call asks for (None: an ordinary enqueue).

    A ``unique_key``, the task option ``unique=True`` (the key is the task's name and a hash
    of its arguments) or a caller-chosen ``job_id`` (the key is that id) make a job unique.

    Raises:
        ConfigError: ``unique_for`` or ``unique_mode`` without a key, a bad key, a bad
            duration or an unknown mode.
    """
    o = task.options
    key = unique_key
    if key is None and o.unique:
        digest = hashlib.sha256(canonical_args(task, msg.args, msg.kwargs)).hexdigest()[:32]
        key = f"{task.name}:{digest}"
    if key is None and job_id is not None:
        key = f"id:{job_id}"
    if key is None:
        if unique_for is not None or unique_mode is not None:
            raise ConfigError(f"{task.name}: unique_for and unique_mode need a unique_key")
        return None
    _check_key(key)
    mode = unique_mode or o.unique_mode
    if mode not in MODES:
        raise ConfigError(f"{task.name}: unique_mode must be one of {', '.join(MODES)}")
    hold_s = unique_for if unique_for is not None else o.unique_for_s
    if isinstance(hold_s, bool) or not isinstance(hold_s, int | float) or not hold_s > 0:
        raise ConfigError(f"{task.name}: unique_for must be a number of seconds > 0")
    hold_ms = max(1, int(min(hold_s, 10 * 365 * 86400) * 1000))
    return Uniqueness(QueueKeys(msg.queue).unique(key), hold_ms, mode == UNTIL_DONE)


def canonical_args(task: TaskLike, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The arguments of a call, encoded the same however the call was written: bound to the
    task's signature with its defaults applied, each value under its parameter in the
    signature's order, a ``**kwargs`` catch-all sorted by name. So ``delay(8, full=True)``,
    ``delay(full=True, shop_id=8)`` and ``delay(shop_id=8, full=True)`` are one key. Arguments
    that do not fit the signature (the job will fail) are taken as written, keywords sorted."""
    bound_args = (task, *args) if task.options.bind else args
    try:
        bound = inspect.signature(task.fn).bind(*bound_args, **kwargs)
    except (TypeError, ValueError):
        return encode_args(args, dict(sorted(kwargs.items())))
    bound.apply_defaults()
    params = list(bound.signature.parameters.values())[1 if task.options.bind else 0 :]
    values = []
    for param in params:
        value = bound.arguments[param.name]
        values.append(dict(sorted(value.items())) if param.kind == param.VAR_KEYWORD else value)
    return encode_args(tuple(values), {})


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ConfigError(
            f"invalid unique_key {key!r}: expected 1 to {MAX_KEY_CHARS} printable characters"
        )


def unique_steps(app: Producer, msg: Message, u: Uniqueness, in_ms: int | None) -> Steps[Job]:
    """Enqueue ``msg`` unless its key is held; returns its handle, or the holder's."""
    if u.released_at_end:
        msg = msg._replace(unique=u.lock)
    body = app.encode(msg)
    delay_ms = in_ms if in_ms is not None else max(0, (msg.eta_ms or 0) - now_ms())
    ops = enqueue_ops(msg, body, delay_ms)
    keys = [u.lock, *ops.keys]
    record = QueueKeys(msg.queue).job(msg.id)
    at = keys.index(record) + 1 if record in keys else 0
    command = unique_command(keys, msg.id, u.hold_ms, ops.packed(), at, u.released_at_end)
    [holder] = yield [command]
    holder_id = holder.decode() if isinstance(holder, bytes) else str(holder)
    stores = msg.recorded
    if holder_id == msg.id:
        eta = msg.eta_ms if delay_ms > 0 else None
        return Job(msg.id, msg.task, msg.queue, msg.priority, None, eta, stores, app)
    return Job(holder_id, msg.task, msg.queue, msg.priority, stores_result=stores, app=app)
