"""The Django app of taskq: ``INSTALLED_APPS = [..., "taskq.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig

from taskq.contrib.django.project import get_app


class TaskqConfig(AppConfig):
    """Builds the project's app once Django is ready (its settings checked at startup, its
    tasks modules imported), so that every process of the project can enqueue."""

    name = "taskq.contrib.django"
    label = "taskq"
    verbose_name = "taskq"

    def ready(self) -> None:
        get_app()
