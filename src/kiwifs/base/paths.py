"""Canonical, confined paths: computed once at the edge, trusted everywhere after.

KiwiFS clamps ``..`` and guesses; kiwifs refuses. A canonical path is relative to the
knowledge root, uses ``/``, has no empty, ``.`` or ``..`` segments and no segment starting with
``.``. It is the one string that git, the index and events see for a file.

The same segment rule holds for where a path really leads: :func:`confine` resolves symlinks and
refuses a path that ends up outside the root or in a hidden path (``ln -s .git gitlink`` must
not make ``gitlink/config`` reachable). And because a check before use can be raced, opening is
here too: :func:`open_regular` and :func:`open_parent` check the descriptor actually opened, and
open nothing but regular files and folders (a FIFO named ``*.md`` must not block a reader).
docs/security.md explains the threats.

Two looser normalisations live here too because they follow the same segment rules: the paths
cited in ``merged-from`` and the episodes prefix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path

from kiwifs.base.text import check_text, name_from_shown, shown, undecodable
from kiwifs.errors import InvalidPath

MAX_SEGMENT_BYTES = 255


def canonical(path: str, reading: bool = False) -> str:
    """Return the canonical form of an API path or raise :class:`InvalidPath`.

    A path must be valid Unicode; a name on disk that is not UTF-8 is addressed as every
    interface shows it, its undecodable bytes written ``\\xNN`` (the name rule,
    :func:`~kiwifs.base.text.name_from_shown`). Such a name can only be read (``reading``): a write
    would hand it to the crash journal, git's commit, the index and the events, which hold
    valid Unicode only, so it is refused with a usage error (rename the file on disk). One
    leading ``/`` is dropped; ``\\`` is *not* a separator (it is a legal filename byte on
    POSIX, and turning it into ``/`` would make two different names collide).
    """
    if not isinstance(path, str) or path == "":
        raise InvalidPath("path is required")
    check_text(path, "path", InvalidPath)
    for ch in path:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise InvalidPath(f"path contains a control character: {path!r}")
    path = name_from_shown(path)
    if not reading and undecodable(path):
        raise InvalidPath(
            f"{shown(path)} is a name that is not UTF-8: it can be read but not written "
            "(rename it on disk)"
        )
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


def canonical_dir(path: str | None, reading: bool = False) -> str:
    """Like :func:`canonical` for a folder argument; empty or ``/`` is the root (``""``)."""
    if path is None:
        return ""
    stripped = path.strip("/")
    if stripped == "":
        return ""
    return canonical(stripped, reading)


OUTSIDE = "outside the root"
HIDDEN = "a hidden path"


def confine(root: Path, rel: str) -> Path:
    """Absolute path of canonical ``rel`` under ``root``, checked with its symlinks resolved.

    The target (or, when it does not exist yet, its nearest existing ancestor) is resolved and
    must stay inside the resolved root, and no segment of the resolved path below the root may
    be hidden: ``ln -s .git gitlink`` must not make ``gitlink/config`` a path to ``.git/config``.
    The lexical segments of ``rel`` were already checked by :func:`canonical`; this is the same
    rule applied to where the path really leads, now. Readers and writers check again on the
    descriptor they open (:mod:`kiwifs.files.storage`), so a link swapped in afterwards is caught
    too.
    """
    real_root = os.path.realpath(root)
    target = Path(real_root) / rel if rel else Path(real_root)
    probe = target
    while not os.path.lexists(probe) and str(probe) != real_root:
        probe = probe.parent
    check_resolved(real_root, os.path.realpath(probe), rel)
    return target


def check_resolved(real_root: str, real_path: str, rel: str) -> None:
    """Raise :class:`InvalidPath` when ``rel``, resolved to ``real_path``, leaves the root or
    leads into a hidden path (:func:`refusal`)."""
    why = refusal(real_root, real_path)
    if why is not None:
        raise refused_path(rel, why)


def refused_path(rel: str, why: str) -> InvalidPath:
    """The error for ``rel`` leading outside the root or into a hidden path (``why``)."""
    if why == HIDDEN:
        return InvalidPath(f"path leads through a symlink to a hidden path: {rel}")
    return InvalidPath(f"path outside root (symlink): {rel}")


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


# ---------------------------------------------------------------------------------------------
# opening what a path names: only regular files, checked on the descriptor

NOT_REGULAR_FILE = "not a regular file"  # the reason given for a FIFO or device named *.md
LINK_OUTSIDE = "symlink points outside the root"
LINK_HIDDEN = "symlink points to a hidden path"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: opening a FIFO for reading must return at once (it is then refused by fstat)
_READ_FLAGS = os.O_RDONLY | _CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | _CLOEXEC | getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file was expected: never read, never written."""

    def __init__(self) -> None:
        super().__init__(errno.EINVAL, NOT_REGULAR_FILE)


