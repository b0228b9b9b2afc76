"""The files of a knowledge root: confined reads, atomic writes, deletes.

Files are canonical; everything else (git, the index) is derived from them. Which files count and
the order they are walked in is :mod:`kiwifs.base.walk`'s; how a file is replaced atomically (and
the temporary files a crash leaves) is :mod:`kiwifs.files.atomic`'s.

Every read and write goes through the path layer's rules that keep a hostile root harmless
(see docs/security.md): a read opens only regular files and checks them on the descriptor
(:func:`kiwifs.base.paths.open_regular`), resolving the path (:func:`kiwifs.base.paths.confine`)
only when the open fails, so that a refused path keeps its error; a write is checked on what it
opens, step by step (:func:`kiwifs.base.paths.open_parent` for its folder, then its last segment).
The same rule in fewer system calls: reads and writes make them under the root's write lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from kiwifs.base.limits import MAX_READ_BYTES
from kiwifs.base.paths import (
    FD_PATH_KNOWN,
    NOT_REGULAR_FILE,
    LinkRefused,
    NotRegularFile,
    canonical,
    check_resolved,
    confine,
    is_inside,
    open_parent,
    open_regular,
    read_all,
    refused_path,
)
from kiwifs.errors import (
    InvalidPath,
    KiwiError,
    NotFound,
    PayloadTooLarge,
    StorageError,
    os_error_text,
)
from kiwifs.files.atomic import Unsynced, write_in

_PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096


def os_failure(exc: OSError, verb: str, rel: str) -> KiwiError:
    """The error for an OS failure on canonical ``rel``: the caller's mistake or the server's.

    A name longer than the filesystem allows, a parent that is a file (``index.md/x.md``), or a
    symlink loop on the way (``loop.md -> loop.md``: ELOOP) is a path this root cannot hold:
    :class:`InvalidPath`. Anything else (permissions, a full disk, I/O) is the server's
    trouble: :class:`StorageError`.
    """
    if exc.errno == errno.ELOOP:
        return symlink_loop(rel)
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidPath(f"path is too long for the filesystem: {_shortened(rel)}")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return InvalidPath(f"a parent of {_shortened(rel)} is a file, not a folder")
    return StorageError(f"cannot {verb} {rel}: {os_error_text(exc)}")


def symlink_loop(rel: str) -> InvalidPath:
    """The error for a path that leads through a symlink loop: a refused path like a link out
    of the root, not a failure of the server (it answered 503 once)."""
    return InvalidPath(f"{_shortened(rel)}: symlink loop (too many levels of symbolic links)")


def too_large(rel: str, size: int) -> PayloadTooLarge:
    """The error for a read of a file over the size limit (it is not indexed either)."""
    return PayloadTooLarge(
        f"{_shortened(rel)} is over the {MAX_READ_BYTES >> 20} MiB size limit ({size} bytes):"
        " kiwifs neither reads nor indexes files this large"
    )


def _shortened(rel: str, keep: int = 200) -> str:
    return rel if len(rel) <= keep else f"{rel[: keep // 2]}\u2026{rel[-keep // 2 :]}"


class Storage:
    """Reads and atomically writes the files of one root; every ``rel`` is canonical."""

    def __init__(self, root: Path, read_many: bool = True) -> None:
        self.root = Path(root)
        self._real_root: str | None = None
        self.reads_at_once = read_many  # Tuning.read_many; False: read_many is read() per file

    def abspath(self, rel: str) -> Path:
        """The confined absolute path of canonical ``rel``."""
        return confine(self.root, rel)

    def real_root(self) -> str:
        """The root with its symlinks resolved: once, as soon as the root is a folder (a root
        is opened where it is; a symlink to it re-pointed later does not move it)."""
        real = self._real_root
        if real is None:
            real = os.path.realpath(self.root)
            if os.path.isdir(real):
                self._real_root = real
        return real

    def read(self, rel: str) -> bytes:
        """The file's bytes, whatever their size: the write side's read (an edit, an append, a
        rename, an ``If-Match``), which must be able to replace a file over the size limit."""
        return self._read(rel, None)[0]

    def read_with_stat(self, rel: str) -> tuple[bytes, os.stat_result]:
        """The file's bytes and the ``fstat`` of the very file they were read from: a caller's
        read (``Knowledge.read``: GET /file, ``kiwi_read``), refused with
        :class:`PayloadTooLarge` for a file over :data:`~kiwifs.base.limits.MAX_READ_BYTES`, which
        is told by that ``fstat``, before a byte is read."""
        return self._read(rel, MAX_READ_BYTES)

    def _read(self, rel: str, limit: int | None) -> tuple[bytes, os.stat_result]:
        """The file's bytes (at most ``limit`` of them) and its ``fstat``.

        The file is opened and checked on its descriptor (where it really is), not also
        resolved before: that took ~16 system calls a read, and a read may run under the
        write lock (``If-Match``, an edit). Only when the open fails is the path checked too,
        first, so a path the check refuses gets the same error as when it was checked before
        use. Where descriptors cannot be located, the path is checked before use.
        """
        if not FD_PATH_KNOWN:
            self.abspath(rel)
        real_root = self.real_root()
        try:
            fd, st = open_regular(os.path.join(real_root, rel), real_root)
        except OSError as exc:
            self.abspath(rel)  # refused as a path first, as before use
            raise _read_error(rel, exc) from exc
        if limit is not None and st.st_size > limit:
            os.close(fd)
            raise too_large(rel, st.st_size)
        try:
            return read_all(fd, st.st_size), st
        except OSError as exc:
            raise _read_error(rel, exc) from exc

    def read_many(self, rels: Iterable[str]) -> list[bytes | None]:
        """Each file's bytes, or ``None`` where :meth:`read` would fail (gone, not a regular
        file, a link out of the root or into a hidden path): a brief reads some 70 pages and
        skips those. The root is resolved once, and each file is checked on the descriptor it
        was opened as (the check :meth:`read` also makes, after resolving the path's symlinks
        first: three resolutions per file were most of a brief's reading time). Where the OS
        cannot say where a descriptor is (or with ``read_many`` off, the plain path), every
        file goes through :meth:`read`."""
        if not (self.reads_at_once and FD_PATH_KNOWN):
            return [self._read_or_none(rel) for rel in rels]
        real_root = self.real_root()
        found: list[bytes | None] = []
        for rel in rels:
            try:
                fd, st = open_regular(os.path.join(real_root, rel), real_root)
            except OSError:
                found.append(None)
                continue
            if st.st_size > MAX_READ_BYTES:  # grown past the limit since it was indexed
                os.close(fd)
                found.append(None)
                continue
            try:
                found.append(read_all(fd, st.st_size))
            except OSError:
                found.append(None)
        return found

    def _read_or_none(self, rel: str) -> bytes | None:
        try:
            return self.read_with_stat(rel)[0]
        except KiwiError:
            return None

    def read_optional(self, rel: str) -> bytes | None:
        """The file's bytes, or ``None`` when it does not exist."""
        try:
            return self.read(rel)
        except NotFound:
            return None

    def exists(self, rel: str) -> bool:
        return os.path.isfile(self.abspath(rel))  # False, never an error, for any bad name

    def write(self, rel: str, data: bytes, durable: bool = True) -> Unsynced | None:
        """Atomically replace ``rel`` with ``data`` (temp file, fsync, rename, fsync folder).

        The temp file is created and renamed relative to the parent folder's descriptor,
        which :func:`open_parent` checked. What ``rel`` names now must be absent or a regular
        file: a FIFO is refused, not replaced. (A symlink is replaced by the file, as ``git``
        checking out a file over a link would.)

        ``durable=False`` leaves out both fsyncs and returns the file, still open, for the
        caller to make durable later (:meth:`Unsynced.sync`), outside its lock.
        """
        parent, _, name = rel.rpartition("/")
        if name in ("", ".", "..") or ("/" in rel and canonical(parent) != parent):
            # its folders are opened by name below: none may be ``..``, empty or hidden
            raise InvalidPath(f"not a path in the root: {rel!r}")
        real_root = self.real_root()
        if not FD_PATH_KNOWN:
            self.abspath(rel)  # descriptors cannot be checked here: the path is, before
        _check_length(real_root, rel)
        try:
            folder = open_parent(real_root, rel, create=True)
        except LinkRefused as exc:
            raise refused_path(rel, exc.why) from exc
        except OSError as exc:
            raise _refused(rel, exc) or os_failure(exc, "write", rel) from exc
        try:
            _check_replaceable(folder, name, rel, real_root)
            fd = write_in(folder, name, data, durable)
        except OSError as exc:
            os.close(folder)
            if exc.errno == errno.ELOOP:  # the name is a symlink loop: left as it is
                raise symlink_loop(rel) from exc
            raise StorageError(f"cannot write {rel}: {os_error_text(exc)}") from exc
        except BaseException:
            os.close(folder)
            raise
        if fd is None:
            os.close(folder)
            return None
        return Unsynced(fd, rel, folder)

    def delete(self, rel: str) -> None:
        path = self.abspath(rel)
        try:
            folder = open_parent(self.real_root(), rel, create=False)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotFound(f"file not found: {rel}") from exc
        except OSError as exc:
            raise _refused(rel, exc) or os_failure(exc, "delete", rel) from exc
        try:
            if stat.S_ISDIR(os.stat(path.name, dir_fd=folder, follow_symlinks=False).st_mode):
                raise NotFound(f"{rel} is a folder, not a file")
            os.unlink(path.name, dir_fd=folder)
            with contextlib.suppress(OSError):
                os.fsync(folder)
        except FileNotFoundError as exc:
            raise NotFound(f"file not found: {rel}") from exc
        except OSError as exc:
            raise StorageError(f"cannot delete {rel}: {os_error_text(exc)}") from exc
        finally:
            os.close(folder)
        self._prune_empty_parents(path.parent)

    def _prune_empty_parents(self, folder: Path) -> None:
        """Remove folders a delete left empty, up to (not including) the root, like git does."""
        real_root = Path(os.path.realpath(self.root))
        current = folder
        while Path(os.path.realpath(current)) != real_root and is_inside(real_root, current):
            try:
                current.rmdir()
            except OSError:
                return
            current = current.parent


def _read_error(rel: str, exc: OSError) -> KiwiError:
    """The error for a read of ``rel`` that failed with ``exc``."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return NotFound(f"file not found: {rel}")
    if isinstance(exc, IsADirectoryError):
        return NotFound(f"{rel} is a folder, not a file")
    return _refused(rel, exc) or os_failure(exc, "read", rel)


def _refused(rel: str, exc: OSError) -> InvalidPath | None:
    """The usage error for a file kiwifs will not touch, or ``None`` for a real I/O failure."""
    if isinstance(exc, LinkRefused):
        return InvalidPath(f"{rel}: {exc.strerror}")
    if isinstance(exc, NotRegularFile):
        return InvalidPath(f"{NOT_REGULAR_FILE}: {rel}")
    return None


def _check_length(real_root: str, rel: str) -> None:
    """Refuse a file whose full path the OS could not open: written folder by folder it would
    fit, but nothing could read it back (a read opens the whole path)."""
    if len(os.fsencode(os.path.join(real_root, rel))) >= _PATH_MAX:
        raise os_failure(OSError(errno.ENAMETOOLONG, "File name too long"), "write", rel)


def _check_replaceable(folder: int, name: str, rel: str, real_root: str) -> None:
    """``name`` in ``folder`` must be absent or a regular file (through a link: its target,
    which must lie inside the root and out of hidden paths, as for a read)."""
    try:
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return  # absent
    if stat.S_ISLNK(st.st_mode):
        check_resolved(real_root, os.path.realpath(os.path.join(real_root, rel)), rel)
        try:
            st = os.stat(name, dir_fd=folder)
        except FileNotFoundError:
            return  # a dangling link, pointing inside the root: replaced
    if stat.S_ISDIR(st.st_mode):
        raise InvalidPath(f"{rel} is a folder")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidPath(f"{NOT_REGULAR_FILE}: {rel}")
