"""Who may do what on a server: a request's key turned into a grant, and the one decision every
interface asks of it (allow, 401 or 403).

Three kinds of server, one shape (:class:`Gate`): with no auth every request carries an admin
grant for every space; with ``[auth] type = "apikey"`` the one key carries that grant; with
``"perspace"`` each key carries its own (:mod:`kiwifs.server.keys`). So REST, MCP over HTTP and
the web pages ask the same two questions and nothing else:

* :meth:`Gate.grant`: which grant does this ``Authorization`` header carry? None valid → 401.
* :func:`decide`: may that grant act on this space at this scope? No → 403, with a message that
  names only what the request itself named (a key bound to space ``a`` asking for ``b`` learns
  nothing of whether ``b`` exists).

And the prefix rules an answer needs (:func:`check_path`, :func:`listing_prefix`,
:func:`answer_prefix`, :func:`refuse_prefixed`), so that no adapter carries a copy of them.
Which scope a route needs is :func:`needed_scope`, by method and path, in one table.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kiwifs.config import Config
from kiwifs.errors import ConfigError, Forbidden, Unauthorized
from kiwifs.server.auth import BEARER, api_key_for, key_matches
from kiwifs.server.grants import Grant, Scope, allows, narrowed_prefix, path_allowed
from kiwifs.server.keys import PERSPACE, Keyring
from kiwifs.writes.events import Event

GRANT_KEY = "kiwifs.grant"  # where an ASGI request's grant is kept, once found
SPACE_KEY = "kiwifs.space"  # where the spaces' dispatcher names the request's space
EVERYTHING = Grant(None, Scope.ADMIN, origin="the server's key")
INVALID = "invalid API key"
SPACES_PATH = "/api/spaces"
REPLICATION_PATH = "/api/replication"
# POST routes that only read: everything else but GET and HEAD changes something (a git
# fetch's upload-pack request is its wants and haves: kiwifs.git.smarthttp)
READ_POSTS = frozenset({"/api/kiwi/search/semantic", "/api/kiwi/git/git-upload-pack"})
MCP_PATH = "/mcp"


class Gate:
    """The credentials a server accepts and the grant each carries.

    ``api_key``: the one key of ``apikey`` mode (``None``: none). ``keyring``: the scoped keys of
    ``perspace`` mode. Neither: the server is open and every request is admin everywhere.
    """

    def __init__(self, api_key: str | None = None, keyring: Keyring | None = None) -> None:
        self.api_key = api_key
        self.keyring = keyring

    @classmethod
    def of(cls, config: Config, root: Path, override: str | None = None) -> Gate:
        """The gate of a server whose default root is ``root``. ``perspace`` reads the keys of
        ``root`` (its ``[[auth.api_keys]]`` and stored tokens); a key given on the command line
        or in the environment as well is refused, since one of the two would silently lose."""
        key = api_key_for(config, override)
        if config.auth.type.strip().lower() != PERSPACE:
            return cls(key)
        if override:
            raise ConfigError(
                '[auth] type = "perspace" takes its keys from [[auth.api_keys]] and '
                "kiwifs token; --api-key / KIWIFS_API_KEY cannot be used with it"
            )
        return cls(None, Keyring.open(root))

    @property
    def keyed(self) -> bool:
        """Whether requests need a key at all."""
        return self.api_key is not None or self.keyring is not None

    @property
    def scoped(self) -> bool:
        return self.keyring is not None

    def grant(self, authorization: str | None) -> Grant:
        """The grant ``Authorization: Bearer <key>`` carries; :class:`Unauthorized` without one.

        The same message for a missing header, a malformed one and an unknown key, so a caller
        learns only that it is not let in."""
        if not self.keyed:
            return EVERYTHING
        header = authorization or ""
        if self.keyring is not None:
            found = self.keyring.resolve(header[len(BEARER) :]) if header[:7] == BEARER else None
            if found is None:
                raise Unauthorized(INVALID)
            return found
        assert self.api_key is not None
        if not key_matches(header, BEARER + self.api_key):
            raise Unauthorized(INVALID)
        return EVERYTHING

    def sign_in(self, key: str) -> Grant | None:
        """The grant the web pages may be signed in to with ``key`` (``None``: refused): a key
        with no prefix (the pages show a whole space: its tree, report, search and history,
        which a prefix could not be honoured in). Which spaces it then shows is
        :func:`reaches`'s answer, page by page."""
        try:
            found = self.grant(BEARER + key)
        except Unauthorized:
            return None
        return found if found.prefix is None else None

    def reload(self) -> int:
        """Read the scoped keys again (a running server's SIGHUP); 0 when there are none."""
        return self.keyring.reload() if self.keyring is not None else 0


