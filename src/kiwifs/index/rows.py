"""How one file becomes rows of the index, and how ``covered`` is kept true as rows change.

A file is one ``files`` row (stat signature, ETag, frontmatter JSON, memory facts and, when the
query cannot write it from the row, its report entry as printed (:func:`report.stored_entry`);
whether it was forgotten, ``superseded``, and its ``scope``, both read from the frontmatter
here, by the rule of :mod:`kiwifs.memory.status`), its words in
``fts``, its text in ``bodies`` (:mod:`index.texts`), and its ``merged-from`` keys in
``cover_ids`` (episode ids) and ``cover_paths`` (paths), and its links in ``links``
(:mod:`index.linkparse`: the links are replaced with the file's other rows, in the same
transaction, so the link index is exact after every write, reconcile and rebuild).
``files.covered`` says "some
merged-from cites this episode"; every change records which ids and paths it touched
(:class:`Touched`) and recomputes ``covered`` for exactly those, or for every row when a change
is large.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from kiwifs.index.linkparse import DEFAULT_TYPED_FIELDS, link_fields
from kiwifs.index.record import FileRecord, db_text, parent_key, path_key
from kiwifs.index.report import stored_entry
from kiwifs.index.schema import (
    BY_ID,
    BY_NAME,
    BY_NONE,
    BY_PATH,
    KEY_ITSELF,
    KEY_LESS_MD,
    KIND_CODES,
    key_hash,
)
from kiwifs.index.texts import Codec, TextChanges, frontmatter_codec, pack_frontmatter
from kiwifs.memory.rules import ID_TYPES, NOT_EPISODIC_KINDS
from kiwifs.memory.status import MEMORY_STATUS, is_superseded

# ``covered`` is recomputed for every row (one pass: 4.6 s at a million files) rather than for
# the ids and paths a change touched (an index lookup each) only when they are more than this
# many, and more than one in COVER_SHARE of the rows: a page citing 3,000 episodes, written to a
# root of a million, recomputes those 3,000, not the million (see full_cover).
FULL_COVER_UPDATE = 2000
COVER_SHARE = 16


def full_cover(conn: sqlite3.Connection, touched: int) -> bool:
    """Whether ``touched`` ids and paths are enough for one pass over every row to be the
    cheaper way to recompute ``covered`` (``max(id)`` stands for the row count: no scan)."""
    if touched <= FULL_COVER_UPDATE:
        return False
    rows = conn.execute("SELECT max(id) FROM files").fetchone()[0] or 0
    return touched * COVER_SHARE > rows


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
    """Episode ids and paths whose coverage may have changed inside one transaction, and the
    transaction's text changes; :meth:`finish` writes both, as its last statements."""

    def __init__(
        self,
        full: bool = False,
        texts_last: bool = True,
        typed_fields: tuple[str, ...] = DEFAULT_TYPED_FIELDS,
    ) -> None:
        self.full = full
        self.typed_fields = typed_fields  # the ``[links] typed_fields`` the links are read with
        self.idents: set[str | bytes] = set()
        self.targets: set[bytes] = set()
        self.ids: set[int] = set()
        # texts_last (Tuning.texts_last): the words written after the transaction's other
        # statements, in one FTS5 segment; False: each file's words as its row is stored
        self.texts = TextChanges() if texts_last else None

    def add_file(self, conn: sqlite3.Connection, file_id: int) -> None:
        """Remember what an existing row covered before it is replaced or deleted."""
        if self.full:
            return
        self.ids.add(file_id)
        q = "SELECT ident FROM cover_ids WHERE file_id = ?"
        self.idents.update(r[0] for r in conn.execute(q, (file_id,)))
        q = "SELECT target FROM cover_paths WHERE file_id = ?"
        self.targets.update(r[0] for r in conn.execute(q, (file_id,)))

    def store_text(self, conn: sqlite3.Connection, file_id: int, text: str) -> None:
        if self.texts is not None:
            self.texts.store(file_id, text)
            return
        now = TextChanges()
        now.store(file_id, text)
        now.write(conn)

    def forget_text(self, conn: sqlite3.Connection, file_id: int) -> None:
        if self.texts is not None:
            self.texts.forget(file_id)
            return
        now = TextChanges()
        now.forget(file_id)
        now.write(conn)

    def finish(self, conn: sqlite3.Connection) -> None:
        """End the transaction's changes: ``covered`` recomputed for what they touched (unless
        ``full``: the caller recomputes all of it), then the words."""
        if not self.full:
            self.recompute(conn)
        if self.texts is not None:
            self.texts.write(conn)

    def recompute(self, conn: sqlite3.Connection) -> None:
        if self.full or full_cover(conn, len(self.idents) + len(self.targets)):
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
    conn.execute("DELETE FROM links WHERE file_id = ?", (file_id,))
    touched.forget_text(conn, file_id)
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
    conn.execute(FORGET_DIGEST, (parent_key(key),))


