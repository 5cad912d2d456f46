"""Job: the handle an enqueue returns (or ``app.job(id)`` makes): where the job went, its
status, and, for a job that stores its result, the result itself."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from taskq.broker.records import (
    entry_status_steps,
    status_steps,
    unrecorded_end_steps,
    wait_steps,
)
from taskq.broker.steps import Steps, arun, run
from taskq.errors import (
    ConfigError,
    JobCancelled,
    JobExpired,
    JobNotFound,
    ResultTimeout,
    TaskFailed,
    TaskqError,
)
from taskq.storing import CANCELLED, EXPIRED, FAILED, FINAL, SUCCEEDED, UNKNOWN
from taskq.telemetry import (
    Chunk,
    Follower,
    Logs,
    OutputReader,
    Progress,
    logs_steps,
    progress_steps,
)

UNRECORDED_CANCEL_KEEP_S = 7 * 86_400
"""How long the cancellation of a job that keeps no record waits for the job, if the cancel
did not find it waiting in its queue (a worker took it, or it is not there yet): a week."""

if TYPE_CHECKING:
    # JobStatus loads with the first status made here (a worker's start makes none).
    from taskq.broker.alink import AsyncLink
    from taskq.broker.control import Auditor
    from taskq.broker.link import Link
    from taskq.broker.records import Records
    from taskq.config import Settings
    from taskq.results import JobStatus


class HandleApp(Protocol):
    """What a handle needs of its app (:class:`~taskq.App` is one): the settings, this
    process's links and the job records. A Protocol, so that this module sits below the app."""

    @property
    def settings(self) -> Settings: ...

    @property
    def link(self) -> Link: ...

    @property
    def alink(self) -> AsyncLink: ...

    @property
    def records(self) -> Records: ...

    def get_task(self, name: str, /) -> Any: ...
    @property
    def auditor(self) -> Auditor: ...


