"""The project's app: built once from ``settings.TASKQ``, with every installed app's tasks.

``settings.TASKQ`` wins over the ``TASKQ_*`` environment, as arguments given to
:class:`taskq.App` do: what the project's code says is not silently changed by a variable
left in a shell. A setting the dict leaves out comes from the environment (then from the
default), and a settings.py that wants the environment to decide reads it there
(``"redis_url": os.environ["REDIS_URL"]``), as Django projects do for their databases.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import django
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from taskq.config import Settings
from taskq.contrib.django.connections import DjangoConnections
from taskq.contrib.django.task import DjangoApp
from taskq.errors import ConfigError

KNOWN = frozenset(f.name for f in fields(Settings))


def taskq_settings(config: Any, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``config`` (``settings.TASKQ``: setting names, in lower or upper case,
    to values; None means "not set") over the ``TASKQ_*`` variables of ``env``.

    Raises:
        ConfigError: ``config`` is not a mapping, or names an unknown setting.
    """
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"settings.TASKQ must be a dict, not {type(config).__name__}")
    values = {str(k).lower(): v for k, v in config.items()}
    unknown = sorted(set(values) - KNOWN)
    if unknown:
        raise ConfigError(
            f"settings.TASKQ: unknown setting(s) {', '.join(unknown)}; known: {sorted(KNOWN)}"
        )
    return Settings.from_env(env, **values)


def settings_from_django() -> Settings:
    """:func:`taskq_settings` of this project's ``settings.TASKQ`` and ``os.environ``."""
    return taskq_settings(getattr(settings, "TASKQ", None))


class _State:
    lock = threading.RLock()  # re-entered: setup runs ready(), which calls get_app()
    app: DjangoApp | None = None
    discovery = "no"  # "running" while the tasks modules import (they may call get_app())


def get_app() -> DjangoApp:
    """The project's app: Django set up first if it is not (``DJANGO_SETTINGS_MODULE``),
    the app built once from :func:`settings_from_django` with :class:`DjangoConnections`
    and made the current app (shared tasks enqueue through it), then every installed app's
    ``tasks`` module imported (once the models are loaded).

    Raises:
        ConfigError: Django is not configured, or ``settings.TASKQ`` is invalid.
    """
    with _State.lock:
        if _State.app is None:
            setup_django()  # may build the app already, through TaskqConfig.ready()
        if _State.app is None:
            app = DjangoApp(settings=settings_from_django())
            app.add_middleware(DjangoConnections())
            app.set_current()
            _State.app = app
        if _State.discovery == "no" and models_ready():
            _State.discovery = "running"
            try:
                discover_tasks()
            except BaseException:
                _State.discovery = "no"
                raise
            _State.discovery = "done"
        assert _State.app is not None
        return _State.app


def setup_django() -> None:
    """``django.setup()``, unless Django is set up or setting up (then it calls us)."""
    if apps.ready or apps.loading:
        return
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ConfigError(
            "Django is not configured: set DJANGO_SETTINGS_MODULE (e.g. mysite.settings), "
            "or start the worker with manage.py taskq_worker"
        )
    try:
        django.setup()
    except (ImproperlyConfigured, ImportError) as exc:
        raise ConfigError(f"setting Django up failed: {type(exc).__name__}: {exc}") from exc


def models_ready() -> bool:
    return apps.models_ready


def discover_tasks() -> None:
    """Import the ``tasks`` module of every installed app that has one (an error inside
    one is raised, not hidden), as Celery's ``autodiscover_tasks()`` does."""
    autodiscover_modules("tasks")
