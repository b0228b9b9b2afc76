"""Who may rebuild a root's index: never a process beside a server that keeps it current.

A server (``kiwifs serve``, ``kiwifs mcp``) keeps the index current with its watcher and holds
state derived from the rows (the word columns of keyword search, the vector matrix, the blob ids
of recent writes). A rebuild by another process dropped and remade the tables under it: the
server saw tables vanish (``no such table: dirs``), took that for damage and rebuilt too, the two
rebuilds collided (``UNIQUE constraint failed: files.id``), and writes the server had
acknowledged were not searchable for seconds after the rebuild returned.

So every running watcher holds a shared ``flock`` on :data:`LOCK_FILE`, and a rebuild from a
process that does not watch takes it exclusively, without waiting: while a watcher holds it, the
rebuild is refused (:class:`~kiwifs.errors.Locked`) and nothing is touched. A server never needs
a rebuild to be right (its watcher and reconciles keep the index equal to the files); to rebuild
anyway, stop it, reindex, start it again. A watcher that starts while a rebuild runs waits for it
to end before its first reconcile. The kernel drops a lock when its holder exits, however it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from kiwifs.errors import Locked
from kiwifs.index.connections import STATE_DIR

LOCK_FILE = "watchers.lock"  # in .kiwi/state: derived state, never versioned


def _open(root: Path) -> int | None:
    """The lock file's descriptor; ``None`` where ``.kiwi/state`` cannot hold it (a read-only
    root indexes into a temporary folder of its own process: there is nothing to share)."""
    try:
        return os.open(root / STATE_DIR / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None


def hold_shared(root: Path) -> int | None:
    """Take the lock shared for a watcher (waiting while a rebuild holds it); the descriptor to
    :func:`release` when the watcher stops, ``None`` where there is no lock file."""
    fd = _open(root)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # the lock goes with the last descriptor of its open file


@contextlib.contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """Hold the lock exclusively for a rebuild; :class:`Locked` at once while a watcher runs."""
    fd = _open(root)
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise Locked(
                    f"a kiwifs server (serve or mcp) is keeping the index of {root} current;"
                    " it never needs a reindex to be right. To rebuild anyway, stop it, run"
                    " `kiwifs reindex`, and start it again"
                ) from exc
        yield
    finally:
        release(fd)