UPSERT = (
    "INSERT INTO files (key, parent, path, sig, size, mtime_ns, etag, frontmatter, memory_kind,"
    " kind_class, episode_id, eid, refs, id_keys, path_keys, warnings, unreadable, entry, created,"
    " superseded, scope)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET path = excluded.path, sig = excluded.sig,"
    " size = excluded.size, mtime_ns = excluded.mtime_ns, etag = excluded.etag,"
    " frontmatter = excluded.frontmatter, memory_kind = excluded.memory_kind,"
    " kind_class = excluded.kind_class, episode_id = excluded.episode_id, eid = excluded.eid,"
    " refs = excluded.refs, id_keys = excluded.id_keys, path_keys = excluded.path_keys,"
    " warnings = excluded.warnings, unreadable = excluded.unreadable, entry = excluded.entry,"
    " created = excluded.created, superseded = excluded.superseded, scope = excluded.scope"
    " RETURNING id"
)

# A folder whose rows change no longer matches the digest it was last reconciled against.
FORGET_DIGEST = (
    "INSERT INTO dirs (key, digest, entries) VALUES (?, NULL, 0)"
    " ON CONFLICT (key) DO UPDATE SET digest = NULL WHERE digest IS NOT NULL"
)


# A file row's values in the order of UPSERT's columns, its cover_ids idents and cover_paths
# targets, its searchable text (``None`` for an unreadable file) and its links' rows (the
# values of INSERT_LINK after the file id): everything computed from a record before touching
# the database, so a rebuild can compute it in worker processes.
RowParts = tuple[tuple[Any, ...], list[str | bytes], list[bytes], str | None, list[tuple[Any, ...]]]

LINK_COLUMNS = ("file_id", "rowid", "code", "key", "how", "h", "written", "heading")
INSERT_LINK = (
    f"INSERT INTO links ({', '.join(LINK_COLUMNS)}) VALUES ({', '.join('?' * len(LINK_COLUMNS))})"
)
# frontmatter keys that may hold a link besides the typed fields: a file whose frontmatter JSON
# names none of them (most files) is not parsed from JSON again
_LINK_KEYS = ('"superseded_by"',)


def row_parts(record: FileRecord, typed_fields: tuple[str, ...] = DEFAULT_TYPED_FIELDS) -> RowParts:
    """What ``record`` becomes in the tables (pure: no database access); ``typed_fields``:
    the frontmatter fields whose values are typed links (``[links] typed_fields``)."""
    f = record.facts
    ident = f.episode_id.strip()
    kclass = kind_class(f.memory_kind, f.unreadable)
    entry = stored_entry(f.path, f.episode_id, f.memory_kind) if kclass != NEVER else None
    values = (
        record.key,
        parent_key(record.key),
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
        entry,
        record.created,
        *status_columns(record.frontmatter),
    )
    idents = sorted({db_text(i) for i in cover_idents(f.id_keys)}, key=_sort_text)
    targets = sorted({t for p in f.path_keys if (t := path_key(p)) is not None})
    text = None if f.unreadable else record.text
    return values, idents, targets, text, link_rows(record, typed_fields)


# frontmatter keys the row's columns read: a JSON naming neither (most) is not parsed again
_STATUS_KEYS = (f'"{MEMORY_STATUS}"', '"scope"')


