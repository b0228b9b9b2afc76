"""The tables that hold embeddings beside the text index, and the triggers that queue work.

Vectors are stored by content: a file's chunks are keyed by its ETag (the git blob id of its
bytes), so a rename, a copy or a rebuild of the text index never re-embeds anything, and a
chunk is valid exactly while some file row still has its ETag. A query starts from the ``files``
rows, so chunks of content that no longer exists never surface (they are collected later).

* ``vec_chunks`` — one row per embedded chunk: ETag, number, character span, float32 vector
  (L2-normalised, little-endian: sqlite-vec's vector format).
* ``vec_done`` — the ETags whose chunks are all stored (a body without words has none).
* ``vec_queue`` — ETags waiting to be embedded, with their failed attempts and next try.
  A failed embedding stays here, retried with backoff and counted; nothing leaves the queue
  except by being embedded or by no file having that content any more.
* ``vec_log`` — the ETags whose chunks were stored or removed, in order (``seq`` only grows):
  a process's in-memory matrix reads again only the contents named after its position.
* ``vec_meta`` — ``enabled`` (does this root embed?), ``identity`` (embedder and chunking the
  stored vectors were made with), ``generation`` (a random token, new whenever every vector is
  thrown away: an in-memory matrix of another generation is loaded afresh) and ``failures``
  (failed attempts, ever).

The triggers test for an existing entry rather than ``INSERT OR IGNORE``: inside a trigger the
outer statement's conflict policy (the row upsert's ABORT) would override the IGNORE.

While vectors are on, triggers put a file's ETag in the queue in the same transaction that
writes its row, so every path that changes a row — a write through kiwifs, the watcher, a
reconcile after an out-of-band edit, a rebuild — queues its embedding without knowing vectors
exist.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Protocol

from kiwifs.index import changelog

VECTOR_SCHEMA = """
CREATE TABLE IF NOT EXISTS vec_chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    etag TEXT NOT NULL,
    seq INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS vec_chunks_etag ON vec_chunks(etag, seq);
