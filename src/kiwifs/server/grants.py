"""What a scoped key may do (a :class:`Grant`) and the pure rules the interfaces ask of one.

A scoped key (``[auth] type = "perspace"``, or a token made by ``kiwifs token create``) reaches
one space (or every space), only what its scope allows, and only the paths under its prefix. The
rules are here, as plain functions of a grant, so that REST, MCP and the web interface ask the
same questions and get the same answers:

* :func:`allows`: may this grant act on this space at this scope (``read`` < ``write`` <
  ``admin``)?
* :func:`path_allowed`: is this path under the grant's prefix, segment by segment?
* :func:`narrowed_prefix`: the prefix a listing or a search must filter by, the request's own
  ``path_prefix`` and the grant's, whichever is narrower (``None``: the two are disjoint).

A prefix names a folder. It is kept canonical by the project's path rules
(:func:`~kiwifs.base.paths.canonical`: no ``..``, no hidden or empty segment) with one trailing
``/``, so that a plain string comparison is also a segment-wise one: ``team/`` reaches
``team/x.md`` and never ``teamx.md``.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

from kiwifs.base.paths import canonical_dir
from kiwifs.errors import InvalidPath


class Scope(enum.IntEnum):
    """What a key may do, each scope including the ones below it."""

    READ = 1  # every read, search, the report, briefs, events
    WRITE = 2  # also every write, remember/forget/restore, merge, claims
    ADMIN = 3  # also the spaces' own routes (create, delete)

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Scope:
        """``read``, ``write`` or ``admin`` (any case, spaces around ignored); blank means
        ``admin``, KiwiFS's default for a key that names no scope."""
        name = text.strip().lower()
        if not name:
            return cls.ADMIN
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(
                f"unknown scope {text!r} (choose from {', '.join(SCOPE_NAMES)})"
            ) from None


SCOPE_NAMES = tuple(str(scope) for scope in Scope)


@dataclass(frozen=True)
class Grant:
    """What one key may do. Never holds the key itself, so a grant can be logged.

    ``space``: the one space the key reaches, ``None`` for every space. ``prefix``: the folder
    it is confined to (canonical, ending in ``/``), ``None`` for the whole space. ``actor``: the
    author its writes are committed as, ``None`` to leave it to the request. ``origin`` says
    where the key came from (``config entry 2``, ``token 1a2b3c4d5e6f``), for logs and errors.
    """

    space: str | None
    scope: Scope
    prefix: str | None = None
    actor: str | None = None
    origin: str = ""


def key_digest(key: str) -> bytes:
    """The SHA-256 of a key: what is stored and compared, never the key itself.

    Comparing digests of equal length also keeps the comparison's time independent of how
    long the presented key is.
    """
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def canonical_prefix(prefix: str | None) -> str | None:
    """A grant's prefix made canonical: ``None`` for none (blank or ``/`` included), else the
    folder's canonical path and one ``/`` (``/team`` and ``team/`` both give ``team/``).

    Raises :class:`~kiwifs.errors.InvalidPath` for a prefix the path rules refuse (``..``,
    ``.``, a hidden or an empty segment, a control character, a name that is not UTF-8): a
    prefix that could mean a place outside the space, or inside ``.git``, is no prefix.
    """
    if prefix is None:
        return None
    folder = canonical_dir(prefix)
    return folder + "/" if folder else None


def allows(grant: Grant, space: str, needed: Scope) -> bool:
    """Whether ``grant`` may act on ``space`` at scope ``needed``: its own space (or every
    space) and a scope at least ``needed``."""
    return (grant.space is None or grant.space == space) and grant.scope >= needed


def path_allowed(grant: Grant, path: str) -> bool:
    """Whether ``path`` (a file or folder of the space) lies under the grant's prefix.

    Segment-wise: prefix ``team/`` allows ``team`` itself and everything below it, not
    ``teamx.md`` nor the space's root. The path is made canonical first; one the path rules
    refuse is not allowed (it could otherwise name a place outside the prefix, ``team/../x``).
    """
    if grant.prefix is None:
        return True
    try:
        rel = canonical_dir(path, reading=True)
    except InvalidPath:
        return False
    return rel == grant.prefix[:-1] or rel.startswith(grant.prefix)


def narrowed_prefix(grant: Grant, requested: str | None) -> str | None:
    """The path prefix an answer must be filtered by, given the request's own ``requested``.

    The request's ``path_prefix`` is a plain string prefix (``team/pro`` matches
    ``team/projects/a.md``), the grant's a folder. The answer is the narrower of the two:
    ``""`` when neither filters, the request's prefix when it lies inside the grant's, the
    grant's when the request's is above it (``te``, ``team``, nothing), and ``None`` when they
    are disjoint and nothing may be answered (``other/`` under a grant of ``team/``).
    """
    wanted = (requested or "").lstrip("/")
    if grant.prefix is None or wanted.startswith(grant.prefix):
        return wanted
    if grant.prefix.startswith(wanted):
        return grant.prefix
    return None