def reaches(grant: Grant, space: str) -> bool:
    """Whether ``grant`` reaches ``space`` at all (any scope)."""
    return grant.space is None or grant.space == space


def decide(grant: Grant, space: str, needed: Scope) -> None:
    """Raise :class:`Forbidden` unless ``grant`` may act on ``space`` at ``needed``."""
    if not reaches(grant, space):
        raise Forbidden(f"this key does not reach space {space}")
    if not allows(grant, space, needed):
        raise Forbidden(f"this key's scope is {grant.scope}; this request needs {needed}")


def check_request(grant: Grant, space: str, method: str, path: str) -> None:
    """Raise :class:`Forbidden` unless ``grant`` may make this request (``method`` on ``path``,
    in ``space``). The spaces' routes are the server's, not a space's: there only the scope is
    checked here, and each route checks the space it names (a listing shows only those the key
    reaches)."""
    needed = needed_scope(method, path)
    if path == SPACES_PATH or path.startswith(SPACES_PATH + "/"):
        space = grant.space or space
    decide(grant, space, needed)


def reachable(grant: Grant, names: Iterable[str]) -> list[str]:
    """The ``names`` of spaces ``grant`` reaches: a listing shows no other."""
    return [name for name in names if reaches(grant, name)]


def needed_scope(method: str, path: str) -> Scope:
    """The scope a request needs: ``admin`` for the spaces' routes, ``read`` for GET and HEAD
    (and the POSTs that only read) and for ``/mcp``, whose tool calls are checked one by one
    (:func:`tool_call`), ``write`` for everything else."""
    if path == SPACES_PATH or path.startswith(SPACES_PATH + "/"):
        return Scope.ADMIN
    if path == REPLICATION_PATH + "/ack":
        return Scope.WRITE  # a replica reporting what it holds (promote, demote: admin)
    if path.startswith(REPLICATION_PATH + "/") and method not in ("GET", "HEAD"):
        return Scope.ADMIN  # promoting a replica
    if method in ("GET", "HEAD") or path in READ_POSTS or path.rstrip("/") == MCP_PATH:
        return Scope.READ
    return Scope.WRITE


def check_path(grant: Grant, *paths: str, root: Path | None = None) -> None:
    """Raise :class:`Forbidden` unless every path lies under the grant's prefix, both as named
    and, given the space's ``root``, where its symlinks lead now (``team/link.md`` pointing at
    ``secret.md`` is outside ``team/``): the name alone says nothing of a link's target."""
    for path in paths:
        if not path_allowed(grant, path) or (
            root is not None and grant.prefix is not None and not _leads_inside(grant, root, path)
        ):
            raise Forbidden(f"{path} is outside this key's prefix {grant.prefix}")


