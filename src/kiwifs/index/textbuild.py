"""The full-text index of a rebuild, made by a process of its own while this one loads rows.

Tokenising every text into FTS5 is the largest serial piece of a rebuild (about half of the
loading process's CPU at 100k files), and one SQLite database has one writer. So the rebuild
forks a builder that fills an FTS5 table of the *same definition* (read from the index itself)
in a scratch database beside the index, fed the texts through a pipe, while the loading process
writes the file rows, texts and coverage. At the end the builder's finished FTS5 storage (its
shadow tables: segments, segment index, document sizes, configuration) is copied row for row
into the index's empty table, inside the rebuild's one transaction: the same documents, words
and statistics as inserting the same texts there (only the segments' layout differs), so
answers, scores and later updates are the same.

The builder also gives FTS5 a larger in-memory hash (:data:`HASH_BYTES`): fewer, larger
segments to flush and merge make its tokenising a fifth cheaper. (In the loading process the
hash never filled: a statement on any other table makes FTS5 flush its pending terms.) The
setting is not copied: the index's table keeps FTS5's default for the small writes that follow.

Anything unusual (no safe fork, a builder that dies or reports an error) makes the caller index
the texts itself from ``bodies``: slower, same result.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import traceback
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

from kiwifs.forking import fork_is_safe

from .bodies import unpack

HASH_BYTES: int | None = 32 << 20  # FTS5's pending-terms hash; None: FTS5's default (1 MiB)
FTS_TABLE = "fts"
INSERT_TEXT = f"INSERT INTO {FTS_TABLE} (rowid, body) VALUES (?, ?)"
PARENT_CHECK = 1.0  # seconds between checks that the rebuilding process still runs
COPY_BATCH = 2000  # texts per executemany when the caller indexes them itself

Texts = list[tuple[int, str]]


def table_sql(conn: sqlite3.Connection) -> str:
    """The index's own definition of the full-text table, to build the same one elsewhere."""
    row = conn.execute(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (FTS_TABLE,)
    ).fetchone()
    if row is None:
        raise sqlite3.DatabaseError(f"no {FTS_TABLE} table to build")
    return str(row[0])


class TextBuilder:
    """A forked process filling an FTS5 table in ``path`` from the texts it is sent."""

    def __init__(self, path: str, ddl: str) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        context = multiprocessing.get_context("fork")
        receiver, self._pipe = context.Pipe(duplex=False)
        self._answer, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_build, args=(path, ddl, HASH_BYTES, receiver, sender), daemon=True
        )
        self._process.start()
        receiver.close()  # only the builder holds these ends: its death is an EOF here
        sender.close()
        self._failed = False

    def add(self, texts: Texts) -> None:
        """Send texts to index (in row id order); a dead builder is noticed at :meth:`finish`."""
        if self._failed or not texts:
            return
        try:
            self._pipe.send(texts)
        except OSError:
            self._failed = True

    def finish(self) -> bool:
        """Wait for the builder; True when ``path`` holds the finished table."""
        try:
            if not self._failed:
                self._pipe.send(None)
            self._pipe.close()
            ok = not self._failed and self._answer.poll(None) and self._answer.recv() == "ok"
        except (OSError, EOFError):
            ok = False
        self._process.join()
        self._answer.close()
        return bool(ok) and self._process.exitcode == 0

    def abandon(self) -> None:
        """Stop the builder and remove its file (the rebuild failed)."""
        with contextlib.suppress(OSError):
            self._pipe.close()
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._answer.close()
        self.remove()

    def remove(self) -> None:
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + suffix)


def start(conn: sqlite3.Connection, path: str) -> TextBuilder | None:
    """A builder for the index of ``conn`` (``None`` when this process may not fork)."""
    if not fork_is_safe():
        return None
    try:
        return TextBuilder(path, table_sql(conn))
    except OSError:
        return None


def _build(
    path: str, ddl: str, hash_bytes: int | None, texts: Connection, answer: Connection
) -> None:
    """The builder's loop: one transaction, no journal (a scratch file: a crash discards it)."""
    parent = os.getppid()
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute(ddl)
        if hash_bytes is not None:
            conn.execute(
                f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rank) VALUES ('hashsize', ?)",
                (hash_bytes,),
            )
        conn.execute("BEGIN")
        while (batch := _next(texts, parent)) is not None:
            conn.executemany(INSERT_TEXT, batch)
        conn.execute("COMMIT")
        conn.close()
        answer.send("ok")
    except BaseException:  # noqa: BLE001 - the parent falls back; it needs only to know
        with contextlib.suppress(OSError):
            answer.send(traceback.format_exc())


def _next(texts: Connection, parent: int) -> Texts | None:
    """The next batch; the end when the parent is gone (killed: other children it forked may
    still hold the pipe open, so its end of file may never come)."""
    while not texts.poll(PARENT_CHECK):
        if os.getppid() != parent:
            raise EOFError("the rebuilding process is gone")
    batch: Texts | None = texts.recv()
    return batch


def copy_into(conn: sqlite3.Connection, path: str) -> None:
    """Replace the (empty) full-text table of ``conn`` with the one built in ``path``.

    Inside the caller's transaction. Every shadow table the builder's FTS5 made is copied
    (whatever the definition makes: data, idx, docsize, config, content); the builder's hash
    size is left out of the configuration, so the index's table keeps FTS5's default.
    """
    built = sqlite3.connect(path)
    try:
        shadows = built.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE ? ESCAPE '\\'",
            (FTS_TABLE + "\\_%",),
        ).fetchall()
        for (table,) in shadows:
            conn.execute(f'DELETE FROM "{table}"')
            width = len(built.execute(f'SELECT * FROM "{table}" LIMIT 0').description)
            marks = ", ".join("?" * width)
            where = " WHERE k <> 'hashsize'" if table == f"{FTS_TABLE}_config" else ""
            conn.executemany(
                f'INSERT INTO "{table}" VALUES ({marks})',
                built.execute(f'SELECT * FROM "{table}"{where}'),
            )
    finally:
        built.close()


def index_stored_texts(conn: sqlite3.Connection) -> None:
    """Index every stored text into the full-text table here (the fallback)."""
    rows = conn.execute("SELECT id, text FROM bodies ORDER BY id").fetchall()
    for start_at in range(0, len(rows), COPY_BATCH):
        batch: list[tuple[int, Any]] = [
            (int(i), unpack(conn, blob)) for i, blob in rows[start_at : start_at + COPY_BATCH]
        ]
        conn.executemany(INSERT_TEXT, batch)


def send_all(builder: TextBuilder | None, conn: sqlite3.Connection, texts: Iterable[Any]) -> None:
    """Texts to the builder, or into ``conn``'s table when there is none."""
    batch = list(texts)
    if builder is None:
        conn.executemany(INSERT_TEXT, batch)
    else:
        builder.add(batch)
