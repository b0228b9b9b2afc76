"""The index database's connections: one writer under a lock, a pool of readers, transactions.

WAL lets the readers go on while the writer writes, so an answer never waits for a write; every
commit through the writer moves :attr:`Database.generation`, and a commit that may have changed
a file row moves :attr:`Database.rows_generation` too. A database that cannot be opened is told
apart here: busy (another connection holds it: wait, never reset), damaged (delete it and start
empty) or impossible in this root (:class:`IndexUnavailable`: the callers fall back).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from kiwifs.index.schema import INSTANCES, SCHEMA_VERSION, recreate, tune_merging
from kiwifs.index.texts import register
from kiwifs.tuning import Tuning

STATE_DIR = ".kiwi/state"
INDEX_FILE = "index.db"
BUSY_TIMEOUT = 10.0  # seconds a statement waits for another connection's write lock
# Pages of 16 KiB instead of SQLite's 4 KiB: rows of ~0.5-1 KB (file rows, compressed texts)
# waste a part of a row at the end of every page, 7 % of the index at 4 KiB, 1 % at 16 KiB.
PAGE_SIZE = 16384


class IndexUnavailable(Exception):
    """The index cannot live in this root (read-only, no ``.kiwi/state``): use the plain scan."""


_DAMAGE_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_busy(exc: sqlite3.Error) -> bool:
    """Another connection held a lock longer than the busy timeout: wait or retry, never reset."""
    code = _primary_code(exc)
    if code is not None:
        return code in _BUSY_CODES
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def is_damage(exc: sqlite3.Error) -> bool:
    """A damaged or foreign database (rebuild it), not a busy one or a bad query (don't).

    A busy database, a full disk or a bad query says nothing about the file: throwing the
    index away then would cost a full rebuild and, for a busy one, pull it from under the
    process holding it. Nor does a value SQLite refuses (``DataError``: "string or blob too
    big"): a rebuild would store the same value and fail again, for ever.
    """
    if is_busy(exc) or isinstance(exc, sqlite3.DataError):
        return False
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    if _primary_code(exc) in _DAMAGE_CODES:
        return True
    if not isinstance(exc, sqlite3.OperationalError):
        return True
    text = str(exc)
    return "no such table" in text or "no such column" in text


class Database:
    """The index database file of one root and its connections. Thread-safe; close it when
    done. :class:`~kiwifs.index.core.Index` is this with the file rows kept equal to the files."""

    def __init__(
        self,
        root: Path,
        path: Path | None = None,
        busy_timeout: float = BUSY_TIMEOUT,
        tuning: Tuning | None = None,
    ) -> None:
        self.root = Path(root)
        self.path = Path(path) if path is not None else self.root / STATE_DIR / INDEX_FILE
        self.busy_timeout = busy_timeout
        self.tuning = tuning or Tuning()
        self._lock = threading.RLock()
        self._pool: list[sqlite3.Connection] = []
        self._all_readers: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self.generation = 0  # bumped by every commit made through this object
        # bumped only when a file's content (its blob id) or presence may have changed: not by
        # the side tables (timeline, vectors, check cache), folder digests, or a racy row read
        # again with the same content; work derived from the rows knows when to run again
        self.rows_generation = 0
        self._writer = self._open_writer()
        self._finalizer = weakref.finalize(self, _close_all, self._all_readers, [self._writer])

    # -- connections ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        register(conn)
        return conn

    def _open_writer(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise IndexUnavailable(f"cannot create {self.path.parent}: {exc}") from exc
        if not os.access(self.path.parent, os.W_OK):
            raise IndexUnavailable(f"{self.path.parent} is not writable")
        try:
            return self._prepare()
        except sqlite3.DatabaseError as exc:
            if is_busy(exc):
                raise  # the file is fine and in use: the caller waits or reports it
            if not is_damage(exc):
                raise IndexUnavailable(f"cannot open {self.path}: {exc}") from exc
            self._remove_files()
            try:
                return self._prepare()
            except sqlite3.DatabaseError as again:
                if is_busy(again):
                    raise
                raise IndexUnavailable(f"cannot open {self.path}: {again}") from again

    def _prepare(self) -> sqlite3.Connection:
        """Open the writer; a database of another schema version is deleted and made afresh."""
        conn = self._connect()
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                conn.close()
                self._remove_files()
                conn = self._connect()
                version = 0
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only a new, empty file takes it
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            if version == 0:
                recreate(conn, self.tuning.fts_merge)
            else:
                tune_merging(conn, self.tuning.fts_merge)
            conn.execute("SELECT count(*) FROM files").fetchone()
        except BaseException:
            conn.close()
            raise
        return conn

    def _remove_files(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)

    @contextlib.contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """Borrow a read connection (WAL readers never wait for the writer)."""
        with self._pool_lock:
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = self._connect()
            conn.execute(INSTANCES)  # (temporary: made before the connection is read-only)
            conn.execute("PRAGMA query_only = 1")
            with self._pool_lock:
                self._all_readers.append(conn)
        try:
            yield conn
        finally:
            with self._pool_lock:
                self._pool.append(conn)

    def close(self) -> None:
        with self._lock, self._pool_lock:
            for conn in self._all_readers:
                conn.close()
            self._all_readers.clear()
            self._pool.clear()
            self._writer.close()
            self._finalizer.detach()

    def reset(self) -> None:
        """Throw the database away and start empty (a corrupt file found while running)."""
        with self._lock:
            self._forget()
            self.close()
            self._remove_files()
            self.generation += 1
            self.rows_generation += 1
            self._writer = self._open_writer()
            self._finalizer = weakref.finalize(self, _close_all, self._all_readers, [self._writer])

    def _forget(self) -> None:
        """Drop what memory holds about the rows of the file being thrown away (lock held)."""

    # -- writing ----------------------------------------------------------------------------

    # -- writing ----------------------------------------------------------------------------

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write transaction on the writer connection (for tables kept beside the file rows:
        it moves :attr:`generation`, not :attr:`rows_generation`)."""
        return self._transaction(rows=False)

    @contextlib.contextmanager
    def _transaction(self, rows: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            self.generation += 1
            self.rows_generation += rows

    def size_bytes(self) -> int:
        """Bytes on disk of the database and its WAL."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(str(self.path) + suffix).st_size
        return total

    def checkpoint(self) -> None:
        with self._lock:
            self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _close_all(*groups: list[sqlite3.Connection]) -> None:
    """Close connections of an index nobody closed (garbage-collected ``Knowledge``)."""
    for group in groups:
        for conn in group:
            conn.close()
