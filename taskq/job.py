"""Job: the handle an enqueue returns (or ``app.job(id)`` makes): where the job went, its
status, and, for a job that stores its result, the result itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from taskq.errors import ConfigError, JobNotFound, ResultTimeout, TaskFailed
from taskq.results import FAILED, FINAL, SUCCEEDED, UNKNOWN, JobStatus

if TYPE_CHECKING:
    from taskq.app import App


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
    app: App | None = field(default=None, repr=False, compare=False)
    eager_value: tuple[Any] | None = field(default=None, repr=False, compare=False)
    """In eager mode, the 1-tuple of the value the task returned (it ran at enqueue)."""

    def status(self) -> JobStatus:
        """Where the job is now (one round trip).

        Without a record (results off), only what the job's stream entry shows can be told:
        see :class:`~taskq.results.JobStatus`.
        """
        if self.eager_value is not None:
            return JobStatus(self.id, SUCCEEDED, True, self.task, self.queue, self.priority)
        app = self._app()
        if self.stores_result or self.entry_id is None:
            status = app.records.status(self.queue, self.id)
            if status.state != UNKNOWN or self.entry_id is None:
                return status
        assert self.entry_id is not None
        return app.records.entry_status(self.queue, self.priority, self.id, self.entry_id)

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
            return self.eager_value[0]
        return self.wait(timeout).value

    def wait(self, timeout: float | None = None) -> JobStatus:
        """Wait for the job to succeed and return its final status (see :meth:`result`)."""
        if self.eager_value is not None:
            return self.status()
        if not self.stores_result:
            raise ConfigError(
                f"job {self.id} ({self.task}) does not store its result: enqueue it from an "
                "App(store_results=True) or a task with store_result=True"
            )
        status = self._app().records.wait(self.queue, self.id, timeout)
        if status.state == SUCCEEDED:
            return status
        if status.state == FAILED:
            e = status.last_error
            if e is None:
                raise TaskFailed(self.id, "Unknown", "the job failed")
            raise TaskFailed(self.id, e.error_type, e.error, e.traceback)
        if status.state == UNKNOWN:
            raise JobNotFound(f"no record of job {self.id} in queue {self.queue!r} (expired?)")
        assert status.state not in FINAL
        raise ResultTimeout(f"job {self.id} ({self.task}) is still {status.state}")

    def forget(self) -> bool:
        """Delete the job's record and result now instead of at its TTL."""
        if self.eager_value is not None:
            return False
        return self._app().records.forget(self.queue, self.id)

    def _app(self) -> App:
        if self.app is None:
            raise ConfigError(f"job {self.id} has no app: get handles from enqueue or app.job()")
        return self.app
