"""The write lock of a root: a thread lock in this process, an ``flock`` across processes.

Writers are serialised on their disk writes only; their commits are made afterwards, shared,
by the committer (:mod:`kiwifs.git.committer`). So the ``flock`` on ``.kiwi/state/write.lock`` is
not let go when a writer leaves the lock but when every write of this process is committed:
another process (a ``kiwifs memory merge`` beside a server) can then never write between one of
our writes reaching the disk and its commit, where our commit, coming later, would put back in
HEAD what it had overwritten. Whichever thread sees the last write committed — a writer leaving
the lock, or the committer when it drains — lets it go.

Under unbroken load that moment may never come, so after :data:`HOLD_LIMIT` seconds the next
writer waits for the queue to drain and leaves the ``flock`` free for a moment, in which a
process waiting for it wakes up and takes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_FILE = "write.lock"
HOLD_LIMIT = 1.0  # seconds the flock may stay held across writes before others get a turn
YIELD_PAUSE = 0.005  # seconds it is left free then

# weak values: a server opens and closes many roots (its spaces), and a root's lock is needed
# only while a WriteLock on it lives; a plain dict kept one lock per root ever opened
_root_locks: weakref.WeakValueDictionary[str, threading.RLock] = weakref.WeakValueDictionary()
_root_locks_guard = threading.Lock()


def _thread_lock_for(root: Path) -> threading.RLock:
    """One thread lock per root in this process, whatever object writes to it, for as long
    as one of them holds it."""
    key = os.path.realpath(root)
    with _root_locks_guard:
        return _root_locks.setdefault(key, threading.RLock())


class WriteLock:
    """The lock; ``pending`` counts this process's writes not committed yet, ``drain`` waits
    for them, ``on_release`` runs (flock still held) when it is let go: the journal is emptied
    there, as everything it names is committed."""

    def __init__(
        self,
        root: Path,
        state: Path,
        pending: Callable[[], int],
        drain: Callable[[], None],
        on_release: Callable[[], None],
    ) -> None:
        self.state = state
        self._pending = pending
        self._drain = drain
        self._on_release = on_release
        self._thread_lock = _thread_lock_for(root)
        self._holding = threading.Lock()  # guards the three below
        self._fd: int | None = None  # the descriptor holding the flock, while held
        self._inside = 0  # threads inside (nested: depth)
        self._since = 0.0  # when the flock was taken

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            if self._held_too_long():
                self._drain()
                self.release_if_idle()
                time.sleep(YIELD_PAUSE)
            with self._holding:
                self._inside += 1
                taken = self._fd is not None
            try:
                if not taken:
                    self._take()
                yield
            finally:
                with self._holding:
                    self._inside -= 1
                self.release_if_idle()

    def release_if_idle(self) -> None:
        """Let the flock go if no thread is inside and every write is committed."""
        with self._holding:
            fd = self._fd
            if fd is None or self._inside or self._pending():
                return
            self._on_release()
            self._fd = None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def close(self) -> None:
        """Let the flock go whatever is pending (closing: the journal keeps what is)."""
        with self._holding:
            fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _take(self) -> None:
        """Take the flock (the thread lock held: no other thread of ours is here)."""
        self.state.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        with self._holding:
            self._fd, self._since = fd, time.monotonic()

    def _held_too_long(self) -> bool:
        with self._holding:
            held = self._fd is not None and not self._inside
            return held and time.monotonic() - self._since > HOLD_LIMIT
