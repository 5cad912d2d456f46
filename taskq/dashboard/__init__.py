"""The web dashboard (``taskq dashboard``, or mounted in an ASGI app): the figures of
``taskq inspect`` and the moves of ``taskq deadletter`` and ``taskq job``, in a browser.

Needs the ``taskq[dashboard]`` extra (Starlette, Jinja2, uvicorn); importing this package
does not, so ``import taskq`` and the CLI work without it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from taskq.errors import ConfigError

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from taskq.app import App
    from taskq.dashboard.security import AuthHook

INSTALL_HINT = "the dashboard needs its extra: pip install 'taskq[dashboard]'"


def require_extra() -> None:
    """Raises ConfigError (with the pip command) when the extra is not installed."""
    for module in ("starlette", "jinja2"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(INSTALL_HINT)


def asgi(
    app: App,
    *,
    prefix: str = "",
    read_only: bool = False,
    auth: AuthHook | None = None,
    token: str | None = None,
    basic_auth: str | None = None,
    secret: str | bytes | None = None,
) -> ASGIApp:
    """The dashboard of ``app``, to serve or to mount in an existing ASGI app.

    Args:
        prefix: the path its pages live under inside the returned app (``/taskq``: pages at
            ``/taskq/...``). Under Starlette's ``Mount("/taskq", ...)`` leave it empty: the
            mount's path is followed.
        read_only: hide the actions (retry, purge, cancel) and refuse their POSTs (403).
        auth: your app's check, called with each Starlette ``Request``; True lets it in (may
            be async).
        token: a shared secret: ``Authorization: Bearer <token>``, or ``?token=<token>``
            once, which sets a login cookie.
        basic_auth: ``user:password`` for HTTP basic auth (both non-empty).
        secret: the key of the pages' CSRF tokens and notices; by default a random one per
            process. Give the same one to every process that serves the dashboard behind one
            address (a page from one must be accepted by another).

    Raises:
        ConfigError: the ``dashboard`` extra is not installed, or ``basic_auth`` is malformed.
    """
    require_extra()
    from taskq.dashboard.app import build
    from taskq.dashboard.security import Access, new_secret

    key = secret.encode() if isinstance(secret, str) else secret
    access = Access(token or None, basic_auth or None, auth, key or new_secret())
    return build(app, prefix=prefix, read_only=read_only, access=access)


__all__ = ["INSTALL_HINT", "asgi", "require_extra"]
