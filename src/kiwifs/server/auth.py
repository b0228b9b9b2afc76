"""API-key authentication: which key protects a root, and whether a request carries it.

One rule for every interface that listens on a socket (REST and MCP over HTTP): with
``[auth] type = "apikey"`` (or a key given on the command line or in ``KIWIFS_API_KEY``) a request
must send ``Authorization: Bearer <key>``, compared in constant time. A configuration that asks
for a key but gives none fails closed: the server refuses to start.

A browser cannot send that header with every link it follows, so the web interface signs in once
with the key and then carries a *session token* (:class:`Sessions`): random, held by the server
until it expires or the user signs out. Failed sign-ins are rate-limited per client address
(:class:`LoginLimiter`).

And one rule against web pages (:func:`check_browser`): a server on the user's machine is in reach
of every page the user's browser opens, key or no key.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

from kiwifs.config import Config, check_auth_type
from kiwifs.errors import ConfigError, Forbidden, TooManyRequests, Unauthorized
from kiwifs.server.grants import Grant

BEARER = "Bearer "
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def api_key_for(config: Config, override: str | None = None) -> str | None:
    """The key in force: ``override`` (flag or environment), else the config's, else none.

    An ``[auth] type`` kiwifs does not implement is a :class:`ConfigError` even with a key
    given: the server must not start believing it enforces rules it does not.
    """
    auth = config.auth
    check_auth_type(auth)
    if override:
        return override
    if auth.type.strip().lower() != "apikey":
        return None
    if not auth.api_key:
        raise ConfigError('[auth] type = "apikey" needs api_key (or --api-key / KIWIFS_API_KEY)')
    return auth.api_key


def check_bearer(authorization: str | None, api_key: str | None) -> None:
    """Raise :class:`Unauthorized` unless ``authorization`` is ``Bearer <api_key>``.

    No key configured means the interface is open.
    """
    if api_key is None:
        return
    if not key_matches(authorization or "", BEARER + api_key):
        raise Unauthorized("invalid API key")


def bearer_key(authorization: str | None) -> str | None:
    """The key of ``Authorization: Bearer KEY`` (``None``: no such header); what a node passes
    on to another as its own (a replica space made with its creator's key, a demotion)."""
    if authorization and authorization[: len(BEARER)].lower() == BEARER.lower():
        return authorization[len(BEARER) :].strip() or None
    return None


def key_matches(given: str, expected: str) -> bool:
    """``given == expected`` in constant time (no early exit that would time the key)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


SESSION_SECONDS = 12 * 3600
SESSION_COOKIE = "kiwifs_session"  # the web interface's cookie holding a session token
SPACE_COOKIE = "kiwifs_space"  # the space the web pages show (the picker's choice)
MAX_SESSIONS = 1000  # sessions one server holds; past it, the oldest is signed out
LOGIN_ATTEMPTS = 5  # failed sign-ins a client address may make…
LOGIN_WINDOW = 60.0  # …within this many seconds, before it must wait
MAX_LOGIN_CLIENTS = 10_000  # addresses whose failures are remembered at once

Clock = Callable[[], float]


class Sessions:
    """The web interface's sessions of one server, held in its memory.

    A session token is 32 random bytes (URL-safe), not derived from the key, so it never reveals
    it. The server keeps each token's SHA-256 (a lookup that cannot be timed against the token)
    and its expiry: signing out removes it, so a copied cookie stops working at once; a restart
    or a new key signs everyone out. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        api_key: str | None,
        clock: Clock = time.time,
        lifetime: int = SESSION_SECONDS,
        most: int = MAX_SESSIONS,
        keyed: bool | None = None,
    ) -> None:
        self.api_key = api_key
        # scoped keys have no one key, yet sessions are needed: ``keyed`` says so
        self.keyed = api_key is not None if keyed is None else keyed
        self.lifetime = lifetime
        self._clock = clock
        self._most = most
        self._expiry: dict[bytes, float] = {}  # token digest → expiry, oldest first
        self._grants: dict[bytes, Grant] = {}  # token digest → the grant it signed in with
        self._lock = threading.Lock()

    def start(self, grant: Grant | None = None) -> str:
        """A new session's token, valid for ``lifetime`` seconds; ``grant``: what the key it
        signed in with may do (scoped keys), which :meth:`grant` gives back."""
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._forget_expired(now)
            while len(self._expiry) >= self._most:
                oldest = next(iter(self._expiry))
                del self._expiry[oldest]
                self._grants.pop(oldest, None)
            self._expiry[_digest(token)] = now + self.lifetime
            if grant is not None:
                self._grants[_digest(token)] = grant
        return token

    def grant(self, token: str | None) -> Grant | None:
        """The grant a valid session signed in with (``None``: none recorded, or no session)."""
        if not token or not self.valid(token):
            return None
        with self._lock:
            return self._grants.get(_digest(token))

    def valid(self, token: str | None) -> bool:
        """True when no key is configured, or ``token`` is a session of this server that has
        neither expired nor been ended. Any other value (malformed included) is not."""
        if not self.keyed:
            return True
        if not token:
            return False
        with self._lock:
            expires = self._expiry.get(_digest(token))
        return expires is not None and self._clock() < expires

    def end(self, token: str | None) -> None:
        """Sign the session out: its token is refused from now on."""
        if token:
            with self._lock:
                self._expiry.pop(_digest(token), None)
                self._grants.pop(_digest(token), None)

    def _forget_expired(self, now: float) -> None:
        for digest in [d for d, expires in self._expiry.items() if expires <= now]:
            del self._expiry[digest]
            self._grants.pop(digest, None)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class LoginLimiter:
    """At most ``attempts`` failed sign-ins per client address within ``window`` seconds.

    Guessing the key through the login form would otherwise be as fast as the server answers.
    Past the limit the address is refused — a right key included, so guessing does not go on —
    until its oldest failure leaves the window. A successful sign-in clears the address. At most
    ``most`` addresses are remembered (the oldest forgotten first), so a flood of addresses
    cannot exhaust memory. ``clock`` (monotonic seconds) is injectable for tests.
    """

    def __init__(
        self,
        attempts: int = LOGIN_ATTEMPTS,
        window: float = LOGIN_WINDOW,
        clock: Clock = time.monotonic,
        most: int = MAX_LOGIN_CLIENTS,
    ) -> None:
        self.attempts = attempts
        self.window = window
        self._clock = clock
        self._most = most
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Raise :class:`TooManyRequests` while ``client`` is over the limit."""
        now = self._clock()
        with self._lock:
            failures = self._recent(client, now)
            if len(failures) < self.attempts:
                return
            wait = failures[0] + self.window - now
        raise TooManyRequests(
            f"too many failed sign-ins from this address: try again in {math.ceil(wait)} s",
            retry_after=max(1, math.ceil(wait)),
        )

    def failed(self, client: str) -> None:
        now = self._clock()
        with self._lock:
            failures = self._recent(client, now)
            failures.append(now)
            self._failures.pop(client, None)
            self._failures[client] = failures  # the most recent address last
            while len(self._failures) > self._most:
                del self._failures[next(iter(self._failures))]

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def _recent(self, client: str, now: float) -> deque[float]:
        failures = self._failures.get(client, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures


def check_browser(host: str | None, origin: str | None, loopback: bool) -> None:
    """Raise :class:`Forbidden` for a request that only a web page of another site would send.

    A page can send a ``text/plain`` POST to ``http://127.0.0.1:3333`` without asking (no CORS
    preflight), and a page whose domain re-resolves to 127.0.0.1 (DNS rebinding) can even read
    the answers. Browsers name the page's origin in ``Origin`` (on every cross-origin request and
    every same-origin write) and the name they dialled in ``Host``; agents, scripts and curl send
    no ``Origin``. So: an ``Origin`` that is not this server (the ``Host`` dialled) is refused,
    and on a loopback bind (``loopback``) so is a ``Host`` that is not a loopback name.
    """
    authority = (host or "").strip().lower()
    if loopback and _hostname(authority) not in LOOPBACK_HOSTS:
        raise Forbidden(f"request refused: {host!r} is not a loopback name of this server")
    if origin is not None and urlsplit(origin.strip().lower()).netloc != authority:
        raise Forbidden(f"cross-origin request refused (Origin {origin!r})")


def _hostname(authority: str) -> str:
    """``host`` of a ``host[:port]`` authority (``[::1]:3333`` → ``::1``)."""
    try:
        return urlsplit(f"//{authority}").hostname or ""
    except ValueError:  # a malformed IPv6 literal
        return ""