def status_columns(frontmatter: str) -> tuple[int, str | bytes | None]:
    """``files.superseded`` and ``files.scope`` of the frontmatter JSON ``frontmatter``: whether
    the page was forgotten, and its scope when that is a string (what a recall filter's scope
    is compared with)."""
    if not any(k in frontmatter for k in _STATUS_KEYS):
        return 0, None
    data = json.loads(frontmatter)
    if not isinstance(data, dict):
        return 0, None
    scope = data.get("scope")
    return int(is_superseded(data)), db_text(scope) if isinstance(scope, str) else None


def packed_values(values: tuple[Any, ...], codec: Codec) -> tuple[Any, ...]:
    """A file row's values (:func:`row_parts`) with the frontmatter as stored (compressed)."""
    return (*values[:7], pack_frontmatter(codec, values[7]), *values[8:])


def link_rows(record: FileRecord, typed_fields: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The ``links`` rows of ``record`` (without the file id)."""
    f = record.facts
    if f.unreadable:
        return []
    fm: dict[str, Any] = {}
    raw = record.frontmatter
    if (
        any(k in raw for k in _LINK_KEYS)
        or ('"derived-from"' in raw and '"path"' in raw)  # a derived-from item names a path
        or any(f'"{t}"' in raw for t in typed_fields)
    ):
        loaded = json.loads(raw)
        fm = loaded if isinstance(loaded, dict) else {}
    links = link_fields(f.path, record.text, fm, typed_fields, f.id_keys, f.path_keys)
    return [_link_row(i, *link) for i, link in enumerate(links)]


def _link_row(
    place: int,
    target: str,
    kind: str,
    heading: str,
    norm: str | None,
    name: str | None,
    ident: str | None,
) -> tuple[Any, ...]:
    """One link (a :class:`~kiwifs.index.linkparse.Link`'s fields) as the ``links`` columns
    after the file id (see :data:`schema.KIND_CODES`)."""
    if ident is not None:  # a merged-from id: the key is the entry, ``type:id``
        key: str | None = target
        how = BY_ID | KEY_ITSELF
    elif norm is not None:
        key = norm
        how = BY_NAME if name is not None else BY_PATH
        if key == target + ".md":
            how |= KEY_LESS_MD
        elif key == target:
            how |= KEY_ITSELF
    else:
        key, how = None, BY_NONE
    stored: str | bytes | None = None
    h = None
    if key is not None:
        try:
            h = key_hash(key.encode("utf-8"))
            stored = key
        except UnicodeEncodeError:  # stored as db_text does, a BLOB
            stored = key.encode("utf-8", "surrogatepass")
            h = key_hash(stored)
    written = db_text(target) if how >> 2 == 0 else None
    code = KIND_CODES.get(kind, kind)
    return (place, code, stored, how, h, written, db_text(heading) if heading else "")


def _sort_text(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def upsert_row(conn: sqlite3.Connection, record: FileRecord, touched: Touched, fresh: bool) -> None:
    if not fresh:
        row = conn.execute("SELECT id FROM files WHERE key = ?", (record.key,)).fetchone()
        if row is not None:
            touched.add_file(conn, row[0])
            conn.execute("DELETE FROM cover_ids WHERE file_id = ?", (row[0],))
            conn.execute("DELETE FROM cover_paths WHERE file_id = ?", (row[0],))
            conn.execute("DELETE FROM links WHERE file_id = ?", (row[0],))
            touched.forget_text(conn, row[0])
    values, idents, targets, text, links = row_parts(record, touched.typed_fields)
    ident = values[11]
    file_id = conn.execute(UPSERT, packed_values(values, frontmatter_codec(conn))).fetchone()[0]
    conn.execute(FORGET_DIGEST, (values[1],))
    conn.executemany(
        "INSERT INTO cover_ids (ident, file_id) VALUES (?, ?)", ((i, file_id) for i in idents)
    )
    conn.executemany(
        "INSERT INTO cover_paths (target, file_id) VALUES (?, ?)", ((t, file_id) for t in targets)
    )
    conn.executemany(INSERT_LINK, ((file_id, *link) for link in links))
    if not touched.full:
        touched.ids.add(file_id)
        touched.targets.add(record.key)
        if ident:
            touched.idents.add(ident)
        touched.idents.update(idents)
        touched.targets.update(targets)
    if text is not None:
        touched.store_text(conn, file_id, text)
