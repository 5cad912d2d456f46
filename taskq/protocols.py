"""What the producer's lower modules need of an app and of a task, as small Protocols.

``App`` is the façade at the top: it imports the enqueue steps, the workflows and the
handles, so none of them may import it back. Each names what it uses here instead, and
:class:`~taskq.App` and :class:`~taskq.Task` satisfy these Protocols structurally (mypy
checks that where an app or a task is handed down).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from taskq.job import HandleApp

if TYPE_CHECKING:
    from taskq.argspec import ArgSpec
    from taskq.job import Flow, Job
    from taskq.message import Message
    from taskq.middleware import Middleware
    from taskq.options import TaskOptions


class Producer(HandleApp, Protocol):
    """What enqueue steps, workflows, tasks and eager mode need of an app: a handle's needs,
    the middleware, encoding and sending jobs, starting workflows and finding tasks."""

    @property
    def middleware(self) -> list[Middleware]: ...

    def encode(self, msg: Message) -> bytes: ...

    def enqueue(self, msg: Message, *, in_ms: int | None = None) -> Job: ...

    async def aenqueue(self, msg: Message, *, in_ms: int | None = None) -> Job: ...

    def enqueue_many(self, messages: Iterable[Message]) -> list[Job]: ...

    # The workflow is typed Any: its type (taskq.canvas.Workflow) sits above this module,
    # and App.launch, which checks it, is what users call.
    def launch(self, workflow: Any, /) -> Flow: ...

    async def alaunch(self, workflow: Any, /) -> Flow: ...

    def get_task(self, name: str, /) -> TaskLike: ...

    # Handles from an id, which users reach through a task (``my_task.app.job(job_id)``).
    def job(self, job_id: str, *, queue: str | None = None) -> Job: ...

    def flow(self, flow_id: str, *, queue: str | None = None) -> Flow | None: ...


class TaskLike(Protocol):
    """What signatures, workflows, uniqueness and eager mode need of a task."""

    @property
    def name(self) -> str: ...

    @property
    def fn(self) -> Callable[..., Any]: ...

    @property
    def options(self) -> TaskOptions: ...

    @property
    def is_async(self) -> bool: ...

    @property
    def app(self) -> Producer: ...

    @property
    def spec(self) -> ArgSpec: ...

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    def message(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        priority: str | None = None,
        eta_ms: int | None = None,
        queue: str | None = None,
        partition_key: str | None = None,
        fair_key: str | None = None,
    ) -> Message: ...
