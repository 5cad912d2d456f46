"""taskq: a fast background task queue for Python on Redis Streams that never loses a job.

The package reads as the data flow: the producer core here (``app``, ``task``, ``message``,
``config``, ``keys``, ``errors``, ``context``), then ``broker/`` (all Redis I/O), ``worker/``
(the prefork pool and what happens to each job), ``job`` and ``results`` (the handle, and
the status records it reads), ``ops/`` (inspect, dead letters, metrics,
the dev server) and ``cli/`` (the ``taskq`` command). See docs/architecture.md.

``import taskq`` loads only the error tree: every other public name is imported from its
module on first use (``LAZY`` below), so a process that only needs ``taskq.__version__`` or
an error class, the ``taskq`` command's start-up included, does not pay for redis-py.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

__version__ = "0.1.0"

from taskq.errors import (
    BrokerError,
    BrokerRefused,
    BrokerUnavailable,
    ChunkTooLarge,
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

if TYPE_CHECKING:  # what mypy and editors see; at run time LAZY loads the same names
    from taskq.app import App, current_app, task
    from taskq.canvas import Chain, Chord, Group, Signature, chain, chord, group
    from taskq.checkpoint import CheckpointError
    from taskq.config import Settings
    from taskq.context import JobContext, current_job
    from taskq.deadletter import Deadletter
    from taskq.fairview import FairKey
    from taskq.job import Flow, Job
    from taskq.middleware import Middleware
    from taskq.ops.deadletters import Deadletters
    from taskq.results import JobStatus
    from taskq.resumable import astep, iterate, step
    from taskq.task import Task

# A public name → the module that defines it. To export a name, add it here, to the
# TYPE_CHECKING imports above and to __all__ (tests/unit/test_lazy_imports.py checks the three
# agree).
LAZY: dict[str, str] = {
    "App": "taskq.app",
    "current_app": "taskq.app",
    "task": "taskq.app",
    "Chain": "taskq.canvas",
    "Chord": "taskq.canvas",
    "Group": "taskq.canvas",
    "Signature": "taskq.canvas",
    "chain": "taskq.canvas",
    "chord": "taskq.canvas",
    "group": "taskq.canvas",
    "CheckpointError": "taskq.checkpoint",
    "Settings": "taskq.config",
    "JobContext": "taskq.context",
    "current_job": "taskq.context",
    "Deadletter": "taskq.deadletter",
    "FairKey": "taskq.fairview",
    "Flow": "taskq.job",
    "Job": "taskq.job",
    "Middleware": "taskq.middleware",
    "Deadletters": "taskq.ops.deadletters",
    "JobStatus": "taskq.results",
    "astep": "taskq.resumable",
    "iterate": "taskq.resumable",
    "step": "taskq.resumable",
    "Task": "taskq.task",
}


def __getattr__(name: str) -> object:
    """Loads a public name from its module on first use and keeps it in the package."""
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taskq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY})


class _Package(types.ModuleType):
    """The package keeps its public names when a submodule of the same name loads (the
    import system binds a loaded submodule on its package: ``taskq.task`` stays the
    decorator, as it was when this file imported every name)."""

    def __setattr__(self, name: str, value: object) -> None:
        if not (name in LAZY and isinstance(value, types.ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    # the app and its tasks
    "App",
    # errors
    "BrokerError",
    "BrokerRefused",
    "BrokerUnavailable",
    # workflows
    "Chain",
    "CheckpointError",
    "Chord",
    "ChunkTooLarge",
    "ConfigError",
    # hooks and operations
    "Deadletter",
    "Deadletters",
    "DecodeError",
    "EnqueueError",
    "FairKey",
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
    "astep",
    "chain",
    "chord",
    "current_app",
    "current_job",
    "group",
    "iterate",
    "step",
    "task",
]
