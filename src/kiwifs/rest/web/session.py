"""Signing in to the web interface: the session cookie, the login form, the page guard.

With an API key configured every page, fragment and event stream needs a session: the login page
takes the key (POST, checked in constant time by :func:`kiwifs.server.auth.key_matches`) and sets an
``HttpOnly; SameSite=Strict`` cookie holding a session token (:class:`kiwifs.server.auth.Sessions`:
random, held by the server until it expires or the user signs out). Failed sign-ins are limited
per client address (:class:`kiwifs.server.auth.LoginLimiter`). Without a session a page redirects to
``/login?next=<page>``; a fragment or the event stream answers 401. The strict SameSite cookie is
never sent with a request started by another site, and the login form also refuses a POST whose
``Origin`` is another site (login CSRF).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from kiwifs.config import DEFAULT_SPACE
from kiwifs.errors import Forbidden, Unauthorized, UnknownSpace, UsageError
from kiwifs.rest.http import read_body
from kiwifs.server.access import EVERYTHING, SPACE_KEY, Gate, reachable, reaches
from kiwifs.server.auth import SESSION_COOKIE, SPACE_COOKIE, LoginLimiter, Sessions
from kiwifs.server.grants import Grant

COOKIE = SESSION_COOKIE
MAX_FORM_BYTES = 8 * 1024


class LoginRequired(Exception):
    """A page was asked for without a session: the handler redirects to the login page."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


class WebAuth:
    """The session rules for one server (a gate with no keys: the interface is open).

    With scoped keys, a key with no prefix signs in (:meth:`kiwifs.server.access.Gate.sign_in`:
    the pages show a whole space, which a prefixed key may not see), and its session shows the
    spaces the key reaches, one at a time: another space's pages are 403. ``spaces``: the names
    of the server's spaces, for the picker (``None``: a server of one root).
    """

    def __init__(
        self,
        gate: Gate,
        sessions: Sessions,
        limiter: LoginLimiter | None = None,
        spaces: Callable[[], list[str]] | None = None,
    ) -> None:
        self.gate = gate
        self.sessions = sessions
        self.limiter = limiter or LoginLimiter()
        self.spaces = spaces

    @property
    def enabled(self) -> bool:
        return self.gate.keyed

    def signed_in(self, request: Request) -> bool:
        return self.sessions.valid(request.cookies.get(COOKIE))

    def grant(self, request: Request) -> Grant:
        """What the request's session may see: its key's grant (every space, with no auth or
        one server key)."""
        return self.sessions.grant(request.cookies.get(COOKIE)) or EVERYTHING

    def reachable(self, request: Request) -> list[str]:
        """The spaces the picker offers: those the session's key reaches."""
        if self.spaces is None:
            return []
        return reachable(self.grant(request), self.spaces())

    async def page(self, request: Request) -> None:
        """Dependency of every page: no session → :class:`LoginRequired`; a session whose key
        does not reach the page's space → :class:`Forbidden`."""
        if not self.signed_in(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise LoginRequired(target)
        self._check_space(request)

    async def fragment(self, request: Request) -> None:
        """Dependency of the JSON fragment and the event stream: no session → 401, another
        space's → 403."""
        if not self.signed_in(request):
            raise Unauthorized("sign in at /login first")
        self._check_space(request)

    def _check_space(self, request: Request) -> None:
        space = space_of(request)
        if not reaches(self.grant(request), space):
            raise Forbidden(f"this key does not reach space {space}")

    def sign_in(self, request: Request, given: str) -> Grant | None:
        """The grant of ``given`` if the pages may be signed in to with it, counted against the
        client's failed attempts: raises :class:`~kiwifs.errors.TooManyRequests` (before
        looking at the key) past the limit."""
        client = client_address(request)
        self.limiter.check(client)
        found = self.gate.sign_in(given) if self.gate.keyed else None
        if found is not None:
            self.limiter.succeeded(client)
            return found
        self.limiter.failed(client)
        return None

    def start_session(self, response: Response, request: Request, grant: Grant) -> None:
        response.set_cookie(
            COOKIE,
            self.sessions.start(grant),
            max_age=self.sessions.lifetime,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def choose_space(self, response: Response, request: Request, name: str) -> None:
        """Show space ``name`` from now on (the picker): :class:`Forbidden` unless the session's
        key reaches it, :class:`~kiwifs.errors.UnknownSpace` unless there is one."""
        if not reaches(self.grant(request), name):
            raise Forbidden(f"this key does not reach space {name}")
        if self.spaces is None or name not in self.spaces():
            raise UnknownSpace(name)
        self.show_space(response, request, name)

    def show_space(self, response: Response, request: Request, name: str) -> None:
        """Set the cookie the spaces' dispatcher routes the pages by."""
        response.set_cookie(
            SPACE_COOKIE,
            name,
            max_age=self.sessions.lifetime,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def end_session(self, response: Response, request: Request) -> None:
        """Sign out: the server forgets the session (a copy of the cookie no longer works) and
        the browser is told to drop the cookie."""
        self.sessions.end(request.cookies.get(COOKIE))
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")


def space_of(request: Request) -> str:
    """The space a request is for, as the spaces' dispatcher named it."""
    return str(request.scope.get(SPACE_KEY, DEFAULT_SPACE))


def client_address(request: Request) -> str:
    """The address failed sign-ins are counted by (behind a proxy: the proxy's)."""
    return request.client.host if request.client else "unknown"


def login_redirect(target: str) -> RedirectResponse:
    return RedirectResponse("/login?next=" + quote(target, safe="/"), status_code=303)


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this site only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    return target


def same_origin(request: Request) -> bool:
    """False when the browser says the form was posted from another site."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return urlsplit(origin).netloc == host


async def read_form(request: Request) -> dict[str, str]:
    """A small ``application/x-www-form-urlencoded`` body (the login form)."""
    body = await read_body(request, MAX_FORM_BYTES, "form too large")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=10)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError("invalid form") from exc
    return {k: v[0] for k, v in fields.items()}
