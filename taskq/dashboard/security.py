"""Who may see the dashboard, and proof that a POST came from its own pages.

Access: with a token set (``TASKQ_DASHBOARD_TOKEN``), a request passes with
``Authorization: Bearer <token>`` or the login cookie that ``?token=<token>`` sets; with a
basic-auth pair, with those credentials; an embedding app's ``auth`` callable must also say
yes. Nothing set: everyone who can reach the port (which is why it binds to 127.0.0.1).

CSRF, two checks on every POST:

- the form's token must be the HMAC, under this dashboard's secret, of the browser's random
  ``taskq_session`` cookie and the credentials the request carries. A page on another port
  of the same host can set cookies (cookies do not tell ports apart) but cannot compute the
  token, nor read it from a page;
- a browser must say the request comes from the dashboard's own origin: ``Sec-Fetch-Site:
  same-origin``, or without that header, an ``Origin`` equal to the request's host. A
  request with neither header is not a browser's (browsers send ``Origin`` with every POST):
  the token alone decides.

The same secret signs the one-line notices an action redirects to, so a link cannot make a
page show text of its author's choosing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from taskq.errors import ConfigError

AuthHook = Callable[[Request], "bool | Awaitable[bool]"]
"""An embedding app's check: True lets the request in (it may be a coroutine function)."""

LOGIN_COOKIE = "taskq_login"
SESSION_COOKIE = "taskq_session"
CSRF_FIELD = "csrf"
SESSION_CHARS = 43
"""A session id: 32 random bytes, URL-safe base64 without padding."""


def _digest(secret: str) -> str:
    """What the login cookie holds: never the token itself."""
    return hashlib.sha256(b"taskq-dashboard\0" + secret.encode()).hexdigest()


def check_basic_auth(pair: str) -> None:
    """Raises ConfigError unless ``pair`` is ``user:password`` with both parts non-empty."""
    user, sep, password = pair.partition(":")
    if not (sep and user and password):
        raise ConfigError("basic auth: expected USER:PASSWORD, both non-empty")


def new_secret() -> bytes:
    return secrets.token_bytes(32)


@dataclass(frozen=True)
class Access:
    """The dashboard's access settings.

    Attributes:
        token: a shared secret (bearer header, ``?token=`` login, cookie); None: not used.
        basic: ``user:password`` for HTTP basic auth; None: not used.
        hook: an embedding app's own check, on top of the others.
        secret: the key of the CSRF tokens and signed notices; random per process unless
            given (several processes serving one dashboard must share it).
    """

    token: str | None = None
    basic: str | None = None
    hook: AuthHook | None = None
    secret: bytes = field(default_factory=new_secret, repr=False)

    def __post_init__(self) -> None:
        if self.basic is not None:
            check_basic_auth(self.basic)

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
            return self.basic_user(request) is not None
        return False

    def basic_user(self, request: Request) -> str | None:
        """The user of the request's HTTP basic credentials, if they are the right ones."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if self.basic is None or scheme.lower() != "basic":
            return None
        try:
            given = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        right = hmac.compare_digest(given.encode(), self.basic.encode())
        return self.basic.partition(":")[0] if right else None

    def sign(self, purpose: str, text: str) -> str:
        """An HMAC of ``text`` for one ``purpose`` (so a signature made for one use is
        worthless for another)."""
        message = purpose.encode() + b"\0" + text.encode("utf-8", "surrogatepass")
        mac = hmac.new(self.secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def signed(self, purpose: str, text: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(purpose, text).encode(), signature.encode())


def session_of(request: Request) -> str:
    """The browser's session id: its cookie's, or a new one (the response must set it)."""
    session = request.cookies.get(SESSION_COOKIE, "")
    return session if len(session) == SESSION_CHARS else secrets.token_urlsafe(32)


def _bound_to(request: Request, session: str) -> str:
    """What a CSRF token is bound to: the session and the credentials the request carries."""
    credentials = request.headers.get("authorization") or request.cookies.get(LOGIN_COOKIE, "")
    return session + "\0" + hashlib.sha256(credentials.encode()).hexdigest()


def csrf_token(access: Access, request: Request, session: str) -> str:
    """The token the forms of a page for ``session`` carry."""
    return access.sign("csrf", _bound_to(request, session))


def csrf_ok(access: Access, request: Request, submitted: str) -> bool:
    """Whether a POST's form token was made for its session cookie and credentials."""
    session = request.cookies.get(SESSION_COOKIE, "")
    return bool(session) and access.signed("csrf", _bound_to(request, session), submitted)


def same_origin(request: Request) -> bool:
    """Whether the browser that sent ``request`` says it comes from the dashboard's origin
    (see the module's docstring); True for a client that sends neither header."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "").lower()
    return bool(host) and origin.lower() in (f"http://{host}", f"https://{host}")


def user_of(access: Access, request: Request) -> str:
    """Who acts, for the audit trail: the HTTP basic user (once the request passed the
    check), an embedding app's authenticated user (Starlette's ``request.user``), else
    ``dashboard`` (a token names no one)."""
    basic = access.basic_user(request)
    if basic is not None:
        return basic
    user = request.scope.get("user")
    if getattr(user, "is_authenticated", False):
        return str(getattr(user, "display_name", "") or "dashboard")[:200]
    return "dashboard"
