"""Eager mode (``Settings.eager``): jobs and workflows run inline at enqueue, as a worker
would run them, so application tests need neither Redis nor a worker.

The one home of eager mode: ``App.enqueue`` and ``App.launch`` (and their asyncio and bulk
forms) hand the job or the workflow here when the setting is on. It sits below the tasks
and the app and imports nothing of the worker (the retry policy comes from
:mod:`taskq.retry`, as the worker's does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
from typing import TYPE_CHECKING, Any

from taskq import codec
from taskq.canvas import Chain, Group, Signature, Workflow
from taskq.context import JobContext, reset_current, set_current
from taskq.job import Flow, Job
from taskq.launch import kind_of, single_result
from taskq.layout import with_implicit_chords
from taskq.message import Message, new_job_id
from taskq.resumable import MemoryStore, bind, finished
from taskq.retry import policy_for
from taskq.sending import handle
from taskq.storing import decode_value, encode_result

if TYPE_CHECKING:
    from taskq.protocols import Producer, TaskLike


def run_job(app: Producer, body: bytes) -> Job:
    """Run an encoded job now, as attempt 1 (the task sees what a worker would: the decoded
    job); a job that keeps a record returns what a worker would store, through
    ``result()``. The task's exception is raised as is."""
    msg = Message.decode(body)
    task = app.get_task(msg.task)
    policy = policy_for(task.options, app.settings)
    token = set_current(JobContext.of(msg, 1, policy.max_attempts, None))
    store = bind(MemoryStore(app.settings.max_result_bytes))  # steps run, kept in memory
    try:
        value = run_to_end(task, msg.args, msg.kwargs)
    finally:
        reset_current(token)
        bind(store)
        finished(msg.id)
    if msg.recorded:
        value = decode_value(encode_result(value, max_bytes=app.settings.max_result_bytes))
    return dataclasses.replace(handle(app, msg, None), eager_value=(value,))


def run_to_end(task: TaskLike, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``task.run``, and for an async task its coroutine to its end, on a loop of its own;
    in a thread when the caller runs a loop already (``await adelay()``)."""
    value: Any = task.run(args, kwargs)
    if not task.is_async:
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


def run_workflow(w: Workflow, app: Producer) -> Flow:
    """Run the workflow inline, as a worker would: results pass through msgpack from step
    to step, and a failure raises at once."""
    value = _run(w, app, None)
    queue = app.settings.queue
    return Flow(new_job_id(), kind_of(w), queue, (), single_result(w), app, eager_value=(value,))


def _run(w: Workflow, app: Producer, parent: tuple[Any] | None) -> Any:
    if isinstance(w, Signature):
        args = tuple(w.args) if w.immutable or parent is None else (parent[0], *w.args)
        task = w.task_obj if w.task_obj is not None else app.get_task(w.task)
        value = app.enqueue(task.message(args, dict(w.kwargs))).result()
        value = decode_value(codec.packb(value))
        for linked in w.link:
            _run(linked, app, (value,))
        return value
    if isinstance(w, Chain):
        for step in with_implicit_chords(list(w.steps)):
            parent = (_run(step, app, parent),)
        return parent[0] if parent is not None else None
    if isinstance(w, Group):
        return [_run(m, app, parent) for m in w.members]
    return _run(w.body, app, (_run(w.header, app, parent),))