def _leads_inside(grant: Grant, root: Path, path: str) -> bool:
    """Whether ``path`` (or, not there yet, its nearest existing folder) resolves under the
    prefix. A path the core would refuse anyway (outside the root) is left to the core."""
    real_root = os.path.realpath(root)
    probe = os.path.join(real_root, path.strip("/"))
    while not os.path.lexists(probe) and probe != real_root:
        probe = os.path.dirname(probe)
    if probe == real_root:
        return True  # nothing of the path exists yet: its name, checked already, is all
    real = os.path.realpath(probe)
    if real == real_root:
        return False  # a link to the space's root: outside any prefix
    if not real.startswith(real_root.rstrip(os.sep) + os.sep):
        return True  # outside the root: the core refuses it with its own error
    rel = os.path.relpath(real, real_root).replace(os.sep, "/")
    if probe != os.path.join(real_root, path.strip("/")):  # a folder above a new file
        return path_allowed(grant, rel) or (grant.prefix or "").startswith(rel + "/")
    return path_allowed(grant, rel)


def event_allowed(grant: Grant, event: Event) -> bool:
    """Whether a change event may be shown to ``grant``: every path it names under the prefix
    (a rename out of the prefix names a path outside it, so it is left out whole)."""
    named = [p for p in (event.path, *event.paths) if p]
    return grant.prefix is None or (bool(named) and all(path_allowed(grant, p) for p in named))


def listing_prefix(grant: Grant, requested: str | None) -> str | None:
    """The ``path_prefix`` a search or listing must pass to the core: the narrower of the
    request's and the grant's; ``None`` when they are disjoint and the answer is empty (the
    core need not be asked). ``""`` means no filter."""
    return narrowed_prefix(grant, requested)


def answer_prefix(grant: Grant) -> str | None:
    """The ``path_prefix`` an answer that takes no prefix of its own (``/meta``, ``/changes``,
    the memory report) passes to the core: the key's prefix, ``None`` for no filter. The same
    rule as :func:`listing_prefix` with nothing requested, which is never disjoint."""
    return listing_prefix(grant, None) or None


def refuse_prefixed(grant: Grant, what: str) -> None:
    """Raise :class:`Forbidden` for an answer that cannot yet be confined to a prefix (it would
    show paths outside it): refused whole rather than filtered after the fact."""
    if grant.prefix is not None:
        raise Forbidden(f"{what} is not available to a key with a prefix ({grant.prefix})")


def check_clone(grant: Grant) -> None:
    """Raise :class:`Forbidden` for a key with a prefix asking for its space's repository over
    git (``/api/kiwi/git``): a clone or fetch carries every file of every commit, the whole
    history of the space, which no filter can confine to a prefix (a pack holds the trees
    themselves). Any other key reads it at scope ``read`` (:func:`needed_scope`)."""
    if grant.prefix is not None:
        raise Forbidden(
            f"git over HTTP is not available to a key with a prefix ({grant.prefix}): "
            "a clone carries the whole history of the space"
        )


def mcp_refusal(grant: object) -> str:
    """Why MCP over HTTP refuses ``grant`` (``""``: it does not). Its tools take paths, prefixes
    and ids in too many shapes for a key with a prefix to be confined: refused whole rather
    than served wider than granted. Scope and actor are honoured call by call
    (:func:`tool_call`)."""
    if isinstance(grant, Grant) and grant.prefix is not None:
        return f"/mcp is not available to a key with a prefix ({grant.prefix})"
    return ""


def tool_call(
    grant: object, tool: str, read_only: bool, arguments: dict[str, Any], takes_actor: bool
) -> dict[str, Any]:
    """The arguments an MCP tool call runs with under ``grant`` (``None``: no key, as over
    stdio): :class:`Forbidden` for a tool that changes the space when the key's scope is
    ``read``; a key with an actor authors every write it makes, whatever ``actor`` the call
    names (as ``X-Actor`` gives way to it over REST)."""
    if not isinstance(grant, Grant):
        return arguments
    if not read_only and grant.scope < Scope.WRITE:
        raise Forbidden(f"this key's scope is {grant.scope}; {tool} needs {Scope.WRITE}")
    if takes_actor and grant.actor is not None:
        return {**arguments, "actor": grant.actor}
    return arguments
