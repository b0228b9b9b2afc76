"""Canonical, confined paths: computed once at the edge, trusted everywhere after.

KiwiFS clamps ``..`` and guesses; kiwifs refuses. A canonical path is relative to the
knowledge root, uses ``/``, has no empty, ``.`` or ``..`` segments and no segment starting with
``.``. It is the one string that git, the index and events see for a file.

Two looser normalisations live here too because they follow the same segment rules: the paths
cited in ``merged-from`` and the episodes prefix.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InvalidPath

MAX_SEGMENT_BYTES = 255


def canonical(path: str) -> str:
    """Return the canonical form of an API path or raise :class:`InvalidPath`.

    One leading ``/`` is dropped; ``\\`` is *not* a separator (it is a legal filename byte on
    POSIX, and turning it into ``/`` would make two different names collide).
    """
    if not isinstance(path, str) or path == "":
        raise InvalidPath("path is required")
    for ch in path:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise InvalidPath(f"path contains a control character: {path!r}")
    rel = path[1:] if path.startswith("/") else path
    if rel == "":
        raise InvalidPath("path is required")
    segments = rel.split("/")
    for seg in segments:
        if seg == "":
            raise InvalidPath(f"path has an empty segment: {path!r}")
        if seg in (".", ".."):
            raise InvalidPath(f"path has a {seg!r} segment: {path!r}")
        if seg.startswith("."):
            raise InvalidPath(f"path has a hidden segment {seg!r}: {path!r}")
        if len(seg.encode("utf-8", errors="surrogateescape")) > MAX_SEGMENT_BYTES:
            raise InvalidPath(f"path segment longer than {MAX_SEGMENT_BYTES} bytes: {path!r}")
    return "/".join(segments)


def canonical_dir(path: str | None) -> str:
    """Like :func:`canonical` for a folder argument; empty or ``/`` is the root (``""``)."""
    if path is None:
        return ""
    stripped = path.strip("/")
    if stripped == "":
        return ""
    return canonical(stripped)


OUTSIDE = "outside the root"
HIDDEN = "a hidden path"


def confine(root: Path, rel: str) -> Path:
    """Absolute path of canonical ``rel`` under ``root``, checked with its symlinks resolved.

    The target (or, when it does not exist yet, its nearest existing ancestor) is resolved and
    must stay inside the resolved root, and no segment of the resolved path below the root may
    be hidden: ``ln -s .git gitlink`` must not make ``gitlink/config`` a path to ``.git/config``.
    The lexical segments of ``rel`` were already checked by :func:`canonical`; this is the same
    rule applied to where the path really leads, now. Readers and writers check again on the
    descriptor they open (:mod:`kiwifs.storage`), so a link swapped in afterwards is caught too.
    """
    real_root = os.path.realpath(root)
    target = Path(real_root) / rel if rel else Path(real_root)
    probe = target
    while not os.path.lexists(probe) and str(probe) != real_root:
        probe = probe.parent
    why = refusal(real_root, os.path.realpath(probe))
    if why == OUTSIDE:
        raise InvalidPath(f"path outside root (symlink): {rel}")
    if why == HIDDEN:
        raise InvalidPath(f"path leads through a symlink to a hidden path: {rel}")
    return target


def refusal(real_root: str, real_path: str) -> str | None:
    """Why a resolved path may not be used (:data:`OUTSIDE` or :data:`HIDDEN`), or ``None``.

    Both arguments have their symlinks resolved. Only the part below the root counts: a root
    that itself lives in a hidden folder (``~/.local/kb``) is fine.
    """
    if real_path == real_root:
        return None
    prefix = real_root.rstrip(os.sep) + os.sep
    if not real_path.startswith(prefix):
        return OUTSIDE
    inner = real_path[len(prefix) :]
    if inner.startswith(".") or (os.sep + ".") in inner:
        return HIDDEN
    return None


def is_inside(root: Path, target: Path) -> bool:
    """True when ``target``, symlinks resolved, lies inside ``root`` (also resolved)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(target)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def normalize_ref_path(path: str) -> str | None:
    """Normalise a ``merged-from`` path; ``None`` when it has a ``..`` segment.

    Trimmed, ``\\`` → ``/``, empty and ``.`` segments dropped: ``./episodes/a.md``,
    ``/episodes/a.md`` and ``episodes//a.md`` all become ``episodes/a.md``.
    """
    parts = [p for p in path.strip().replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def normalize_prefix(prefix: str | None) -> str:
    """The episodes prefix as docs/memory.md normalises it, or ``""`` when it means "not given".

    A ``..`` segment is refused rather than read as "not given": a prefix that silently falls
    back to the default would report the wrong folder.
    """
    if not prefix:
        return ""
    norm = normalize_ref_path(prefix)
    if norm is None:
        raise InvalidPath(f"episodes prefix must not contain '..': {prefix!r}")
    if not norm:
        return ""
    return norm + "/"
