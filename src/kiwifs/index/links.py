"""The link queries: backlinks, a page's outbound links, broken links and orphans.

Links are stored as written with their resolution keys (:mod:`index.linkparse`) and resolved
here, at query time, against the ``files`` rows as they are now: by path, then by file name
(the first in walk order), and a ``merged-from`` id by the file holding that episode id. So a
link to a page created later resolves once the page's row exists, and one to a page deleted or
renamed is broken at once: no stored resolution can be stale.

``prefix`` (a scoped key's, or a request's narrower one) makes the root look as if it held only
the files under it: sources and targets outside it are never read, a link to a file outside it
is broken. The filter is in the SQL, before any limit.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from kiwifs.index.record import path_key, py_text
from kiwifs.index.schema import (
    BY_ID,
    BY_NAME,
    BY_PATH,
    LNAME_SQL,
    key_hash,
    link_kind,
    link_target,
)
from kiwifs.memory.rules import ID_TYPES

EPISODIC = 1  # rows.ALWAYS: memory_kind episodic (orphans leave episodes out)

_UNDER = " AND substr({t}.path, 1, length(:prefix)) = :prefix"


# A link row ``l``'s three ways to resolve (see :data:`schema.KIND_CODES`): the files matching it
# by path, by file name, by episode id. ``+l.key``: the comparison without the column's affinity,
# so it can use the expression indexes on ``files``.
_BY_PATH = f"lower(f.path) = +l.key AND l.how & 3 IN ({BY_PATH}, {BY_NAME})"
_BY_NAME = LNAME_SQL.format(path="f.path") + f" = +l.key AND l.how & 3 = {BY_NAME}"
_BY_ID = f"f.eid = substr(l.key, instr(l.key, ':') + 1) AND l.how & 3 = {BY_ID}"


def _resolve(prefix: bool) -> str:
    """The id of the file the link row ``l`` resolves to (NULL: broken)."""
    under = _UNDER.format(t="f") if prefix else ""
    return (
        "COALESCE("
        + ", ".join(
            f"(SELECT f.id FROM files f WHERE {by}{under} ORDER BY f.key LIMIT 1)"
            for by in (_BY_PATH, _BY_NAME, _BY_ID)
        )
        + ")"
    )


def _unresolved(prefix: bool) -> str:
    """True when the link row ``l`` resolves to no file: :func:`_resolve` is NULL, asked as
    three existence tests (no first match to sort for: a third of the time at 100k pages)."""
    under = _UNDER.format(t="f") if prefix else ""
    return " AND ".join(
        f"NOT EXISTS (SELECT 1 FROM files f WHERE {by}{under})"
        for by in (_BY_PATH, _BY_NAME, _BY_ID)
    )


@dataclass(frozen=True)
class Backlink:
    """One source linking to a page: its path, the kind of link, how many of that kind, and
    whether the source is superseded (forgotten)."""

    path: str
    kind: str
    count: int
    superseded: bool

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "count": self.count, "kind": self.kind}
        if self.kind.startswith("typed:"):
            out["relation"] = self.kind[len("typed:") :]
        elif self.kind == "superseded-by":
            out["relation"] = "superseded_by"
        out["superseded"] = self.superseded
        return out


@dataclass(frozen=True)
class OutLink:
    """One link of a page: the target as written, its kind and heading, and the path it
    resolves to (``None``: broken)."""

    target: str
    kind: str
    heading: str
    path: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "heading": self.heading,
            "path": self.path,
            "broken": self.path is None,
        }


@dataclass(frozen=True)
class BrokenLink:
    """A link that resolves to no file: its source, target as written, kind and heading."""

    source: str
    target: str
    kind: str
    heading: str

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "kind": self.kind,
            "heading": self.heading,
        }


def _params(prefix: str, **more: Any) -> dict[str, Any]:
    return {"prefix": prefix, **more}


def _file(conn: sqlite3.Connection, path: str, prefix: str) -> tuple[Any, ...] | None:
    key = path_key(path.strip("/"))
    if key is None:
        return None
    under = _UNDER.format(t="files") if prefix else ""
    # the keys as BLOBs (:func:`backlinks` casts them back): a path that is not UTF-8 is kept
    # as a BLOB, and its lower() is TEXT Python cannot decode
    q = (
        f"SELECT id, CAST(lower(path) AS BLOB), CAST({LNAME_SQL.format(path='path')} AS BLOB),"
        f" CAST(eid AS BLOB) FROM files WHERE key = :key{under}"
    )
    row: tuple[Any, ...] | None = conn.execute(q, _params(prefix, key=key)).fetchone()
    return row


def backlinks(conn: sqlite3.Connection, path: str, prefix: str = "") -> list[Backlink]:
    """The sources whose links resolve to ``path``, one entry per source and kind, by path."""
    target = _file(conn, path, prefix)
    if target is None:
        return []
    tid, lpath, lname, eid = target
    # every link that can resolve to it has one of these keys, so one of these hashes (a
    # link with a colliding hash is read, and its resolution tells it apart)
    keys = [lpath, lname]
    if eid is not None:
        keys += [typ.encode() + b":" + eid for typ in ID_TYPES]
    hashes = sorted({key_hash(k) for k in keys})
    marks = ", ".join(f":h{i}" for i in range(len(hashes)))
    under = _UNDER.format(t="s") if prefix else ""
    q = (
        f"SELECT s.path, {link_kind()} AS lkind, count(*), s.superseded FROM links l"
        f" JOIN files s ON s.id = l.file_id WHERE l.h IN ({marks}){under}"
        f" AND {_resolve(bool(prefix))} = :tid"
        " GROUP BY s.key, lkind ORDER BY s.key, lkind"
    )
    params = _params(prefix, tid=tid, **{f"h{i}": h for i, h in enumerate(hashes)})
    return [Backlink(py_text(p), k, n, bool(sup)) for p, k, n, sup in conn.execute(q, params)]


def outbound(conn: sqlite3.Connection, path: str, prefix: str = "") -> list[OutLink]:
    """The links of ``path``, in the order stored, each with what it resolves to."""
    source = _file(conn, path, prefix)
    if source is None:
        return []
    q = (
        f"SELECT {link_kind()}, {link_target()}, l.heading, (SELECT path FROM files WHERE id ="
        f" {_resolve(bool(prefix))}) FROM links l WHERE l.file_id = :sid ORDER BY l.rowid"
    )
    rows = conn.execute(q, _params(prefix, sid=source[0]))
    return [
        OutLink(py_text(t), k, py_text(h), None if p is None else py_text(p)) for k, t, h, p in rows
    ]


def broken(conn: sqlite3.Connection, prefix: str = "") -> list[BrokenLink]:
    """Every link under ``prefix`` that resolves to no file (under ``prefix``), by source."""
    under = _UNDER.format(t="s") if prefix else ""
    q = (
        f"SELECT s.path, {link_target()}, {link_kind()}, l.heading FROM links l"
        f" JOIN files s ON s.id = l.file_id WHERE {_unresolved(bool(prefix))}{under}"
        " ORDER BY s.key, l.rowid"
    )
    return [
        BrokenLink(py_text(s), py_text(t), k, py_text(h))
        for s, t, k, h in conn.execute(q, _params(prefix))
    ]


def broken_count(conn: sqlite3.Connection, prefix: str = "") -> int:
    """How many links :func:`broken` lists, without making them."""
    if prefix:  # the sources under it first (CROSS JOIN keeps the order), then their links
        where = _unresolved(True) + _UNDER.format(t="s")
        q = f"SELECT count(*) FROM files s CROSS JOIN links l ON l.file_id = s.id WHERE {where}"
    else:
        q = f"SELECT count(*) FROM links l WHERE {_unresolved(False)}"
    found: int = conn.execute(q, _params(prefix)).fetchone()[0]
    return found


def orphans(conn: sqlite3.Connection, prefix: str = "") -> list[str]:
    """The markdown pages under ``prefix`` that no link from another file reaches. Episodes
    (``memory_kind: episodic``) are left out: they are reached by ``merged-from`` once merged,
    and an unmerged one is the memory report's to list, not a gap in the pages' links."""
    under_s = _UNDER.format(t="s") if prefix else ""
    q = (
        f"SELECT DISTINCT {_resolve(bool(prefix))}, l.file_id FROM links l"
        f" JOIN files s ON s.id = l.file_id WHERE 1{under_s}"
    )
    reached = {r for r, src in conn.execute(q, _params(prefix)) if r is not None and r != src}
    under_f = _UNDER.format(t="files") if prefix else ""
    q = (
        "SELECT id, path FROM files WHERE lower(path) LIKE '%.md' AND unreadable = 0"
        f" AND kind_class != {EPISODIC}{under_f} ORDER BY key"
    )
    return [py_text(p) for i, p in conn.execute(q, _params(prefix)) if i not in reached]
