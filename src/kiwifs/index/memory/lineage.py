"""Lineage answered from the index: the rows :func:`kiwifs.memory.lineage.build_lineage` needs.

The ``merged-from`` keys kept in ``cover_ids`` (episode ids) and ``cover_paths`` (paths) find the
pages citing an episode without reading any page; ids and paths a page cites are resolved with
the ``eid`` and ``key`` indexes. The rule itself stays in :mod:`kiwifs.memory.lineage`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kiwifs.errors import NotFound
from kiwifs.index.record import db_text, path_key, py_text
from kiwifs.index.report import prefix_range, snapshot
from kiwifs.index.rows import ALWAYS, BY_PREFIX
from kiwifs.index.texts import frontmatter_sql
from kiwifs.memory.lineage import Lineage, Lookups, build_lineage, citations

if TYPE_CHECKING:
    from kiwifs.memory.queue import MergeFindings
    from kiwifs.memory.rules import MergeEntry

CITING = (
    f"SELECT f.key, f.path, {frontmatter_sql('f.frontmatter')} FROM files f WHERE f.id IN ("
    "SELECT file_id FROM cover_ids WHERE ident = ? UNION SELECT file_id FROM cover_paths"
    " WHERE target = ?) ORDER BY f.key"
)
WITH_ID = (
    "SELECT path FROM files WHERE eid = ? AND (kind_class = 1 OR (kind_class = 2"
    " AND key >= ? AND key < ?)) ORDER BY key"
)


def episodic_class(kind_class: int, key: bytes, prefix: str) -> bool:
    """The classification rule on a stored row: always, never, or by the prefix range."""
    if kind_class == ALWAYS:
        return True
    if kind_class != BY_PREFIX:
        return False
    lo, hi = prefix_range(prefix)
    return lo <= key < hi


def _frontmatter(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def lineage(conn: sqlite3.Connection, rel: str, prefix: str) -> Lineage:
    """The lineage of the file at ``rel`` (canonical) for episodes ``prefix``."""
    key = path_key(rel)
    with snapshot(conn):
        row = None
        if key is not None:
            row = conn.execute(
                f"SELECT {frontmatter_sql()}, kind_class, episode_id, eid FROM files WHERE key = ?",
                (key,),
            ).fetchone()
        if row is None or key is None:
            raise NotFound(f"file not found: {rel}")
        text, kind_class, episode_id, eid = row
        episodic = episodic_class(kind_class, key, prefix)
        citing: list[tuple[str, dict[str, Any]]] = []
        if episodic:
            ident = eid if eid is not None else db_text("\0")  # no id: nothing cites by id
            for _key, page, fm in conn.execute(CITING, (ident, key)):
                citing.append((py_text(page), _frontmatter(fm)))
        lo, hi = prefix_range(prefix)

        def with_id(ident: str) -> list[str]:
            rows = conn.execute(WITH_ID, (db_text(ident), lo, hi))
            return [py_text(p) for (p,) in rows]

        def exists(path: str) -> bool:
            target = path_key(path)
            if target is None:
                return False
            found = conn.execute("SELECT 1 FROM files WHERE key = ?", (target,)).fetchone()
            return found is not None

        return build_lineage(
            rel,
            _frontmatter(text),
            episodic,
            py_text(episode_id),
            citing,
            Lookups(with_id, exists),
        )


def merge_findings(
    conn: sqlite3.Connection, page: str, entries: Sequence[MergeEntry], prefix: str
) -> MergeFindings:
    """What a merge of ``entries`` into ``page`` runs into (:func:`kiwifs.memory.queue.
    merge_findings`), from one snapshot: the episodes they cite and the pages citing those."""
    from kiwifs.memory.queue import merge_findings as findings

    lo, hi = prefix_range(prefix)

    def with_id(ident: str) -> list[str]:
        return [py_text(p) for (p,) in conn.execute(WITH_ID, (db_text(ident), lo, hi))]

    def exists(path: str) -> bool:
        target = path_key(path)
        found = (
            target is not None
            and conn.execute("SELECT 1 FROM files WHERE key = ?", (target,)).fetchone()
        )
        return bool(found)

    def merged_by(path: str) -> tuple[str, ...] | None:
        key = path_key(path)
        row = None
        if key is not None:
            row = conn.execute(
                "SELECT kind_class, episode_id, eid FROM files WHERE key = ?", (key,)
            ).fetchone()
        if row is None or key is None or not episodic_class(row[0], key, prefix):
            return None
        ident = row[2] if row[2] is not None else db_text("\0")
        pages = [(py_text(p), _frontmatter(fm)) for _k, p, fm in conn.execute(CITING, (ident, key))]
        cited = citations(pages, path, py_text(row[1]))
        return tuple(dict.fromkeys(c.page for c in cited))

    with snapshot(conn):
        return findings(page, entries, Lookups(with_id, exists), merged_by)
