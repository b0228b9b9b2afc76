"""The files of a knowledge root: walking, reading, atomic writing.

Files are canonical; everything else (git, the index) is derived from them. This module knows the
The rules for which files count (``.md``, case-sensitive; nothing whose name starts with ``.``;
symlinked directories are not descended) and the walk order every report uses: depth first, names
in byte order, directories interleaved with files.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidPath, NotFound, StorageError
from .paths import confine, is_inside

MARKDOWN_SUFFIX = ".md"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_temp_ids = itertools.count()


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


def _sorted_entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as it:
        entries = [e for e in it if not e.name.startswith(".")]
    if all(e.name.isascii() for e in entries):
        entries.sort(key=lambda e: e.name)  # for ASCII, code point order is byte order
    else:
        entries.sort(key=lambda e: os.fsencode(e.name))
    return entries


def walk(root: str | Path, prefix: str = "") -> Iterator[WalkEntry]:
    """Yield every knowledge file under ``root`` (or its sub-folder ``prefix``) in walk order.

    Symlinked ``.md`` files are yielded under their own path; one that is broken or points out
    of the root comes with an ``error``. An unreadable folder is yielded as an error entry too,
    so that a report can name it instead of silently missing its files.
    """
    for row in walk_rows(root, prefix):
        yield WalkEntry(*row)


def walk_rows(root: str | Path, prefix: str = "") -> Iterator[WalkRow]:
    """:func:`walk` as plain tuples ``(rel, path, symlink, error)``, for the full scan.

    Iterative, with one stack of folder listings: a recursive generator would pass every file
    up through one frame per folder level.
    """
    base = os.fspath(root)
    real_root = os.path.realpath(base)
    listing = _listing(prefix, os.path.join(base, prefix) if prefix else base)
    if isinstance(listing, tuple):
        yield listing
        return
    stack = [(prefix, iter(listing))]
    while stack:
        rel_dir, entries = stack[-1]
        for entry in entries:
            name = entry.name
            rel = rel_dir + name
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                if name.endswith(MARKDOWN_SUFFIX):
                    yield (rel, entry.path, False, cannot_read(exc))
                continue
            if is_dir:
                sub = _listing(rel + "/", entry.path)
                if isinstance(sub, tuple):
                    yield sub
                    continue
                stack.append((rel + "/", iter(sub)))
                break
            if name.endswith(MARKDOWN_SUFFIX):
                if is_link:
                    yield (rel, entry.path, True, link_problem(real_root, entry.path))
                else:
                    yield (rel, entry.path, False, None)
        else:
            stack.pop()


def _listing(rel_dir: str, abs_dir: str) -> list[os.DirEntry[str]] | WalkRow:
    """The sorted entries of a folder, or the error row naming it."""
    try:
        return _sorted_entries(abs_dir)
    except OSError as exc:
        return (rel_dir.rstrip("/"), abs_dir, False, cannot_list(exc))


def link_problem(real_root: str, path: str) -> str | None:
    """The walk's verdict on a symlinked ``.md`` file: ``None`` when it may be read, i.e. its
    target is a regular file inside the root (``real_root``, symlinks resolved)."""
    if not is_inside(Path(real_root), Path(path)):
        return "symlink points outside the root"
    if not os.path.isfile(path):
        return "broken symlink"
    return None


def os_error_text(exc: OSError) -> str:
    """An OS error as warnings and messages show it: the system's reason, without the path."""
    return exc.strerror or str(exc)


def cannot_read(exc: OSError) -> str:
    """The error of a walk entry that cannot be stat'ed."""
    return f"cannot read: {os_error_text(exc)}"


def cannot_list(exc: OSError) -> str:
    """The error of a walk entry for a folder that cannot be listed."""
    return f"cannot list folder: {os_error_text(exc)}"


class Storage:
    """Reads and atomically writes the files of one root; every ``rel`` is canonical."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def abspath(self, rel: str) -> Path:
        """The confined absolute path of canonical ``rel``."""
        return confine(self.root, rel)

    def read(self, rel: str) -> bytes:
        path = self.abspath(rel)
        try:
            if path.is_dir():
                raise NotFound(f"{rel} is a folder, not a file")
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotFound(f"file not found: {rel}") from exc
        except IsADirectoryError as exc:
            raise NotFound(f"{rel} is a folder, not a file") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {rel}: {os_error_text(exc)}") from exc

    def read_optional(self, rel: str) -> bytes | None:
        """The file's bytes, or ``None`` when it does not exist."""
        try:
            return self.read(rel)
        except NotFound:
            return None

    def exists(self, rel: str) -> bool:
        return self.abspath(rel).is_file()

    def stat(self, rel: str) -> os.stat_result:
        try:
            return os.stat(self.abspath(rel))
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotFound(f"file not found: {rel}") from exc

    def write(self, rel: str, data: bytes) -> None:
        """Atomically replace ``rel`` with ``data`` (temp file, fsync, rename, fsync folder)."""
        path = self.abspath(rel)
        if path.is_dir():
            raise InvalidPath(f"{rel} is a folder")
        parent = path.parent
        try:
            self._make_parents(parent)
            tmp = parent / f".kiwi-write-{os.getpid()}-{threading.get_ident()}-{next(_temp_ids)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o644)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchmod(fd, 0o644)  # whatever the umask: files are world-readable
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            _fsync_dir(parent)
        except NotADirectoryError as exc:
            raise InvalidPath(f"a parent of {rel} is a file, not a folder") from exc
        except OSError as exc:
            raise StorageError(f"cannot write {rel}: {os_error_text(exc)}") from exc

    def delete(self, rel: str) -> None:
        path = self.abspath(rel)
        try:
            if path.is_dir() and not path.is_symlink():
                raise NotFound(f"{rel} is a folder, not a file")
            os.unlink(path)
        except FileNotFoundError as exc:
            raise NotFound(f"file not found: {rel}") from exc
        except OSError as exc:
            raise StorageError(f"cannot delete {rel}: {os_error_text(exc)}") from exc
        _fsync_dir(path.parent)
        self._prune_empty_parents(path.parent)

    def _make_parents(self, parent: Path) -> None:
        if parent.is_dir():
            return
        parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        if not is_inside(self.root, parent):
            raise InvalidPath(f"path outside root (symlink): {parent}")

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

    def is_regular_file(self, rel: str) -> bool:
        try:
            st = os.lstat(self.abspath(rel))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
