"""The walk of a knowledge root: which files count, one folder's listing, the walk order.

Files are canonical; everything else (git, the index) is derived from them. This module knows the
rules for which files count (``.md``, case-sensitive; nothing whose name starts with ``.``;
symlinked directories are not descended) and the walk order every report uses: depth first, names
in byte order, directories interleaved with files. :func:`list_folder` is the one place those
rules are applied to a folder: the scan's :func:`walk_rows`, the index's stat walk and the
watcher all list folders with it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AnyStr, Generic

from kiwifs.base.paths import HIDDEN, LINK_HIDDEN, LINK_OUTSIDE, refusal
from kiwifs.errors import os_error_text

MARKDOWN_SUFFIX = ".md"
SYMLINK_LOOP = "symlink loop"  # a link that leads back to itself, directly or not


def is_knowledge_name(name: str) -> bool:
    """A knowledge file's name: ends in ``.md`` exactly and is not hidden."""
    return name.endswith(MARKDOWN_SUFFIX) and not name.startswith(".")


@dataclass(frozen=True, slots=True)
class WalkEntry:
    """A markdown file found by :func:`walk`; ``error`` is set when it cannot be used."""

    rel: str
    path: str
    symlink: bool
    error: str | None = None


# What :func:`walk_rows` yields: the fields of a :class:`WalkEntry`, without the object.
WalkRow = tuple[str, str, bool, str | None]


@dataclass(slots=True)
class Listing(Generic[AnyStr]):
    """One folder as the walk sees it, from one ``scandir`` (nothing is stat'ed).

    ``files`` are the knowledge files in no particular order, symlinks (named in ``links``) and
    entries the kernel could not type (their error in ``errors``) included; ``folders`` are the
    sub-folders to enter (not symlinked ones, not hidden ones).
    """

    files: list[AnyStr]
    folders: list[AnyStr]
    links: set[AnyStr]
    errors: dict[AnyStr, str]


_MARKS: dict[type, tuple[Any, Any]] = {
    str: (".", MARKDOWN_SUFFIX),
    bytes: (b".", MARKDOWN_SUFFIX.encode()),
}


def list_folder(path: AnyStr) -> Listing[AnyStr]:
    """The walk's rules applied to one folder (``str`` or ``bytes``, names come back alike).

    The one place that decides what a walk sees: the scan's :func:`walk_rows` and the index's
    stat walk both list folders with it. Raises :class:`OSError` when the folder cannot be
    listed.
    """
    hidden, suffix = _MARKS[type(path)]
    listing: Listing[AnyStr] = Listing([], [], set(), {})
    with os.scandir(path) as it:
        for entry in it:
            name = entry.name
            if name.startswith(hidden):
                continue
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                if name.endswith(suffix):
                    listing.files.append(name)
                    listing.errors[name] = cannot_read(exc)
                continue
            if is_dir:
                listing.folders.append(name)
            elif name.endswith(suffix):
                listing.files.append(name)
                if is_link:
                    listing.links.add(name)
    return listing


def walk(root: str | Path, prefix: str = "") -> Iterator[WalkEntry]:
    """Yield every knowledge file under ``root`` (or its sub-folder ``prefix``) in walk order.

    Symlinked ``.md`` files are yielded under their own path; one that is broken or points out
    of the root comes with an ``error``. An unreadable folder is yielded as an error entry too,
    so that a report can name it instead of silently missing its files.
    """
    for row in walk_rows(root, prefix):
        yield WalkEntry(*row)


# A folder being walked: its rel and absolute path (both ending in "/"), its names in walk order
# not yet visited, its listing, and which names are folders.
_Frame = tuple[str, str, Iterator[str], Listing[str], set[str]]


def walk_rows(root: str | Path, prefix: str = "") -> Iterator[WalkRow]:
    """:func:`walk` as plain tuples ``(rel, path, symlink, error)``, for the full scan.

    Iterative, with one stack of folder listings: a recursive generator would pass every file
    up through one frame per folder level.
    """
    base = os.fspath(root)
    real_root = os.path.realpath(base)
    stack: list[_Frame] = []
    error = _enter(stack, prefix, os.path.join(base, prefix) if prefix else base)
    if error is not None:
        yield error
        return
    while stack:
        rel_dir, abs_dir, names, listing, folders = stack[-1]
        for name in names:
            rel, path = rel_dir + name, abs_dir + name
            if name in folders:
                error = _enter(stack, rel + "/", path)
                if error is None:
                    break
                yield error
                continue
            problem = listing.errors.get(name)
            if problem is not None:
                yield (rel, path, False, problem)
            elif name in listing.links:
                yield (rel, path, True, link_problem(real_root, path))
            else:
                yield (rel, path, False, None)
        else:
            stack.pop()


def _enter(stack: list[_Frame], rel_dir: str, abs_dir: str) -> WalkRow | None:
    """Push a folder's listing, names in byte order; the error row naming the folder instead
    when it cannot be listed."""
    try:
        listing = list_folder(abs_dir)
    except OSError as exc:
        return (rel_dir.rstrip("/"), abs_dir, False, cannot_list(exc))
    names = listing.files + listing.folders
    if all(name.isascii() for name in names):
        names.sort()  # for ASCII, code point order is byte order
    else:
        names.sort(key=os.fsencode)
    stack.append((rel_dir, os.path.join(abs_dir, ""), iter(names), listing, set(listing.folders)))
    return None


def link_problem(real_root: str, path: str) -> str | None:
    """The walk's verdict on a symlinked ``.md`` file: ``None`` when it may be read, i.e. its
    target is a regular file inside the root (``real_root``, symlinks resolved) and not in a
    hidden path such as ``.git``."""
    why = refusal(real_root, os.path.realpath(path))
    if why is not None:
        return LINK_HIDDEN if why == HIDDEN else LINK_OUTSIDE
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return SYMLINK_LOOP
    return "broken symlink"


def cannot_read(exc: OSError) -> str:
    """The error of a walk entry that cannot be stat'ed."""
    return f"cannot read: {os_error_text(exc)}"


def cannot_list(exc: OSError) -> str:
    """The error of a walk entry for a folder that cannot be listed."""
    return f"cannot list folder: {os_error_text(exc)}"
