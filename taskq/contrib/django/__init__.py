"""taskq in a Django project (``pip install taskq[django]``; see docs/django.md).

- ``INSTALLED_APPS += ["taskq.contrib.django"]``: once Django is ready, the project's app is
  built from ``settings.TASKQ`` (over the ``TASKQ_*`` environment) and every installed app's
  ``tasks.py`` is imported.
- ``@taskq.contrib.django.task`` in those files declares a task with ``delay_on_commit``.
- ``taskq worker -A taskq.contrib.django`` (with ``DJANGO_SETTINGS_MODULE`` set) or
  ``manage.py taskq_worker`` runs them; database connections are closed per job as Django
  does per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskq.contrib.django.connections import DjangoConnections
from taskq.contrib.django.project import get_app, settings_from_django, taskq_settings
from taskq.contrib.django.task import DjangoApp, DjangoTask, task

if TYPE_CHECKING:
    app: DjangoApp
    """The project's app (:func:`get_app`), built on first access."""

__all__ = [
    "DjangoApp",
    "DjangoConnections",
    "DjangoTask",
    "app",
    "get_app",
    "settings_from_django",
    "task",
    "taskq_settings",
]


def __getattr__(name: str) -> Any:
    # ``taskq.contrib.django.app`` is built when first asked for, not at import: Django
    # imports this package while it sets up, before the settings may be read.
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