@dataclass(frozen=True)
class Job:
    """Handle of an enqueued job (a value: two handles of one job compare equal).

    Attributes:
        entry_id: its stream entry, for a job that went straight to a stream.
        eta_ms: when a delayed job is due (this machine's estimate).
        stores_result: the job keeps a status record and its return value.
    """

    id: str
    task: str
    queue: str
    priority: str
    entry_id: str | None = None
    eta_ms: int | None = None
    stores_result: bool = False
    app: HandleApp | None = field(default=None, repr=False, compare=False)
    eager_value: tuple[Any] | None = field(default=None, repr=False, compare=False)
    """In eager mode, the 1-tuple of the value the task returned (it ran at enqueue)."""

    @property
    def recorded(self) -> bool:
        """Whether the job keeps a status record (:attr:`stores_result`, the public field)."""
        return self.stores_result

    def status(self) -> JobStatus:
        """Where the job is now (one round trip).

        Without a record (results off), only what the job's stream entry shows can be told:
        see :class:`~taskq.results.JobStatus`.
        """
        if self.eager_value is not None:
            return self._eager_status()
        return run(self._app().link, self._status_steps())

    async def astatus(self) -> JobStatus:
        """:meth:`status` for asyncio code."""
        if self.eager_value is not None:
            return self._eager_status()
        return await arun(self._app().alink, self._status_steps())

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value, waiting for the job to end (for ever if ``timeout`` is
        None). The wait blocks in Redis and survives reconnects and Redis restarts.

        Raises:
            ResultTimeout: the job had not ended after ``timeout`` seconds.
            TaskFailed: the job failed for good (its remote type, message and traceback).
            JobNotFound: Redis has no record of it (expired, forgotten, or lost).
            ConfigError: the job does not store its result.
        """
        if self.eager_value is not None:
            return self._typed(self.eager_value[0])
        return self._typed(self.wait(timeout).value)

    async def aresult(self, timeout: float | None = None) -> Any:
        """:meth:`result` for asyncio code: the wait blocks in Redis, not the event loop."""
        if self.eager_value is not None:
            return self._typed(self.eager_value[0])
        self._check_stores()
        steps = wait_steps(self.queue, self.id, timeout)
        return self._typed(self._ended(await arun(self._app().alink, steps)).value)

    def _typed(self, value: Any) -> Any:
        """The value with the dataclasses and pydantic models its task's return annotation
        names rebuilt (as it came if this process does not know the task)."""
        try:
            task = self._app().get_task(self.task)
        except TaskqError:
            return value
        return task.spec.result(value)

    def wait(self, timeout: float | None = None) -> JobStatus:
        """Wait for the job to succeed and return its final status (see :meth:`result`)."""
        if self.eager_value is not None:
            return self.status()
        self._check_stores()
        return self._ended(self._app().records.wait(self.queue, self.id, timeout))

    # -- live telemetry (docs/telemetry.md) ---------------------------------------------

    def progress(self) -> Progress | None:
        """The latest ``(done, total, message, updated_ms)`` the task reported, or None."""
        if self.eager_value is not None:
            return None
        return run(self._app().link, progress_steps(self.queue, self.id))

    async def aprogress(self) -> Progress | None:
        """:meth:`progress` for asyncio code."""
        if self.eager_value is not None:
            return None
        return await arun(self._app().alink, progress_steps(self.queue, self.id))

    def stream(self, after: str | None = None, timeout: float | None = None) -> Iterator[Chunk]:
        """The job's output chunks in order, as they arrive (blocking reads in Redis), until
        the job ends (success, dead letter, cancel, expiry); chunks written before the call
        come first. Each :class:`~taskq.telemetry.Chunk` has its ``id``: ``after=`` that id
        resumes exactly after it (a reader that lost its connection gets the rest).

        Raises:
            ResultTimeout: ``timeout`` seconds passed before the job ended.
        """
        if self.eager_value is not None:
            return
        link, reader = self._app().link, self._reader(after, timeout)
        while chunks := run(link, reader.next_steps()):
            yield from chunks

    async def astream(
        self, after: str | None = None, timeout: float | None = None
    ) -> AsyncIterator[Chunk]:
        """:meth:`stream` for asyncio code: its reads block in Redis, not the event loop."""
        if self.eager_value is not None:
            return
        link, reader = self._app().alink, self._reader(after, timeout)
        while chunks := await arun(link, reader.next_steps()):
            for chunk in chunks:
                yield chunk

    def logs(self) -> Logs:
        """The log records kept for the job (``level``, ``time_ms``, ``message``,
        ``attempt``), oldest first, and how many older ones were dropped."""
        if self.eager_value is not None:
            return Logs((), 0)
        return run(self._app().link, logs_steps(self.queue, self.id))

    async def alogs(self) -> Logs:
        """:meth:`logs` for asyncio code."""
        if self.eager_value is not None:
            return Logs((), 0)
        return await arun(self._app().alink, logs_steps(self.queue, self.id))

    def follower(self, slice_s: float = 0.2, *, after: str | None = None) -> Follower:
        """The job's telemetry as live events (``taskq job --follow``, the dashboard), its
        chunks from after ``after``: drive its ``next_steps()`` with
        ``taskq.broker.steps.run`` or ``arun``."""
        return Follower(self.queue, self.id, self._status_steps, slice_s=slice_s, after=after)

    def _reader(self, after: str | None, timeout: float | None) -> OutputReader:
        return OutputReader(self.queue, self.id, self._status_steps, after=after, timeout_s=timeout)

    def _eager_status(self) -> JobStatus:
        from taskq.results import JobStatus

        return JobStatus(self.id, SUCCEEDED, True, self.task, self.queue, self.priority)

    def _status_steps(self) -> Steps[JobStatus]:
        if self.stores_result or self.entry_id is None:
            status = yield from status_steps(self.queue, self.id)
            if status.state != UNKNOWN:
                return status
        if not self.stores_result:  # a job without a record that was cancelled or expired
            ended = yield from unrecorded_end_steps(self.queue, self.id)
            if ended is not None:
                from taskq.results import JobStatus

                return JobStatus(self.id, ended, task=self.task, queue=self.queue)
        if self.entry_id is None:
            return status
        return (yield from entry_status_steps(self.queue, self.priority, self.id, self.entry_id))

    def _check_stores(self) -> None:
        if not self.stores_result and not self.task:  # app.job(id) found no record of it
            raise self._not_found()
        if not self.stores_result:
            raise ConfigError(
                f"job {self.id} ({self.task}) does not store its result: enqueue it from an "
                "App(store_results=True) or a task with store_result=True"
            )

    def _not_found(self) -> JobNotFound:
        return JobNotFound(f"no record of job {self.id} in queue {self.queue!r} (expired?)")

    def _ended(self, status: JobStatus) -> JobStatus:
        """``status`` if the job succeeded; else the error that says how it ended."""
        if status.state == SUCCEEDED:
            return status
        if status.state == FAILED:
            if status.cause is not None:  # an earlier step of its workflow failed
                c = status.cause
                raise TaskFailed(c.job_id, c.error_type, c.error, task=c.task)
            e = status.last_error
            if e is None:
                raise TaskFailed(self.id, "Unknown", "the job failed")
            raise TaskFailed(self.id, e.error_type, e.error, e.traceback, task=self.task)
        if status.state == CANCELLED:
            raise JobCancelled(self.id, task=self.task)
        if status.state == EXPIRED:
            raise JobExpired(self.id, task=self.task)
        if status.state == UNKNOWN:
            raise self._not_found()
        assert status.state not in FINAL
        raise ResultTimeout(f"job {self.id} ({self.task}) is still {status.state}")

    def cancel(self, *, terminate: bool = False) -> str:
        """Cancel the job. A job not started yet (waiting, scheduled, retrying, or a later
        workflow step) is removed at once and never runs; a running one is interrupted only
        with ``terminate=True`` (:class:`~taskq.errors.JobCancelled` inside the task, then
        SIGKILL of its child after a grace), and is then neither retried nor dead-lettered.
        Its status becomes ``cancelled``; the cancellation is kept in Redis, so it holds
        across worker restarts.

        A job that keeps no record is looked for by its id where it waits in its queue
        (stream, schedule, retry sets) and removed; if it is not found there (a worker took
        it), a tombstone kept for :data:`UNRECORDED_CANCEL_KEEP_S` stops it before it starts,
        and with ``terminate=True`` interrupts it if it runs.

        Returns:
            ``cancelled``; ``terminating`` (its worker will interrupt it); ``running`` (it
            runs, and ``terminate`` was False); ``requested`` (no record, not found waiting:
            the tombstone stands); or the final state it had already reached.
        """
        if self.eager_value is not None:
            return SUCCEEDED
        app = self._app()
        ttl_ms = app.settings.result_ttl_s * 1000
        keep_ms = UNRECORDED_CANCEL_KEEP_S * 1000
        return app.records.cancel(
            self.queue,
            self.id,
            ttl_ms=ttl_ms,
            terminate=terminate,
            keep_ms=keep_ms,
            auditor=app.auditor,
        )

    def forget(self) -> bool:
        """Delete the job's record and result now instead of at its TTL."""
        if self.eager_value is not None:
            return False
        return self._app().records.forget(self.queue, self.id)

    def _app(self) -> HandleApp:
        if self.app is None:
            raise ConfigError(f"job {self.id} has no app: get handles from enqueue or app.job()")
        return self.app


