"""Batched git commits in a thread: the write pipeline's group commit, synchronous or not.

A commit costs a few milliseconds whatever the write, mostly for rewriting the tree objects of the
folders on its path; a write that waits for its own commit is capped at a few hundred writes a
second, and writers queued behind one another's commits get no further. So writes hand their
commit to this thread, which commits what has accumulated in one commit per run of one actor's
operations (at most ``max_paths`` paths), so every commit still has one author:

- **Synchronous (the default): group commit.** ``window`` is 0: the thread commits as soon as it
  is free, taking every operation queued meanwhile. Each writer waits (:meth:`Committer.wait`,
  its lock released) until a commit holding its operation is made, or an attempt at it failed.
  One writer alone gets its own commit; concurrent writers share them. Before it starts, a
  commit waits a moment for the writers it can expect: those waiting for the write lock
  (``group_wait`` of :class:`~kiwifs.tuning.Tuning`), and those the last commit released,
  until each has announced its next write (``group_return``). A lone writer is never held: the
  commit it waits for released only itself, and it is back once it submits. Four writers then
  share 3.4 writes per commit instead of 1.8 (see docs/benchmarks.md).
- **Asynchronous** (``kiwifs serve --async-commit``, or ``[versioning] async_commit = true``):
  a write returns once it is on disk and named in the crash journal, and the thread commits
  after ``window`` seconds, at ``max_paths`` paths, or as soon as the actor changes, as KiwiFS
  does. History reads call :meth:`Committer.flush` first, so they always see every write that
  returned.

When git fails (a full disk, a broken repository) the thread keeps the batch and retries with a
growing delay, since the trouble may pass. Meanwhile nothing waits forever: after
:data:`FAILURES_BEFORE_ERROR` failed attempts in a row the committer counts as *failing*, and
:meth:`Committer.flush` and new writes raise :class:`~kiwifs.errors.StorageError` naming the
error, which ``/health`` shows too; a flush that makes no progress gives up after
:data:`FLUSH_TIMEOUT` seconds. The crash journal keeps the paths, so whatever is still pending at
close is committed by the next start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kiwifs.errors import StorageError
from kiwifs.git.messages import batch_message
from kiwifs.git.pendingcommit import PendingCommit
from kiwifs.git.repo import Git
from kiwifs.tuning import Tuning

log = logging.getLogger(__name__)
FIRST_RETRY_DELAY = 0.05
MAX_RETRY_DELAY = 5.0
FAILURES_BEFORE_ERROR = 3  # failed attempts in a row before waiters are told (~0.2 s)
FLUSH_TIMEOUT = 60.0  # seconds a flush waits for commits that neither succeed nor fail
CLOSE_TIMEOUT = 30.0


def batch_contents(batch: list[PendingCommit]) -> dict[str, bytes | None]:
    """What a batch wrote, later operations winning; paths written without bytes are read."""
    contents: dict[str, bytes | None] = {}
    for c in batch:
        if c.contents is not None:
            contents.update(c.contents)
        else:
            for path in c.paths:
                contents.pop(path, None)
    return contents


@dataclass(frozen=True)
class CommitStatus:
    """What ``/health`` shows about background commits."""

    pending: int = 0
    failing: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"pending": self.pending, "failing": self.failing}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class Ticket:
    """An operation's place in the queue, which :meth:`Committer.wait` waits on.

    Batches are taken from the head of the queue, so operation ``seq`` (counted from 1) is
    committed once ``seq`` operations are, and an attempt that failed with ``failed_through >=
    seq`` held it. ``failures`` is the failed attempts counted when it was submitted: only a
    later one is about it.
    """

    seq: int
    failures: int


class Committer:
    """A daemon thread committing :class:`PendingCommit` batches; ``on_idle`` runs when drained."""

    def __init__(
        self,
        git: Git,
        on_idle: Callable[[], None],
        window: float = 0.2,
        max_paths: int = 50,
        tuning: Tuning | None = None,
    ) -> None:
        self.git = git
        self.on_idle = on_idle
        self.window = window
        self.max_paths = max_paths
        tuned = tuning or Tuning()
        # a group commit's waits: for writers announced (queued on the write lock) to submit,
        # four of them pass the lock one by one in 3-5 ms on a busy server; and for the
        # writers the last commit released to announce their next write
        self.group_wait = max(tuned.group_wait, 0.0)
        self.group_return = max(tuned.group_return, 0.0)
        self._queue: deque[PendingCommit] = deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._idling = False  # on_idle running: a flush waits for it too
        self._flushers = 0
        self._stopping = False
        self._attempts = 0  # commit attempts finished, failed or not
        self._failures = 0  # failed attempts in a row
        self._error: str | None = None
        self._coming = 0  # operations announced, not submitted yet (group commit waits)
        self._returning = 0  # writers the last group commit released, not announced again
        self._submitted = 0  # operations ever submitted (the last ticket's seq)
        self._committed = 0  # operations ever committed: always a prefix of the submitted
        self._failed_attempts = 0  # failed attempts ever
        self._failed_through = 0  # the last operation the latest failed attempt held
        self._thread = threading.Thread(target=self._run, name="kiwifs-committer", daemon=True)
        self._thread.start()

    def announce(self) -> None:
        """An operation is on its way (waiting for the write lock): a group commit about to
        start waits for it a moment (``group_wait``) rather than leaving it to the next."""
        with self._cond:
            self._coming += 1
            self._returning = max(self._returning - 1, 0)

    def withdraw(self) -> None:
        """An announced operation will submit nothing (it failed, or wrote nothing)."""
        with self._cond:
            self._coming -= 1
            self._cond.notify_all()

    def submit(self, commit: PendingCommit, announced: bool = False) -> Ticket:
        with self._cond:
            if self._stopping:
                raise RuntimeError("committer is closed")
            self._queue.append(commit)
            self._coming -= announced
            self._submitted += 1
            self._cond.notify_all()
            return Ticket(self._submitted, self._failed_attempts)

    def wait(self, ticket: Ticket, timeout: float = FLUSH_TIMEOUT) -> None:
        """Wait until the ticket's operation is committed (group commit).

        Raises :class:`StorageError` with git's error as soon as an attempt holding it fails
        (the operation stays queued: it is on disk and in the journal, and is committed once
        git works again, or by the next start), or when commits make no progress for
        ``timeout`` seconds.
        """
        with self._cond:
            deadline = time.monotonic() + timeout
            done = self._committed
            while self._committed < ticket.seq:
                if self._failed_attempts > ticket.failures and self._failed_through >= ticket.seq:
                    raise StorageError(self._error or "git commit failed")
                if self._committed > done:  # progress: the bound is on a stall
                    done, deadline = self._committed, time.monotonic() + timeout
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._stalled(f"git commits made no progress in {timeout:g} s")
                self._cond.wait(remaining)

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._in_flight

    def status(self) -> CommitStatus:
        with self._cond:
            pending = len(self._queue) + self._in_flight
            if self._failures >= FAILURES_BEFORE_ERROR:
                return CommitStatus(pending, True, self._error)
            return CommitStatus(pending)

    def check(self) -> None:
        """Raise :class:`StorageError` while commits are failing (refuse new writes then).

        It also cuts the retry delay short, so a repaired disk is noticed at once.
        """
        with self._cond:
            if self._failures >= FAILURES_BEFORE_ERROR:
                self._cond.notify_all()
                raise self._failing_error()

    def _failing_error(self) -> StorageError:
        return StorageError(f"background git commits are failing: {self._error}")

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Wait until everything submitted so far is committed.

        Raises :class:`StorageError` when commits are failing, or when they have made no
        progress for ``timeout`` seconds; the writes stay on disk and in the journal.
        """
        with self._cond:
            self._flushers += 1
            self._cond.notify_all()  # cut the batching window and a retry delay short
            try:
                attempts = self._attempts
                deadline = time.monotonic() + timeout
                left = len(self._queue) + self._in_flight
                while self._queue or self._in_flight or self._idling:
                    # failing, and an attempt made since this flush began failed as well
                    if self._failures >= FAILURES_BEFORE_ERROR and self._attempts > attempts:
                        raise self._failing_error()
                    now_left = len(self._queue) + self._in_flight
                    if now_left < left:  # progress: the bound is on a stall, not the backlog
                        left, deadline = now_left, time.monotonic() + timeout
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._stalled(
                            f"background git commits made no progress in {timeout:g} s"
                            f" ({left} operation(s) pending)"
                        )
                    self._cond.wait(remaining)
            finally:
                self._flushers -= 1

    def _stalled(self, text: str) -> StorageError:
        """The error of a wait that saw no commit made: named for what holds the commits when
        it is the first import of the root's files (:mod:`kiwifs.git.adoption`)."""
        if self.git.importing:
            text += (
                ": the first import of the root's files into git is still running (what was"
                " written is on disk and journaled, and is committed after it)"
            )
        return StorageError(text)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Commit what is pending (unless git is failing), then stop the thread.

        What cannot be committed stays in the crash journal for the next start to commit.
        """
        try:
            self.flush(timeout)
        except StorageError as exc:
            log.error("closing with uncommitted writes (the journal keeps them): %s", exc)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout)

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        delay = FIRST_RETRY_DELAY
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                message, trailer = batch_message(batch)
                paths = list(dict.fromkeys(p for c in batch for p in c.paths))
                self.git.commit(paths, batch[0].actor, message, trailer, batch_contents(batch))
            except Exception as exc:
                with self._cond:
                    if self._failures == 0:
                        log.exception("background commit failed; retrying (journal keeps paths)")
                    self._queue.extendleft(reversed(batch))
                    self._in_flight = 0
                    self._attempts += 1
                    self._failures += 1
                    self._failed_attempts += 1
                    self._failed_through = self._committed + len(batch)
                    self._error = str(exc) or type(exc).__name__
                    self._cond.notify_all()  # waiting flushes learn of the failure
                    if self._stopping:
                        return  # closing: the journal keeps the paths for the next start
                    self._cond.wait(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            delay = FIRST_RETRY_DELAY
            with self._cond:
                if self._failures:
                    log.warning("background commits work again after %d failure(s)", self._failures)
                self._in_flight = 0
                self._attempts += 1
                self._committed += len(batch)
                if not self.window:  # group commit: its writers are likely to write again
                    self._returning = len(batch)
                self._failures, self._error = 0, None
                drained = self._idling = not self._queue
                self._cond.notify_all()  # the writers waiting on this commit go on at once
            if drained:
                self._safely(self.on_idle)
                with self._cond:
                    self._idling = False
                    self._cond.notify_all()

    def _next_batch(self) -> list[PendingCommit] | None:
        """Wait for work, let the window fill, and take one actor's run of operations."""
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            now = time.monotonic()
            deadline = now + (self.window or self.group_wait)
            if not self.window and self._returning:
                # a writer back by then announces itself, and gets group_wait to submit
                back_by = now + self.group_return
                deadline = back_by + self.group_wait
            else:
                back_by = now
            while not (self._stopping or self._flushers or self._full()):
                now = time.monotonic()
                if now >= back_by:
                    self._returning = 0  # not back in time: gone, or doing something else
                if not self.window and not self._coming and not self._returning:
                    break
                remaining = (deadline if self.window or self._coming else back_by) - now
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
