"""taskq: a fast background task queue for Python on Redis Streams that never loses a job.

The package reads as the data flow: the producer core here (``app``, ``task``, ``message``,
``config``, ``keys``, ``errors``, ``context``), then ``broker/`` (all Redis I/O), ``worker/``
(the prefork pool and what happens to each job), ``job`` and ``results`` (the handle, and
the status records it reads), ``ops/`` (inspect, dead letters, metrics,
the dev server) and ``cli/`` (the ``taskq`` command). See docs/architecture.md.
"""

from __future__ import annotations

__version__ = "0.1.0"

from taskq.app import App, current_app, task
from taskq.canvas import Chain, Chord, Group, Signature, chain, chord, group
from taskq.config import Settings
from taskq.context import JobContext, current_job
from taskq.deadletter import Deadletter
from taskq.errors import (
    BrokerError,
    BrokerRefused,
    BrokerUnavailable,
    ConfigError,
    DecodeError,
    EnqueueError,
    JobCancelled,
    JobExpired,
    JobNotFound,
    PayloadTooLarge,
    ResultError,
    ResultTimeout,
    ResultTooLarge,
    Retry,
    Snooze,
    SoftTimeLimitExceeded,
    TaskFailed,
    TaskNotFound,
    TaskqError,
    UnserializableResult,
)
from taskq.job import Flow, Job
from taskq.middleware import Middleware
from taskq.ops.deadletters import Deadletters
from taskq.results import JobStatus
from taskq.task import Task

__all__ = [
    # the app and its tasks
    "App",
    # errors
    "BrokerError",
    "BrokerRefused",
    "BrokerUnavailable",
    # workflows
    "Chain",
    "Chord",
    "ConfigError",
    # hooks and operations
    "Deadletter",
    "Deadletters",
    "DecodeError",
    "EnqueueError",
    "Flow",
    "Group",
    "Job",
    # inside a task
    "JobCancelled",
    "JobContext",
    "JobExpired",
    "JobNotFound",
    "JobStatus",
    "Middleware",
    "PayloadTooLarge",
    "ResultError",
    "ResultTimeout",
    "ResultTooLarge",
    "Retry",
    "Settings",
    "Signature",
    "Snooze",
    "SoftTimeLimitExceeded",
    "Task",
    "TaskFailed",
    "TaskNotFound",
    "TaskqError",
    "UnserializableResult",
    "__version__",
    "chain",
    "chord",
    "current_app",
    "current_job",
    "group",
    "task",
]
