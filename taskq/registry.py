"""Tasks by name: the lookup a worker does for every job (an app's own, then shared ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskq.errors import TaskNotFound

if TYPE_CHECKING:
    from taskq.task import Task


class Registry:
    """Tasks by registered name."""

    def __init__(self, fallback: Registry | None = None) -> None:
        self.tasks: dict[str, Task[..., Any]] = {}
        self.fallback = fallback

    def add(self, task: Task[..., Any]) -> None:
        self.tasks[task.name] = task

    def get(self, name: str) -> Task[..., Any]:
        """The task registered under ``name`` here, else in the fallback registry.

        Raises:
            TaskNotFound: neither has it.
        """
        found = self.tasks.get(name)
        if found is None and self.fallback is not None:
            found = self.fallback.tasks.get(name)
        if found is None:
            raise TaskNotFound(f"no task named {name!r} is registered")
        return found

    def names(self) -> list[str]:
        own = set(self.tasks)
        return sorted(own | set(self.fallback.tasks) if self.fallback else own)


SHARED = Registry()
"""Tasks declared with ``@taskq.task``: every app can run them."""
