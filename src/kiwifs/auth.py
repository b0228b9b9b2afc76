"""API-key authentication: which key protects a root, and whether a request carries it.

One rule for every interface that listens on a socket (REST and MCP over HTTP): with
``[auth] type = "apikey"`` (or a key given on the command line or in ``KIWIFS_API_KEY``) a request
must send ``Authorization: Bearer <key>``, compared in constant time. A configuration that asks
for a key but gives none fails closed: the server refuses to start.

A browser cannot send that header with every link it follows, so the web interface signs in once
with the key and then carries a *session token*: an expiry time and an HMAC-SHA256 of it keyed
with the API key. The token never contains the key, expires on its own, and every token stops
working when the key changes.

And one rule against web pages (:func:`check_browser`): a server on the user's machine is in reach
of every page the user's browser opens, key or no key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from urllib.parse import urlsplit

from .config import Config, check_auth_type
from .errors import ConfigError, Forbidden, Unauthorized

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


def key_matches(given: str, expected: str) -> bool:
    """``given == expected`` in constant time (no early exit that would time the key)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


SESSION_SECONDS = 12 * 3600
SESSION_COOKIE = "kiwifs_session"  # the web interface's cookie holding a session token
_SESSION_CONTEXT = b"kiwifs web session v1:"
_EXPIRES = re.compile(r"[0-9]{1,12}")


def _session_mac(api_key: str, expires: int) -> str:
    message = _SESSION_CONTEXT + str(expires).encode()
    return hmac.new(api_key.encode(), message, hashlib.sha256).hexdigest()


def session_token(api_key: str, now: float, lifetime: int = SESSION_SECONDS) -> str:
    """A session token valid for ``lifetime`` seconds from ``now``: ``<expires>.<hmac>``."""
    expires = int(now) + lifetime
    return f"{expires}.{_session_mac(api_key, expires)}"


def session_valid(token: str | None, api_key: str | None, now: float) -> bool:
    """True when no key is configured, or ``token`` was made with this key and has not
    expired (the MAC is compared in constant time)."""
    if api_key is None:
        return True
    if not token:
        return False
    expires_text, sep, mac = token.partition(".")
    # ASCII digits only: str.isdigit() also accepts "²", which int() then refuses (a 500)
    if not sep or _EXPIRES.fullmatch(expires_text) is None:
        return False
    expires = int(expires_text)
    if not key_matches(mac, _session_mac(api_key, expires)):
        return False
    return now < expires


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