@dataclass(frozen=True)
class Flow:
    """Handle of a workflow (chain, group, chord, or a signature with callbacks).

    Attributes:
        jobs: the jobs whose results are the workflow's result: the last step of a chain,
            every member of a group, a chord's body (its last step).
        single: the result is one value (else the list of the jobs' results, in order).
    """

    id: str
    kind: str
    queue: str
    jobs: tuple[Job, ...]
    single: bool = True
    app: HandleApp | None = field(default=None, repr=False, compare=False)
    eager_value: tuple[Any] | None = field(default=None, repr=False, compare=False)

    def result(self, timeout: float | None = None) -> Any:
        """The workflow's result: the last step's (chain, chord) or the list of the members'
        (group), waiting for it.

        Raises:
            TaskFailed: a step failed for good; ``step`` names its task.
            ResultTimeout: it had not ended after ``timeout`` seconds (for the whole wait).
        """
        if self.eager_value is not None:
            return self.eager_value[0]
        values = self.results(timeout)
        return values[0] if self.single else values

    def results(
        self, timeout: float | None = None, *, return_exceptions: bool = False
    ) -> list[Any]:
        """Each job's result in order; with ``return_exceptions``, a failed job's
        :class:`~taskq.errors.TaskFailed` in its place instead of raising it."""
        if self.eager_value is not None:
            value = self.eager_value[0]
            return [value] if self.single else list(value)
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Any] = []
        for job in self.jobs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out.append(job.result(left))
            except TaskFailed as exc:
                if not return_exceptions:
                    raise
                out.append(exc)
        return out

    def status(self) -> JobStatus:
        """The status of the job whose result ends the workflow (the first of a group)."""
        if self.jobs:
            return self.jobs[0].status()
        from taskq.results import JobStatus

        return JobStatus(self.id, SUCCEEDED)

    def cancel(self, *, terminate: bool = False) -> dict[str, str]:
        """Cancel every step of the workflow that has not ended: those not started never
        run (see :meth:`Job.cancel`). Returns each step's outcome by job id."""
        if self.eager_value is not None:
            return {}
        app = self.app
        if app is None:
            raise ConfigError(f"workflow {self.id} has no app: get handles from apply_async()")
        info = app.records.flow_steps(self.queue, self.id)
        ttl_ms = app.settings.result_ttl_s * 1000
        return {
            job_id: app.records.cancel(
                queue, job_id, ttl_ms=ttl_ms, terminate=terminate, auditor=app.auditor
            )
            for job_id, queue in info
        }

    def forget(self) -> None:
        for job in self.jobs:
            job.forget()
