"""Unique jobs: at most one job per key is enqueued while the key is held.

The lock is a string ``<queue>:unique:<key>`` holding the id of the job that took it, set
with ``NX PX`` in the same script that enqueues that job (``unique.lua``), so of many
concurrent enqueues of one key exactly one adds a job and the others get its handle.

Modes (compare BullMQ's deduplication): ``until_done`` (BullMQ's "simple mode" with a TTL
as a cap) holds the key until the job ends (succeeded, dead-lettered, cancelled, expired),
released by the script that records the end, or for ``unique_for`` seconds at most;
``throttle`` (BullMQ's "throttle mode") holds it for ``unique_for`` seconds after the enqueue,
whatever becomes of the job; ``keep_last`` (BullMQ's "keepLastIfActive") is ``until_done``
while the key's job waits, and while it runs, keeps one follow-up job with the last
enqueue's arguments, which the running job's end enqueues (``keeplast.lua``). A
``keep_last`` job keeps a status record (its state tells waiting from running).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskq.broker.enqueue import keep_last_command, schedule_member, unique_command
from taskq.broker.replies import text
from taskq.broker.resp import Command
from taskq.broker.steps import Steps
from taskq.errors import BrokerError, ConfigError
from taskq.flow import enqueue_ops
from taskq.job import Job
from taskq.keys import QueueKeys
from taskq.message import Message, new_job_id, now_ms
from taskq.storing import encode_args

if TYPE_CHECKING:
    from taskq.protocols import Producer, TaskLike

UNTIL_DONE, THROTTLE, KEEP_LAST = "until_done", "throttle", "keep_last"
MODES = (UNTIL_DONE, THROTTLE, KEEP_LAST)
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
    keep_last: bool = False


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
    check_key(key, "unique_key")
    mode = unique_mode or o.unique_mode
    if mode not in MODES:
        raise ConfigError(f"{task.name}: unique_mode must be one of {', '.join(MODES)}")
    hold_s = unique_for if unique_for is not None else o.unique_for_s
    if isinstance(hold_s, bool) or not isinstance(hold_s, int | float) or not hold_s > 0:
        raise ConfigError(f"{task.name}: unique_for must be a number of seconds > 0")
    hold_ms = max(1, int(min(hold_s, 10 * 365 * 86400) * 1000))
    lock = QueueKeys(msg.queue).unique(key)
    return Uniqueness(lock, hold_ms, mode != THROTTLE, mode == KEEP_LAST)


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


def check_key(key: object, name: str) -> None:
    """Raises ConfigError unless ``key`` (a ``unique_key``, ``debounce_key``, ...) is 1 to
    :data:`MAX_KEY_CHARS` printable characters."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ConfigError(
            f"invalid {name} {key!r:.{MAX_KEY_CHARS + 10}}: expected 1 to {MAX_KEY_CHARS} "
            "printable characters"
        )


def unique_steps(app: Producer, msg: Message, u: Uniqueness, in_ms: int | None) -> Steps[Job]:
    """Enqueue ``msg`` unless its key is held; returns its handle, or the holder's."""
    if u.keep_last:
        return (yield from _keep_last_steps(app, msg, u, in_ms))
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


ADOPT_ATTEMPTS = 4
"""Sends of one call at most: a fresh id, the id the script names, and again if the job of
that id was enqueued meanwhile."""

CommandOf = Callable[[Message, bytes, bool], Command]
"""The script command that sends ``msg`` (as encoded), told whether its id is one the
script named."""


def adopting_steps(
    app: Producer, msg: Message, command_of: CommandOf, known_id: str | None = None
) -> Steps[tuple[str, str, list[Any], Message]]:
    """Send ``msg`` with a script that may answer ``['adopt', id]``: the body must carry that
    id (a job waiting to be replaced whole), or a fresh one (``''``); it is encoded and sent
    again so. ``known_id``: a guess of that id, sent first. Returns the script's status and
    job id, its whole reply, and the message as last sent.

    Raises:
        BrokerError: an unexpected reply, or the id changed on every attempt.
    """
    adopted = known_id is not None
    if known_id is not None:
        msg = msg._replace(id=known_id)
    for _ in range(ADOPT_ATTEMPTS):
        [reply] = yield [command_of(msg, app.encode(msg), adopted)]
        if not isinstance(reply, list) or len(reply) < 2:
            raise BrokerError(f"unexpected reply {reply!r:.200}")
        status, job_id = text(reply[0]), text(reply[1])
        if status not in ("ok", "held", "adopt") or (status != "adopt" and not job_id):
            raise BrokerError(f"unexpected reply {reply!r:.200}")
        if status != "adopt":
            return status, job_id, reply, msg
        adopted = bool(job_id)
        msg = msg._replace(id=job_id or new_job_id())
    raise BrokerError(f"{msg.task}: the job to replace changed on every attempt")


def _keep_last_steps(app: Producer, msg: Message, u: Uniqueness, in_ms: int | None) -> Steps[Job]:
    """A ``keep_last`` enqueue: the job, the waiting holder's handle, or the follow-up."""
    if msg.result_ttl_s is None:
        msg = msg._replace(result_ttl_s=app.settings.result_ttl_s)
    msg = msg._replace(unique=u.lock)
    delay_ms = in_ms if in_ms is not None else max(0, (msg.eta_ms or 0) - now_ms())
    follow_up = QueueKeys(msg.queue).follow_up(u.lock.split(":unique:", 1)[1])

    def command_of(m: Message, body: bytes, adopted: bool) -> Command:
        ops = enqueue_ops(m, body, delay_ms)
        keys = [u.lock, follow_up, *ops.keys]
        at = keys.index(QueueKeys(m.queue).job(m.id)) + 1
        member = schedule_member(m, body)
        return keep_last_command(keys, m, u.hold_ms, ops.packed(), at, adopted, member)

    status, job_id, _, msg = yield from adopting_steps(app, msg, command_of)
    if status == "held":
        return Job(job_id, msg.task, msg.queue, msg.priority, stores_result=True, app=app)
    eta = msg.eta_ms if delay_ms > 0 else None
    return Job(msg.id, msg.task, msg.queue, msg.priority, None, eta, True, app)
