"""Background, batched git commits: the write pipeline's asynchronous mode.

A commit costs a few milliseconds whatever the write, mostly for rewriting the tree objects of the
folders on its path; a write that waits for its own commit is capped at a few hundred writes a
second. In this mode (``kiwifs serve --async-commit``, or ``[versioning] async_commit = true``) a
write returns once it is on disk and named in the crash journal, and this thread commits what
has accumulated, as KiwiFS does: after ``window`` seconds, at ``max_paths`` paths, or as soon as
the actor changes, so every commit still has one author. History reads call :meth:`flush` first,
so they always see every write that returned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .versioning import Git

log = logging.getLogger(__name__)
MAX_RETRY_DELAY = 5.0


@dataclass(frozen=True)
class PendingCommit:
    """One pipeline operation waiting for its commit."""

    paths: tuple[str, ...]
    actor: str
    message: str
    trailer: str | None = None


def batch_message(batch: list[PendingCommit]) -> tuple[str, str | None]:
    """The commit message and trailer of a batch (one operation keeps its own message)."""
    trailers = list(dict.fromkeys(c.trailer for c in batch if c.trailer))
    trailer = "\n".join(trailers) or None
    if len(batch) == 1:
        return batch[0].message, trailer
    paths = list(dict.fromkeys(p for c in batch for p in c.paths))
    return f"{batch[0].actor}: {len(paths)} files\n\n" + "\n".join(paths), trailer


class Committer:
    """A daemon thread committing :class:`PendingCommit` batches; ``on_idle`` runs when drained."""

    def __init__(
        self,
        git: Git,
        on_idle: Callable[[], None],
        window: float = 0.2,
        max_paths: int = 50,
    ) -> None:
        self.git = git
        self.on_idle = on_idle
        self.window = window
        self.max_paths = max_paths
        self._queue: deque[PendingCommit] = deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._flushers = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="kiwifs-committer", daemon=True)
        self._thread.start()

    def submit(self, commit: PendingCommit) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("committer is closed")
            self._queue.append(commit)
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._in_flight

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is committed; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushers += 1
            self._cond.notify_all()  # cut the batching window short
            try:
                while self._queue or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._flushers -= 1
        return True

    def close(self) -> None:
        """Commit what is pending, then stop the thread."""
        self.flush()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        delay = 0.05
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                message, trailer = batch_message(batch)
                paths = list(dict.fromkeys(p for c in batch for p in c.paths))
                self.git.commit(paths, batch[0].actor, message, trailer)
            except Exception:
                log.exception("background commit failed; retrying (the journal keeps the paths)")
                with self._cond:
                    self._queue.extendleft(reversed(batch))
                    self._in_flight = 0
                    self._cond.wait(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            delay = 0.05
            with self._cond:
                self._in_flight = 0
                drained = not self._queue
            if drained:
                self._safely(self.on_idle)
            with self._cond:
                self._cond.notify_all()

    def _next_batch(self) -> list[PendingCommit] | None:
        """Wait for work, let the window fill, and take one actor's run of operations."""
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.window
            while not (self._stopping or self._flushers or self._full()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch = [self._queue.popleft()]
            count = len(batch[0].paths)
            while self._queue and self._queue[0].actor == batch[0].actor:
                if count + len(self._queue[0].paths) > self.max_paths:
                    break
                nxt = self._queue.popleft()
                batch.append(nxt)
                count += len(nxt.paths)
            self._in_flight = len(batch)
            return batch

    def _full(self) -> bool:
        """Enough paths for one commit, or a second actor waiting behind the first."""
        if sum(len(c.paths) for c in self._queue) >= self.max_paths:
            return True
        return any(c.actor != self._queue[0].actor for c in self._queue)

    @staticmethod
    def _safely(action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:
            log.exception("committer hook failed")
