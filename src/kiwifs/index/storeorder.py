"""The order of row stores: which paths a refresh stored since a reconcile began reading.

A reconcile reads the files it found changed outside the index's writer lock, then stores
their rows; a write through kiwifs, and its own refresh of the index, can land in between. The
store's stat check (:meth:`~kiwifs.index.store.RowStore._settled`) sees most such writes, but a
stat signature is no proof: sizes repeat, timestamps move in kernel ticks, a freed inode number
is handed out again, and an unreadable entry (a dangling link) has no stat to compare at all.

So the rule is kept by counting instead: every refresh counts its store, under the writer lock,
and a reconcile notes the count before it reads (:meth:`StoreOrder.reading`). Under the writer
lock again, it stores nothing for a path a refresh stored since: that refresh read the file
after its write, so its row is at least as new as the reconcile's read, and the next reconcile
(or the next write's refresh) has whatever came later. Exact within one process: the writes,
the writeback thread and the watcher of a server share one index object. A write from another
process is caught by the stat check alone.

Cheap by design: two lock acquisitions per reconcile that reads files, and paths are
remembered only while such a reconcile reads (a set lookup per changed file, none per file
walked).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator


class StoreOrder:
    """Refresh stores counted, and the paths stored since each reading reconcile's mark.
    Thread-safe; :meth:`stored` and :meth:`stored_since` are called under the writer lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0  # refresh stores so far
        self._marks: list[int] = []  # the counts at which the reconciles reading now began
        self._last: dict[bytes, int] = {}  # per path, the count at its last store (while reading)

    @contextlib.contextmanager
    def reading(self) -> Iterator[int]:
        """The count before a reconcile reads files (its mark), kept open until it has stored
        them; the paths stored meanwhile are remembered, then forgotten with the last mark."""
        with self._lock:
            mark = self._count
            self._marks.append(mark)
        try:
            yield mark
        finally:
            with self._lock:
                self._marks.remove(mark)
                if not self._marks:
                    self._last.clear()

    def stored(self, keys: Iterable[bytes]) -> None:
        """Count a refresh's store of the rows of ``keys`` (inside its transaction)."""
        with self._lock:
            self._count += 1
            if self._marks:
                count = self._count
                for key in keys:
                    self._last[key] = count

    def stored_since(self, mark: int) -> set[bytes]:
        """The paths a refresh stored after ``mark`` (empty, at once, when none did)."""
        with self._lock:
            if not self._last:
                return set()
            return {key for key, count in self._last.items() if count > mark}