class LinkRefused(OSError):
    """An opened descriptor that, symlinks resolved, lies outside the root or in a hidden path
    (``why``: :data:`OUTSIDE` or :data:`HIDDEN`)."""

    def __init__(self, why: str) -> None:
        super().__init__(errno.EACCES, LINK_HIDDEN if why == HIDDEN else LINK_OUTSIDE)
        self.why = why


def _proc_fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    except OSError:
        return None


def _fcntl_fd_path(fd: int) -> str | None:
    import fcntl

    try:
        raw = fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024))  # type: ignore[attr-defined,unused-ignore]
    except OSError:
        return None
    return os.fsdecode(raw.split(b"\0", 1)[0])


def _fd_path_unknown(fd: int) -> str | None:
    return None


if os.path.isdir("/proc/self/fd"):
    fd_path = _proc_fd_path
elif sys.platform == "darwin":
    fd_path = _fcntl_fd_path
else:  # no way to ask: the path layer's check before opening is the only one
    fd_path = _fd_path_unknown
fd_path.__doc__ = "Where an open descriptor really is (symlinks resolved), if the OS can say."
FD_PATH_KNOWN = fd_path is not _fd_path_unknown  # descriptors can be checked after opening


def check_descriptor(fd: int, real_root: str) -> None:
    """Raise :class:`LinkRefused` when ``fd`` lies outside ``real_root`` or in a hidden path."""
    where = fd_path(fd)
    if where is not None:
        why = refusal(real_root, where)
        if why is not None:
            raise LinkRefused(why)


def open_regular(
    path: str | bytes | Path, real_root: str | None = None
) -> tuple[int, os.stat_result]:
    """Open a regular file for reading; returns the descriptor and its ``fstat``.

    The open never blocks (``O_NONBLOCK``), and what was opened is checked on the descriptor:
    a folder raises :class:`IsADirectoryError`, anything else that is not a regular file
    :class:`NotRegularFile`, and with ``real_root`` a file outside it or in a hidden path
    :class:`LinkRefused`. Checking after opening leaves no gap for a swap in between.
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile()
        if real_root is not None:
            check_descriptor(fd, real_root)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


READ_CHUNK = 1 << 16


def read_all(fd: int, size: int | None = None) -> bytes:
    """Read an open file to the end and close it.

    Raw ``os.read`` calls, the first one sized by ``size`` (the file's ``st_size``, when the
    caller has it) plus one byte, so a file that did not grow is read in one call and its end
    seen by the next: a buffered file object costs ~20 µs more per small file, which is most
    of reading one.
    """
    try:
        want = READ_CHUNK if size is None else size + 1
        chunks: list[bytes] = []
        while chunk := os.read(fd, want):
            chunks.append(chunk)
            want = READ_CHUNK
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def open_parent(real_root: str, rel: str, create: bool) -> int:
    """A descriptor of the folder holding canonical ``rel``, checked at every step.

    Walks down from the root one segment at a time, relative to the folder just opened and
    checked, so no step can be redirected by a symlink swapped in after the path layer looked:
    folder symlinks inside the root are followed, one leading outside or into a hidden path
    raises :class:`LinkRefused`. With ``create``, missing folders are made on the way, each
    inside a folder already checked.
    """
    fd = os.open(real_root, _DIR_FLAGS)
    try:
        for segment in rel.split("/")[:-1]:
            inner = _open_folder(fd, segment, real_root, create)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_folder(parent: int, segment: str, real_root: str, create: bool) -> int:
    """The folder ``segment`` of the checked folder ``parent``, checked; made if missing and
    ``create``.

    A real folder with a plain name is opened without following links and needs no check: it
    lies inside ``parent`` and is not hidden. A symlink, a folder made just now (a link may have
    replaced it) and any other name (``..``, a hidden one) are followed and then checked on
    their descriptor. Every system call here releases the interpreter lock, and a write makes these
    calls while holding the root's write lock, so fewer of them is fewer waits for the lock.
    """
    try:
        if _NOFOLLOW and segment not in ("", "..") and not segment.startswith("."):
            return os.open(segment, _DIR_FLAGS | _NOFOLLOW, dir_fd=parent)
        os.stat(segment, dir_fd=parent)  # every other step is checked on its descriptor
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(segment, 0o755, dir_fd=parent)
    except OSError:  # a symlink (ELOOP), or not a folder: opened again, following, below
        pass
    inner = os.open(segment, _DIR_FLAGS, dir_fd=parent)
    try:
        check_descriptor(inner, real_root)
    except BaseException:
        os.close(inner)
        raise
    return inner


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
    check_text(prefix, "episodes prefix", InvalidPath)
    norm = normalize_ref_path(prefix)
    if norm is None:
        raise InvalidPath(f"episodes prefix must not contain '..': {prefix!r}")
    if not norm:
        return ""
    return norm + "/"
