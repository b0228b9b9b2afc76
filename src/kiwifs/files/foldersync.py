"""Folder fsyncs run beside the file's, and shared by the writers of one folder.

A write is durable once its file's content and its name are: the file's ``fsync``, then its
folder's (the rename lives in the folder). One after the other they cost two journal commits
or disk-cache flushes on ext4 (measured here: the folder's fsync after the file's added 2–4 ms
on a busy disk, as the journal commit is already made and a flush of its own is issued); run
at the same time, both wait for the same journal commit. So a writer hands its folder's fsync
to a small pool and fsyncs its file meanwhile, then waits for both.

Writers of the same folder share: a folder fsync queued and not started yet starts after every
rename made so far, so a writer whose rename is done may wait for that one instead of queueing
its own. Once a fsync has started, later writers queue a new one (their rename may have come
after it began). Nothing is acknowledged before both its fsyncs returned, as before.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the thread pool loads with the first write (~2 ms a read-only command spares)
    from concurrent.futures import Future, ThreadPoolExecutor

WORKERS = 2


class FolderSyncs:
    """Queued folder fsyncs, at most one waiting per folder (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[tuple[int, int], Future[None]] = {}  # (st_dev, st_ino): not started
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, folder: int) -> Future[None]:
        """A future done once ``folder`` (a descriptor, still open) was fsynced after now."""
        from concurrent.futures import Future, ThreadPoolExecutor

        st = os.fstat(folder)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            waiting = self._waiting.get(key)
            if waiting is not None:
                return waiting
            if self._pool is None:
                self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="kiwifs-fsync")
            future: Future[None] = Future()
            self._waiting[key] = future
            self._pool.submit(self._run, key, os.dup(folder), future)
            return future

    def _run(self, key: tuple[int, int], fd: int, future: Future[None]) -> None:
        with self._lock:  # from here on, a rename made later needs another fsync
            del self._waiting[key]
        try:
            os.fsync(fd)
        except OSError as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)
        finally:
            os.close(fd)


_shared = FolderSyncs()


def _forget_after_fork() -> None:
    """A forked child has none of its parent's pool threads: it starts its own when needed."""
    global _shared
    _shared = FolderSyncs()


os.register_at_fork(after_in_child=_forget_after_fork)


def submit(folder: int) -> Future[None]:
    """:meth:`FolderSyncs.submit` on the process's one pool."""
    return _shared.submit(folder)
