"""Change logs in the index: what changed, in order, so in-memory caches catch up cheaply.

``fts_log`` names the documents whose words changed (the term columns and the vector side's
candidates read it); ``vec_log`` the contents whose vectors were stored or removed (the vector
matrix reads it). Each is a table ``(seq INTEGER PRIMARY KEY, <key>)``: a writer appends in its
own write transaction, so every process sees a change with the change itself; a reader keeps
the last ``seq`` it caught up to and asks what came since. The oldest entries are trimmed, and
a reader whose position fell behind the oldest one left starts afresh.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

KEEP = 50_000  # entries kept per log (a reader behind the oldest starts afresh)
TRIM_EVERY = 1000  # the log is trimmed each time its seq passes a multiple of this


def append(conn: sqlite3.Connection, table: str, key: str, values: Iterable[Any]) -> None:
    """Log ``values`` in ``table`` (in the caller's write transaction), trimming it to
    :data:`KEEP` entries now and then. ``table`` and ``key`` are the module's own names."""
    before: int | None = None
    seq = 0
    for value in values:
        seq = conn.execute(f"INSERT INTO {table} ({key}) VALUES (?)", (value,)).lastrowid or 0
        if before is None:
            before = seq - 1
    if before is not None and seq > KEEP and seq // TRIM_EVERY != before // TRIM_EVERY:
        conn.execute(f"DELETE FROM {table} WHERE seq <= ?", (seq - KEEP,))


def last(conn: sqlite3.Connection, table: str) -> int:
    """The newest entry's ``seq`` (0 when the log is empty)."""
    return int(conn.execute(f"SELECT max(seq) FROM {table}").fetchone()[0] or 0)


def since(
    conn: sqlite3.Connection, table: str, key: str, position: int, most: int | None = None
) -> list[Any] | None:
    """The distinct keys logged after ``position``; ``None`` when the log no longer reaches
    back to it (trimmed past it) or names more than ``most`` keys: then start afresh."""
    first = conn.execute(f"SELECT min(seq) FROM {table}").fetchone()[0]
    if first is not None and int(first) > position + 1:
        return None
    sql = f"SELECT DISTINCT {key} FROM {table} WHERE seq > ?"
    if most is None:
        return [k for (k,) in conn.execute(sql, (position,))]
    found = [k for (k,) in conn.execute(sql + " LIMIT ?", (position, most + 1))]
    return None if len(found) > most else found
