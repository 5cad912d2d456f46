"""The current app: the one shared tasks (``@taskq.task``) enqueue through.

Set explicitly, by :meth:`App.set_current` or by ``taskq worker`` for the app it runs; there
is no app made behind the user's back. Held here as a :class:`~taskq.protocols.Producer`
(what the tasks and workflows below the app need of it); :func:`taskq.current_app` returns
it as the ``App`` it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskq.errors import ConfigError

if TYPE_CHECKING:
    from taskq.protocols import Producer

_current: Producer | None = None


def current_producer() -> Producer:
    """The app set by :meth:`App.set_current` (``taskq worker`` sets the app it runs).

    Raises:
        ConfigError: no app was set.
    """
    if _current is None:
        raise ConfigError(
            "no current app: call app.set_current() once the app is configured "
            "(taskq worker does it for the app it runs)"
        )
    return _current


def set_current_app(app: Producer) -> None:
    global _current
    _current = app