CREATE TABLE IF NOT EXISTS vec_done (etag TEXT PRIMARY KEY, chunks INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vec_queue (
    etag TEXT PRIMARY KEY,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try REAL NOT NULL DEFAULT 0,
    error TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vec_queue_due ON vec_queue(next_try);
CREATE TABLE IF NOT EXISTS vec_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vec_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, etag TEXT NOT NULL);
"""

# The triggers that queue a written row's content. They exist only while vectors are on (made
# and dropped with the indexes below): without vectors their condition is false for every row,
# yet testing it cost a third of the file rows' insert in a rebuild. The condition stays, so
# that a root whose vectors are switched off by another process never queues.
QUEUE_TRIGGERS = {
    "vec_queue_on_insert": """CREATE TRIGGER IF NOT EXISTS vec_queue_on_insert
AFTER INSERT ON files
WHEN NEW.unreadable = 0
    AND EXISTS (SELECT 1 FROM vec_meta WHERE key = 'enabled' AND value = '1')
BEGIN
    INSERT INTO vec_queue (etag) SELECT NEW.etag
    WHERE NOT EXISTS (SELECT 1 FROM vec_done WHERE etag = NEW.etag)
        AND NOT EXISTS (SELECT 1 FROM vec_queue WHERE etag = NEW.etag);
END""",
    "vec_queue_on_update": """CREATE TRIGGER IF NOT EXISTS vec_queue_on_update
AFTER UPDATE OF etag, unreadable ON files
WHEN NEW.unreadable = 0
    AND EXISTS (SELECT 1 FROM vec_meta WHERE key = 'enabled' AND value = '1')
BEGIN
    INSERT INTO vec_queue (etag) SELECT NEW.etag
    WHERE NOT EXISTS (SELECT 1 FROM vec_done WHERE etag = NEW.etag)
        AND NOT EXISTS (SELECT 1 FROM vec_queue WHERE etag = NEW.etag);
END""",
}

# Indexes of the file rows that only the vector side reads (the queue's joins by content, the
# semantic candidates by filter): made when vectors are switched on, dropped when they are
# switched off; 11 MB of a 100k-episode index that does not embed. The candidate indexes carry
# the path so that a path prefix is tested in the index: without it every candidate row is read
# from the table (the candidate query at 100k with ``episodes/``: 320 ms, with it 40 ms).
VECTOR_FILE_INDEXES = {
    "files_etag": "CREATE INDEX IF NOT EXISTS files_etag ON files(etag)",
    "files_recall": "CREATE INDEX IF NOT EXISTS files_recall"
    " ON files(superseded, unreadable, etag, id, path)",
    "files_scope": "CREATE INDEX IF NOT EXISTS files_scope"
    " ON files(scope, superseded, unreadable, etag, id, path) WHERE scope IS NOT NULL",
}
VECTORS_ENABLED = "SELECT 1 FROM vec_meta WHERE key = 'enabled' AND value = '1'"


def add_vector_upkeep(conn: sqlite3.Connection) -> None:
    """The indexes and triggers that only a root with vectors needs."""
    for sql in (*VECTOR_FILE_INDEXES.values(), *QUEUE_TRIGGERS.values()):
        conn.execute(sql)


def drop_vector_upkeep(conn: sqlite3.Connection) -> None:
    for name in VECTOR_FILE_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    for name in QUEUE_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")


class Connections(Protocol):
    """What :func:`disable` asks of an index (:class:`~kiwifs.index.core.Index`): named here,
    since the index's modules import this one for its schema and cannot be imported back."""

    def reader(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...


def disable(index: Connections) -> None:
    """Vectors are off for this root: stop queueing (the stored vectors are kept for later).

    Here, not in :mod:`kiwifs.index.vectors.store`, because every opening of an index calls it and
    the vector side (chunking, embedders) need not load for a root that does not embed. An index
    made before the triggers came and went with vectors has them although vectors are off: they
    are dropped here too."""
    with index.reader() as conn:
        row = conn.execute("SELECT value FROM vec_meta WHERE key = 'enabled'").fetchone()
        idle = _upkeep_count(conn, "trigger", QUEUE_TRIGGERS) > 0
    if (row is None or row[0] != "1") and not idle:
        return
    with index.transaction() as conn:
        conn.execute("UPDATE vec_meta SET value = '0' WHERE key = 'enabled'")
        conn.execute("DELETE FROM vec_queue")
        drop_vector_upkeep(conn)


def has_vector_upkeep(conn: sqlite3.Connection) -> bool:
    return _upkeep_count(conn, "index", VECTOR_FILE_INDEXES) == len(
        VECTOR_FILE_INDEXES
    ) and _upkeep_count(conn, "trigger", QUEUE_TRIGGERS) == len(QUEUE_TRIGGERS)


def _upkeep_count(conn: sqlite3.Connection, kind: str, names: dict[str, str]) -> int:
    marks = ",".join("?" * len(names))
    sql = f"SELECT count(*) FROM sqlite_schema WHERE type = ? AND name IN ({marks})"
    return int(conn.execute(sql, (kind, *names)).fetchone()[0])


# Queue every readable file's content that has no vectors yet (vectors switched on, a new model).
QUEUE_MISSING = (
    "INSERT OR IGNORE INTO vec_queue (etag) SELECT DISTINCT f.etag FROM files f"
    " WHERE f.unreadable = 0 AND NOT EXISTS (SELECT 1 FROM vec_done d WHERE d.etag = f.etag)"
)
# A new generation of the stored vectors (all thrown away): a random token, so that a cache of
# the vectors of another database file (an index deleted and made again) never matches.
NEW_GENERATION = (
    "INSERT OR REPLACE INTO vec_meta (key, value) VALUES ('generation', lower(hex(randomblob(8))))"
)


def log_changed(conn: sqlite3.Connection, etags: list[str]) -> None:
    """Note in ``vec_log`` that these contents' vectors were stored or removed, in the caller's
    write transaction: every process's in-memory matrix catches up from it
    (:mod:`index.vectors.matrix`)."""
    changelog.append(conn, "vec_log", "etag", etags)
