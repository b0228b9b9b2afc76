"""How one file becomes rows of the index, and how ``covered`` is kept true as rows change.

A file is one ``files`` row (stat signature, ETag, frontmatter JSON, memory facts and its report
entry as printed; whether it was forgotten is the generated column ``superseded``), its text in
``fts``, and its ``merged-from`` keys in ``cover_ids`` (episode ids) and ``cover_paths`` (paths).
``files.covered`` says "some merged-from cites this episode"; every change records which ids and
paths it touched (:class:`Touched`) and recomputes ``covered`` for exactly those, or for every row
when a change is large.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from kiwifs.memory.rules import ID_TYPES, NOT_EPISODIC_KINDS

from .record import FileRecord, db_text, parent_key, path_key
from .report import entry_text

FULL_COVER_UPDATE = 2000  # touched ids and paths above which all of ``covered`` is recomputed

COVER_SQL = (
    "UPDATE files SET covered = ((eid IS NOT NULL AND EXISTS "
    "(SELECT 1 FROM cover_ids c WHERE c.ident = files.eid)) OR EXISTS "
    "(SELECT 1 FROM cover_paths p WHERE p.target = files.key))"
)

NEVER, ALWAYS, BY_PREFIX = 0, 1, 2


def kind_class(memory_kind: str, unreadable: bool) -> int:
    """Classification (docs/memory.md), split into the part known at index time and the part
    that needs the prefix."""
    kind = memory_kind.strip().lower()
    if unreadable or kind in NOT_EPISODIC_KINDS:
        return NEVER
    return ALWAYS if kind == "episodic" else BY_PREFIX


def cover_idents(id_keys: Iterable[str]) -> set[str]:
    """The episode ids that ``type:id`` keys cover (only the id types cover by id)."""
    out: set[str] = set()
    for key in id_keys:
        for typ in ID_TYPES:
            if key.startswith(typ + ":"):
                out.add(key[len(typ) + 1 :])
    return out


class Touched:
    """Episode ids and paths whose coverage may have changed inside one transaction."""

    def __init__(self, full: bool = False) -> None:
        self.full = full
        self.idents: set[str | bytes] = set()
        self.targets: set[bytes] = set()
        self.ids: set[int] = set()

    def add_file(self, conn: sqlite3.Connection, file_id: int) -> None:
        """Remember what an existing row covered before it is replaced or deleted."""
        if self.full:
            return
        self.ids.add(file_id)
        q = "SELECT ident FROM cover_ids WHERE file_id = ?"
        self.idents.update(r[0] for r in conn.execute(q, (file_id,)))
        q = "SELECT target FROM cover_paths WHERE file_id = ?"
        self.targets.update(r[0] for r in conn.execute(q, (file_id,)))

    def recompute(self, conn: sqlite3.Connection) -> None:
        if self.full or len(self.idents) + len(self.targets) > FULL_COVER_UPDATE:
            conn.execute(COVER_SQL)
            return
        conn.executemany(COVER_SQL + " WHERE eid = ?", ((i,) for i in self.idents))
        conn.executemany(COVER_SQL + " WHERE key = ?", ((t,) for t in self.targets))
        conn.executemany(COVER_SQL + " WHERE id = ?", ((i,) for i in self.ids))


def delete_row(conn: sqlite3.Connection, key: bytes, touched: Touched) -> None:
    row = conn.execute("SELECT id FROM files WHERE key = ?", (key,)).fetchone()
    if row is None:
        return
    file_id = row[0]
    touched.add_file(conn, file_id)
    touched.targets.add(key)
    conn.execute("DELETE FROM cover_ids WHERE file_id = ?", (file_id,))
    conn.execute("DELETE FROM cover_paths WHERE file_id = ?", (file_id,))
    conn.execute("DELETE FROM fts WHERE rowid = ?", (file_id,))
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
    conn.execute(FORGET_DIGEST, (parent_key(key),))


UPSERT = (
    "INSERT INTO files (key, parent, path, sig, size, mtime_ns, etag, frontmatter, memory_kind,"
    " kind_class, episode_id, eid, refs, id_keys, path_keys, warnings, unreadable, entry, created)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET path = excluded.path, sig = excluded.sig,"
    " size = excluded.size, mtime_ns = excluded.mtime_ns, etag = excluded.etag,"
    " frontmatter = excluded.frontmatter, memory_kind = excluded.memory_kind,"
    " kind_class = excluded.kind_class, episode_id = excluded.episode_id, eid = excluded.eid,"
    " refs = excluded.refs, id_keys = excluded.id_keys, path_keys = excluded.path_keys,"
    " warnings = excluded.warnings, unreadable = excluded.unreadable, entry = excluded.entry,"
    " created = excluded.created"
    " RETURNING id"
)

# A folder whose rows change no longer matches the digest it was last reconciled against.
FORGET_DIGEST = (
    "INSERT INTO dirs (key, digest, entries) VALUES (?, NULL, 0)"
    " ON CONFLICT (key) DO UPDATE SET digest = NULL WHERE digest IS NOT NULL"
)


def upsert_row(conn: sqlite3.Connection, record: FileRecord, touched: Touched, fresh: bool) -> None:
    f = record.facts
    if not fresh:
        row = conn.execute("SELECT id FROM files WHERE key = ?", (record.key,)).fetchone()
        if row is not None:
            touched.add_file(conn, row[0])
            conn.execute("DELETE FROM cover_ids WHERE file_id = ?", (row[0],))
            conn.execute("DELETE FROM cover_paths WHERE file_id = ?", (row[0],))
            conn.execute("DELETE FROM fts WHERE rowid = ?", (row[0],))
    ident = f.episode_id.strip()
    kclass = kind_class(f.memory_kind, f.unreadable)
    entry = entry_text(f.path, f.episode_id, f.memory_kind) if kclass != NEVER else None
    parent = parent_key(record.key)
    values = (
        record.key,
        parent,
        db_text(f.path),
        record.sig,
        record.size,
        record.mtime_ns,
        record.etag,
        record.frontmatter,
        db_text(f.memory_kind),
        kclass,
        db_text(f.episode_id),
        db_text(ident) if ident else None,
        f.refs,
        json.dumps(f.id_keys),
        json.dumps(f.path_keys),
        json.dumps(f.warnings) if f.warnings else None,
        int(f.unreadable),
        None if entry is None else db_text(entry),
        record.created,
    )
    file_id = conn.execute(UPSERT, values).fetchone()[0]
    conn.execute(FORGET_DIGEST, (parent,))
    idents = [(i, file_id) for i in {db_text(i) for i in cover_idents(f.id_keys)}]
    conn.executemany("INSERT INTO cover_ids (ident, file_id) VALUES (?, ?)", idents)
    targets = {path_key(p) for p in f.path_keys}
    rows = [(t, file_id) for t in targets if t is not None]
    conn.executemany("INSERT INTO cover_paths (target, file_id) VALUES (?, ?)", rows)
    if not touched.full:
        touched.ids.add(file_id)
        touched.targets.add(record.key)
        if ident:
            touched.idents.add(db_text(ident))
        touched.idents.update(i for i, _ in idents)
        touched.targets.update(t for t, _ in rows)
    if not f.unreadable:
        conn.execute("INSERT INTO fts (rowid, body) VALUES (?, ?)", (file_id, record.text))
