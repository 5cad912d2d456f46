"""Who may see the dashboard, and proof that a POST came from its own pages.

Access: with a token set (``TASKQ_DASHBOARD_TOKEN``), a request passes with
``Authorization: Bearer <token>`` or the login cookie that ``?token=<token>`` sets; with a
basic-auth pair, with those credentials; an embedding app's ``auth`` callable must also say
yes. Nothing set: everyone who can reach the port (which is why it binds to 127.0.0.1).

CSRF: a double-submit cookie. Every page sets a random ``taskq_csrf`` cookie (SameSite=Strict)
and puts the same value in each form; a POST passes only when both are there and equal. A
page on another site can make the browser send the cookie, but cannot read it to fill in
the form.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request

AuthHook = Callable[[Request], "bool | Awaitable[bool]"]
"""An embedding app's check: True lets the request in (it may be a coroutine function)."""

LOGIN_COOKIE = "taskq_login"
CSRF_COOKIE = "taskq_csrf"
CSRF_FIELD = "csrf"


def _digest(secret: str) -> str:
    """What the login cookie holds: never the token itself."""
    return hashlib.sha256(b"taskq-dashboard\0" + secret.encode()).hexdigest()


@dataclass(frozen=True)
class Access:
    """The dashboard's access settings.

    Attributes:
        token: a shared secret (bearer header, ``?token=`` login, cookie); None: not used.
        basic: ``user:password`` for HTTP basic auth; None: not used.
        hook: an embedding app's own check, on top of the others.
    """

    token: str | None = None
    basic: str | None = None
    hook: AuthHook | None = None

    @property
    def login_value(self) -> str:
        return _digest(self.token or "")

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def allows(self, request: Request) -> bool:
        """Whether ``request`` may see the dashboard."""
        if (self.token or self.basic) and not self._credentials(request):
            return False
        if self.hook is None:
            return True
        verdict = self.hook(request)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)

    def _credentials(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            if scheme.lower() == "bearer" and self.token_matches(value.strip()):
                return True
            cookie = request.cookies.get(LOGIN_COOKIE, "")
            if hmac.compare_digest(cookie.encode(), self.login_value.encode()):
                return True
        if self.basic is not None and scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return False
            return hmac.compare_digest(given.encode(), self.basic.encode())
        return False


def csrf_token(request: Request) -> str:
    """The page's CSRF token: the cookie's, or a new one (the response must set it)."""
    token = request.cookies.get(CSRF_COOKIE, "")
    return token if len(token) == 43 else secrets.token_urlsafe(32)


def csrf_ok(request: Request, submitted: str) -> bool:
    """Whether a POST's form field matches its cookie (both present)."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), submitted.encode())
