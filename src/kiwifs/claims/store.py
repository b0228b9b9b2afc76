"""The claims store: who holds which path, until when (``.kiwi/state/claims.db``).

A claim is a lease on one path: a holder, the instant it was taken and the instant it expires
(absolute UTC seconds, so a lease outlives a restart of the server and is judged against the
clock). There is at most one row per path; a row whose lease has expired is free for anyone, and
the next claim on the path replaces it. Two kinds share the table, so that one path is never held
twice: *memory* claims (episodes handed out by the consolidation queue; nothing is written to the
file) and *file* claims (KiwiFS's generic claims, mirrored in the file's frontmatter).

The store is SQLite in WAL mode. Every change runs in one ``BEGIN IMMEDIATE`` transaction, which
takes SQLite's write lock at once: two processes (a ``kiwifs serve`` and a ``kiwifs memory claim``
next to it) or two threads decide in turn, never on the same snapshot. Claims are leases, not
data: a store found corrupt is thrown away and started empty, with a warning in the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from kiwifs.errors import Busy, StorageError
from kiwifs.index.connections import is_busy, is_damage
from kiwifs.memory.leases import Claim

log = logging.getLogger(__name__)

STATE_DIR = ".kiwi/state"
CLAIMS_FILE = "claims.db"
BUSY_TIMEOUT = 10.0
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    path TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    kind TEXT NOT NULL,
    episode_id TEXT NOT NULL DEFAULT '',
    claimed_at REAL NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS claims_holder ON claims(holder, expires);
"""
COLUMNS = "path, holder, kind, episode_id, claimed_at, expires"


class Tx:
    """The statements of one open transaction (see :meth:`ClaimStore.transaction`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def get(self, path: str) -> Claim | None:
        row = self.conn.execute(f"SELECT {COLUMNS} FROM claims WHERE path = ?", (path,)).fetchone()
        return Claim(*row) if row is not None else None

    def all(self) -> list[Claim]:
        return [Claim(*r) for r in self.conn.execute(f"SELECT {COLUMNS} FROM claims")]

    def live(self, now: float) -> dict[str, Claim]:
        rows = self.conn.execute(f"SELECT {COLUMNS} FROM claims WHERE expires > ?", (now,))
        return {r[0]: Claim(*r) for r in rows}

    def held_by(self, holder: str) -> list[Claim]:
        rows = self.conn.execute(f"SELECT {COLUMNS} FROM claims WHERE holder = ?", (holder,))
        return [Claim(*r) for r in rows]

    def put(self, claims: Iterable[Claim]) -> None:
        self.conn.executemany(
            f"INSERT OR REPLACE INTO claims ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            [(c.path, c.holder, c.kind, c.episode_id, c.claimed_at, c.expires) for c in claims],
        )

    def delete(self, paths: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM claims WHERE path = ?", [(p,) for p in paths])


class ClaimStore:
    """The claims of one root. Thread-safe; opened on first use, never created by a read."""

    def __init__(self, root: Path, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.path = Path(root) / STATE_DIR / CLAIMS_FILE
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- opening ----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, check_same_thread=False, isolation_level=None
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                conn.executescript("DROP TABLE IF EXISTS claims;" + SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("SELECT count(*) FROM claims").fetchone()
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path.parent}: {exc}") from exc
        try:
            self._conn = self._connect()
        except sqlite3.DatabaseError as exc:
            if is_busy(exc):
                raise self._busy() from exc
            if not is_damage(exc):
                raise StorageError(f"cannot open the claims store {self.path}: {exc}") from exc
            self._rebuild(exc)
            self._conn = self._connect()
        return self._conn

    def _rebuild(self, exc: BaseException) -> None:
        """Throw a damaged store away: claims are leases, and holders claim again."""
        log.warning("claims store %s is unusable (%s); starting it empty", self.path, exc)
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)

    def _busy(self) -> Busy:
        return Busy(
            f"the claims store is busy: another connection held {STATE_DIR}/{CLAIMS_FILE}"
            f" for more than {self.busy_timeout:g} s; try again"
        )

    # -- using ------------------------------------------------------------------------------

    def exists(self) -> bool:
        return self._conn is not None or self.path.is_file()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends, rolled back when
        it raises. A damaged store is rebuilt empty and the block is not retried (the caller's
        view of the claims would be stale); the caller gets :class:`StorageError` and may retry.
        """
        with self._lock:
            conn = self._open()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise self._failure(exc) from exc
            try:
                yield Tx(conn)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.rollback()
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.rollback()
                raise self._failure(exc) from exc

    def _failure(self, exc: sqlite3.DatabaseError) -> Exception:
        if is_busy(exc):
            return self._busy()
        if is_damage(exc):
            self._rebuild(exc)
            return StorageError("the claims store was damaged and has been reset; try again")
        return StorageError(f"claims store failed: {exc}")

    def read_path(self, path: str) -> Claim | None:
        """The row of one path (live or not) without opening a write transaction; ``None``
        when there is none or no store exists yet."""
        if not self.exists():
            return None
        with self._lock:
            try:
                row = (
                    self._open()
                    .execute(f"SELECT {COLUMNS} FROM claims WHERE path = ?", (path,))
                    .fetchone()
                )
            except sqlite3.DatabaseError as exc:
                if is_damage(exc):
                    self._rebuild(exc)
                    return None
                raise self._failure(exc) from exc
        return Claim(*row) if row is not None else None

    def read(self, now: float, live_only: bool = True) -> list[Claim]:
        """The claims (live ones unless told otherwise) without opening a write transaction;
        nothing when no store exists yet (a read never creates one)."""
        if not self.exists():
            return []
        with self._lock:
            try:
                conn = self._open()
                sql = f"SELECT {COLUMNS} FROM claims" + (" WHERE expires > ?" if live_only else "")
                rows = conn.execute(sql, (now,) if live_only else ()).fetchall()
            except sqlite3.DatabaseError as exc:
                if is_damage(exc):
                    self._rebuild(exc)
                    return []
                raise self._failure(exc) from exc
        return [Claim(*r) for r in rows]
