"""The atomic write: a file replaced whole or not at all, and what a crash leaves of one.

A write goes to a unique temporary file in the target's folder (its name starts with
:data:`TEMP_PREFIX`: hidden, so no walk lists it), is fsynced, renamed over the target with
``os.replace``, and the folder is fsynced so the name survives a power cut too. A writer that
fsyncs later, outside its lock, gets the file back open as :class:`Unsynced`. A crash between
the create and the rename leaves the temporary file behind: the recovery at the next open finds
those (:func:`temp_files`, :func:`temp_files_in`) and removes them under the write lock
(:func:`remove_temp_files`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

from kiwifs.base.paths import is_inside
from kiwifs.errors import StorageError, os_error_text
from kiwifs.files import foldersync

# the name of every temporary file an atomic write makes (hidden, so no walk ever lists it)
TEMP_PREFIX = ".kiwi-write-"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_temp_ids = itertools.count()


class Unsynced:
    """A file written and renamed into place, not yet fsynced; its descriptor and its
    folder's stay open."""

    def __init__(self, fd: int, rel: str, folder: int) -> None:
        self.fd: int | None = fd
        self.folder: int | None = folder
        self.rel = rel

    def sync(self) -> None:
        """Make the content and the name survive a power cut: fsync the file and its folder.

        On ext4 the file's fsync usually commits the rename with it, but the folder's fsync is
        what makes the name durable on every filesystem (ext4 fast commits, others), so it
        stays. The folder's runs beside the file's, shared with other writers of the folder
        (:mod:`kiwifs.files.foldersync`).
        """
        try:
            folder_done = None
            if self.folder is not None:
                folder_done = foldersync.submit(self.folder)
            if self.fd is not None:
                os.fsync(self.fd)
            if folder_done is not None:
                with contextlib.suppress(OSError):  # some filesystems cannot fsync a folder
                    folder_done.result()
        except OSError as exc:
            raise StorageError(f"cannot write {self.rel}: {os_error_text(exc)}") from exc
        finally:
            self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        folder, self.folder = self.folder, None
        for each in (fd, folder):
            if each is not None:
                os.close(each)


def write_in(
    folder: int, name: str, data: bytes, durable: bool = True, mode: int = 0o644
) -> int | None:
    """Write ``data`` to a temp file in ``folder``, fsync it, rename it to ``name`` and fsync
    the folder; ``durable=False``: no fsync, and the file's descriptor is returned open.
    ``mode``: the file's permissions (``0o600`` for a file only its owner may read; the temp
    file is never more open than that, so no reader catches it in between)."""
    tmp = f"{TEMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{next(_temp_ids)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, mode, dir_fd=folder)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)  # whatever the umask: knowledge files are world-readable
            if durable:
                os.fsync(fd)
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
    if not durable:
        return fd
    os.close(fd)
    with contextlib.suppress(OSError):
        os.fsync(folder)
    return None


def temp_files(root: Path) -> list[Path]:
    """Every atomic write's temporary file under ``root``: a crash leaves them behind.

    Anywhere in the root, ``.kiwi/`` included, except inside ``.git`` folders; symlinked folders
    are not followed, and a symlink is never taken for a temporary file's folder.
    """
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if d != ".git"]
        found.extend(Path(folder, name) for name in files if name.startswith(TEMP_PREFIX))
    return found


def temp_files_in(folders: Iterable[Path]) -> list[Path]:
    """The temporary files directly in ``folders`` (not recursive; missing folders skipped)."""
    found: list[Path] = []
    for folder in folders:
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            found.extend(
                Path(entry.path)
                for entry in entries
                if entry.name.startswith(TEMP_PREFIX) and not entry.is_dir(follow_symlinks=False)
            )
    return found


def temp_file_folders(root: Path, paths: Iterable[str]) -> set[Path]:
    """The folders of ``paths`` (relative to ``root``) where temporary files may be looked for:
    inside the root once symlinks are resolved, and not inside ``.git`` (a journal names paths
    before they are checked, so one may lead anywhere)."""
    git_dir = root / ".git"
    folders = set()
    for rel in paths:
        folder = (root / rel).parent
        if is_inside(root, folder) and not is_inside(git_dir, folder):
            folders.add(folder)
    return folders


def remove_temp_files(candidates: list[Path]) -> list[Path]:
    """Remove the listed temporary files that are still there; returns those removed.

    Call it holding the write lock: no write is then in flight, so every one is an orphan.
    """
    removed = []
    for path in candidates:
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def fsync_dir(folder: Path) -> None:
    """Make a folder's entries (a file created, renamed or removed) survive a power cut."""
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
