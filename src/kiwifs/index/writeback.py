"""A server's writes indexed by a thread of their own, in batches, instead of inside each write.

Updating a written file's rows (read it back, parse it, one SQLite transaction: the file row,
its words, its compressed text, the change log) cost about 0.9 ms of a write's ~3 ms inside
``kiwifs serve``, under the root's write lock, and each transaction adds about eleven 16 KiB
pages to the write-ahead log. While a server runs (a watcher keeps the index current), a write
therefore only names its paths here and goes on; this thread refreshes every path named since
its last round in one transaction, a round at most ``window`` seconds after the first path
came, so concurrent writers share transactions as they share commits. The window (50 ms) is
as long as the watcher's debounce, so the event a write raises usually finds its path still
queued and costs nothing (measured: 50 ms against 10 ms, +20–29 % writes/s with
``--async-commit`` and +27 % with group commit from 4 clients; see docs/dev/benchmarks-log.md).

Nothing reads a row older than a write that returned: every answer from the index first calls
:meth:`Writeback.settle`, which has the paths named so far indexed at once (the window cut
short) and waits for them. The watcher's refresh leaves out the paths queued here, which the
round reads from disk anyway, after the event that named them. A round reads each file as it
is then, under the same checks as any refresh (a record whose file moved since it was read is
read again), so a path named twice is indexed once, as it is last. A failed round is logged and
left to the watcher's periodic reconcile, as a failed refresh inside a write was.
``Tuning.index_writeback`` off indexes each write inside it (the plain path, see
:class:`~kiwifs.index.upkeep.IndexKeeper`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

# seconds a round waits for more paths after the first (a reader cuts it short):
# Tuning.writeback_window, as long as the watcher's debounce
WINDOW = 0.05
MAX_PATHS = 500  # a round starts at once with this many paths queued


class Writeback:
    """Paths written and not indexed yet, and the thread that indexes them."""

    def __init__(self, refresh: Callable[[list[str]], object], window: float = WINDOW) -> None:
        self._refresh = refresh
        self._window = window
        self._cond = threading.Condition()
        self._queued: dict[str, None] = {}  # in the order named
        self._busy = False  # a round is indexing paths taken from the queue
        self._taken: frozenset[str] = frozenset()  # that round's paths
        self._urgent = 0  # readers waiting: no window
        self._rounds = 0  # rounds finished, for settle() to wait on
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="kiwifs-writeback", daemon=True)
        self._thread.start()

    def add(self, paths: Iterable[str]) -> bool:
        """Queue ``paths`` (just written) for the next round; False, queueing nothing, once
        closing (the caller indexes them itself)."""
        with self._cond:
            if self._stop:
                return False
            for path in paths:
                self._queued[path] = None
            self._cond.notify_all()
            return True

    def unqueued(self, paths: Iterable[str]) -> list[str]:
        """The ``paths`` not queued here (the watcher's refresh: a queued path is read by the
        coming round, after the event that named it).

        A path the running round has taken is waited for: its event usually comes while the
        round reads it, before the round has stored its row, and the watcher would then find
        the file new to the index and index it a second time (a quarter of all writes from 4
        clients, measured). Once the round is done its row holds those bytes, and the
        watcher's check costs one read."""
        wanted = list(paths)
        with self._cond:
            while self._busy and not self._taken.isdisjoint(wanted) and self._thread.is_alive():
                self._cond.wait(0.5)
            return [p for p in wanted if p not in self._queued]

    def settle(self) -> None:
        """Return once every path queued before the call is indexed (a reader's barrier)."""
        with self._cond:
            if not self._queued and not self._busy:
                return
            # the round running (its paths taken before this call), then the next one
            target = self._rounds + self._busy + bool(self._queued)
            self._urgent += 1
            self._cond.notify_all()
            try:
                while self._rounds < target and self._thread.is_alive():
                    if not self._queued and not self._busy:
                        return
                    self._cond.wait(0.5)
            finally:
                self._urgent -= 1

    def close(self) -> None:
        """Index what is queued, then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()

    def _take(self) -> list[str] | None:
        """The next round's paths, after its window; ``None`` once stopped and empty."""
        with self._cond:
            while not self._queued:
                if self._stop:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self._window
            while (
                not self._stop
                and not self._urgent
                and len(self._queued) < MAX_PATHS
                and (left := deadline - time.monotonic()) > 0
            ):
                self._cond.wait(left)
            paths = list(self._queued)
            self._queued.clear()
            self._busy = True
            self._taken = frozenset(paths)  # the watcher waits for this round to check them
            return paths

    def _run(self) -> None:
        while (paths := self._take()) is not None:
            try:
                self._refresh(paths)
            except Exception:  # the watcher's periodic reconcile repairs what this missed
                log.exception("index update after writes failed; the next reconcile repairs it")
            finally:
                with self._cond:
                    self._busy = False
                    self._rounds += 1
                    self._cond.notify_all()
