"""The answers of recent keyword searches, kept by a server until the index changes.

Agents ask the same questions again and again (each run of a fleet starts with the same recall),
and at a million files a natural-language search costs 15–25 ms of array arithmetic however
often it was asked. So a server keeps the last :data:`~kiwifs.tuning.Tuning.search_cache`
answers (least recently used dropped), keyed by everything the answer depends on besides the
index: the query, the page, the filters, snippets or none.

**Staying exact.** Any commit to the index (a write, a reconcile, another process's command)
drops every kept answer. SQLite tells each read connection whether another connection committed
since it last asked (``PRAGMA data_version``; read connections never write), so each lookup
asks its connection: a change seen on any connection clears the cache, and an answer computed
while a clear happened is not kept (the *epoch* it started in is gone). A connection the cache
has not met yet counts as a change. A search blended with recency (it depends on the clock) is
never kept, nor one of a query longer than 2,048 characters (the keys stay small).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class AnswerCache(Generic[T]):
    """At most ``size`` answers, valid while no connection has seen the index change."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, T] = OrderedDict()
        self._versions: dict[sqlite3.Connection, int] = {}  # each connection's data_version
        self._epoch = 0  # counts the clears: an answer is kept only in the epoch it began in

    def __len__(self) -> int:
        return len(self._answers)

    def answer(self, conn: sqlite3.Connection, key: Hashable, compute: Callable[[], T]) -> T:
        """The kept answer for ``key``, or ``compute()`` (read through ``conn``) kept."""
        if self.size <= 0:
            return compute()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        with self._lock:
            if self._versions.get(conn) != version:
                self._versions[conn] = version
                self._drop()
            epoch = self._epoch
            kept = self._answers.get(key)
            if kept is not None:
                self._answers.move_to_end(key)
                return kept
        found = compute()
        with self._lock:
            if self._epoch == epoch:
                self._answers[key] = found
                while len(self._answers) > self.size:
                    self._answers.popitem(last=False)
        return found

    def clear(self) -> None:
        """Forget every answer and connection (the index file was replaced or closed)."""
        with self._lock:
            self._versions.clear()
            self._drop()

    def _drop(self) -> None:
        self._answers.clear()
        self._epoch += 1
