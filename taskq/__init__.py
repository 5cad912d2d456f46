"""taskq: a fast background task queue for Python on Redis Streams that never loses a job."""

from __future__ import annotations

__version__ = "0.1.0"

from taskq.app import App, current_app, task
from taskq.config import Settings
from taskq.context import JobContext, current_job
from taskq.errors import (
    BrokerError,
    ConfigError,
    DecodeError,
    EnqueueError,
    PayloadTooLarge,
    Retry,
    SoftTimeLimitExceeded,
    TaskNotFound,
    TaskqError,
)
from taskq.middleware import Middleware
from taskq.task import Job, Task

__all__ = [
    "App",
    "BrokerError",
    "ConfigError",
    "DecodeError",
    "EnqueueError",
    "Job",
    "JobContext",
    "Middleware",
    "PayloadTooLarge",
    "Retry",
    "Settings",
    "SoftTimeLimitExceeded",
    "Task",
    "TaskNotFound",
    "TaskqError",
    "__version__",
    "current_app",
    "current_job",
    "task",
]
