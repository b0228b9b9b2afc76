"""The text of each indexed file, stored once: compressed, beside a contentless FTS5 table.

A normal FTS5 table keeps its own copy of every text, which made the index twice the size of
the markdown. The full-text table is contentless instead (it holds only the inverted index),
and the text lives in ``bodies`` (row id = the file's id), zlib-compressed, which roughly
halves it. The text is still needed: FTS5 deletes a contentless row only when given the exact
text it indexed (so a rewritten or deleted file loses its old words), snippets are cut from
it, and the embedder chunks it.
"""

from __future__ import annotations

import sqlite3
import zlib

LEVEL = 6  # zlib's default: level 9 saves ~1 % more for twice the time


def pack(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8", "surrogatepass"), LEVEL)


def unpack(blob: bytes | None) -> str | None:
    if blob is None:
        return None
    return zlib.decompress(blob).decode("utf-8", "surrogatepass")


def store(conn: sqlite3.Connection, file_id: int, text: str) -> None:
    """Index ``text`` as the file's words and keep it for the next delete."""
    conn.execute("INSERT INTO bodies (id, text) VALUES (?, ?)", (file_id, pack(text)))
    conn.execute("INSERT INTO fts (rowid, body) VALUES (?, ?)", (file_id, text))


def forget(conn: sqlite3.Connection, file_id: int) -> None:
    """Remove the file's words (given the text they came from) and its stored text."""
    row = conn.execute("SELECT text FROM bodies WHERE id = ?", (file_id,)).fetchone()
    if row is None:
        return  # an unreadable file: never in the text index
    conn.execute(
        "INSERT INTO fts (fts, rowid, body) VALUES ('delete', ?, ?)", (file_id, unpack(row[0]))
    )
    conn.execute("DELETE FROM bodies WHERE id = ?", (file_id,))


def texts(conn: sqlite3.Connection, ids: list[int]) -> dict[int, str]:
    """The stored texts of ``ids`` (an id without one maps to ``""``)."""
    found: dict[int, str] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(f"SELECT id, text FROM bodies WHERE id IN ({marks})", chunk)
        found.update((int(i), unpack(blob) or "") for i, blob in rows)
    return {i: found.get(i, "") for i in ids}
