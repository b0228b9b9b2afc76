"""API-key authentication: which key protects a root, and whether a request carries it.

One rule for every interface that listens on a socket (REST and MCP over HTTP): with
``[auth] type = "apikey"`` (or a key given on the command line or in ``KIWIFS_API_KEY``) a request
must send ``Authorization: Bearer <key>``, compared in constant time. A configuration that asks
for a key but gives none fails closed: the server refuses to start.
"""

from __future__ import annotations

import hmac

from .config import Config
from .errors import ConfigError, Unauthorized

BEARER = "Bearer "


def api_key_for(config: Config, override: str | None = None) -> str | None:
    """The key in force: ``override`` (flag or environment), else the config's, else none."""
    if override:
        return override
    auth = config.auth
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
    given = (authorization or "").encode()
    if not hmac.compare_digest(given, (BEARER + api_key).encode()):
        raise Unauthorized("invalid API key")
