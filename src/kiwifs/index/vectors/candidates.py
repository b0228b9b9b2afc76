"""The vector side's candidates: the embedded pages passing a recall filter, and their cache.

Semantic ranking scores the pages that pass the :class:`RecallFilter` (superseded, scope, path
prefix, time). Finding them is one query over a covering index (``files_recall`` or
``files_scope``, which carry the path) returning two concatenated strings, ids and ETags, with
no Python object per page; the pages are then matched to their vector groups with one sorted
search. At 100,000 pages that query costs ~40–65 ms, more than the rest of a hybrid search.

**The cache** (:class:`CandidateCache`, used by long-lived processes) keeps, per filter, the
passing pages as of a position in ``fts_log``. Every change of a readable file's row — its
content (so its scope and superseded flag), a rename, a delete, a file becoming unreadable —
rewrites the file's text and logs the file's id in the same transaction, whatever process
made it; a rebuild changes the schema. So before each use the cache reads the schema version
and the log's last entry (in the query's connection, before anything else), and:

* nothing moved: the pages are the cached ones (matched to the vector groups again only when
  the vectors' version moved);
* the log moved: only the files it names are read again and patched in (an agent writes
  between two briefs: the next brief reads a few rows, not 100,000);
* the schema moved, or the log was cut past the cached position: the full query again.

A time filter is not cached: its value moves with the clock.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.index import changelog
from kiwifs.index.filters import RecallFilter
from kiwifs.index.record import py_text
from kiwifs.index.vectors.embedders import _numpy
from kiwifs.index.vectors.matrix import ETAG_CHARS

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from kiwifs.index.vectors.matrix import VectorMatrix

CACHED_FILTERS = 16  # filters whose candidates are kept (least recently used dropped)
CATCH_UP_MAX = 5000  # more changed files than this since the cached position: query again


class Candidates:
    """The embedded pages passing a filter: file ids and vector groups, and (made on demand,
    once per set) each page's place in path order, so that thousands of pages tied at the cut
    are ordered without reading their paths at every query."""

    def __init__(self, ids: NDArray[np.int64], groups: NDArray[np.int64]) -> None:
        self.ids = ids
        self.groups = groups
        self._ranks: NDArray[np.int64] | None = None
        self._lock = threading.Lock()

    def path_ranks(self, conn: sqlite3.Connection) -> NDArray[np.int64]:
        """Position ``i``: the rank of page ``i``'s path in Python's string order (the order
        ties are broken in), read in ``conn``, which must see the rows these came from."""
        np = _numpy()
        with self._lock:
            if self._ranks is None:
                paths = paths_of(conn, [int(i) for i in self.ids])
                order = sorted(range(len(self.ids)), key=lambda i: paths[int(self.ids[i])])
                ranks = np.empty(len(self.ids), dtype=np.int64)
                ranks[np.array(order, dtype=np.int64)] = np.arange(len(self.ids))
                self._ranks = ranks
            return self._ranks


def paths_of(conn: sqlite3.Connection, ids: list[int]) -> dict[int, str]:
    """The paths of file ids (500 to a query)."""
    found: dict[int, str] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT id, path FROM files WHERE id IN ({marks})"
        found.update((i, py_text(p)) for i, p in conn.execute(sql, chunk))
    return found


def passing(
    conn: sqlite3.Connection, recall: RecallFilter, among: list[int] | None = None
) -> tuple[NDArray[np.int64], NDArray[np.bytes_]]:
    """Ids and ETags of the readable pages passing ``recall`` (only those in ``among``)."""
    np = _numpy()
    where, params = recall.sql("f")
    if among is not None:
        where += f" AND f.id IN ({','.join(str(int(i)) for i in among) or 'NULL'})"
    count, id_text, etag_text = conn.execute(
        "SELECT count(*), group_concat(f.id), group_concat(f.etag, '') FROM files f"
        f" WHERE f.unreadable = 0 AND length(f.etag) = {ETAG_CHARS}{where}",
        params,
    ).fetchone()
    if not count:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=f"S{ETAG_CHARS}")
    ids = np.array(id_text.split(","), dtype=np.int64)
    return ids, np.frombuffer(etag_text.encode("ascii"), dtype=f"S{ETAG_CHARS}")


def groups_of(etags: NDArray[np.bytes_], vectors: VectorMatrix) -> NDArray[np.int64]:
    """Each content's vector group, ``-1`` for content not embedded (one sorted search)."""
    np = _numpy()
    if not len(etags) or vectors.empty:
        return np.full(len(etags), -1, dtype=np.int64)  # type: ignore[no-any-return]
    at = np.searchsorted(vectors.keys, etags).clip(0, len(vectors.keys) - 1)
    found = vectors.keys[at] == etags
    return np.where(found, vectors.key_groups[at], -1)  # type: ignore[no-any-return]


def regrouped(
    etags: NDArray[np.bytes_],
    groups: NDArray[np.int64],
    version: tuple[int, int],
    vectors: VectorMatrix,
) -> NDArray[np.int64]:
    """``groups`` (matched against the matrix of ``version``) matched to ``vectors``: when
    ``vectors`` was caught up from that matrix, only the pages whose group died or that had
    none are searched again (a page's group lives while its content's vectors are unchanged)."""
    if version == vectors.version:
        return groups
    lineage, seq = version
    if lineage != vectors.lineage or seq > vectors.seq:
        return groups_of(etags, vectors)
    stale = groups < 0
    stale[~stale] = ~vectors.alive[groups[~stale]]
    if not stale.any():
        return groups
    out = groups.copy()
    out[stale] = groups_of(etags[stale], vectors)
    return out


def embedded(ids: NDArray[np.int64], groups: NDArray[np.int64]) -> Candidates:
    """The pages whose content has vectors (group ``-1``: not embedded yet)."""
    found = groups >= 0
    return Candidates(ids[found], groups[found])


def candidates(conn: sqlite3.Connection, vectors: VectorMatrix, recall: RecallFilter) -> Candidates:
    """The embedded pages passing ``recall``, with their vector groups (no cache)."""
    ids, etags = passing(conn, recall)
    return embedded(ids, groups_of(etags, vectors))


@dataclass
class _Entry:
    schema: int
    seq: int  # the last fts_log entry the pages reflect
    ids: Any  # NDArray[np.int64]: every passing page, embedded or not
    etags: Any  # NDArray[np.bytes_]
    version: tuple[int, int]  # the vectors' version ``groups`` were matched against
    groups: Any  # NDArray[np.int64]: each page's vector group, -1 if none
    found: Candidates


class CandidateCache:
    """The candidates of the last :data:`CACHED_FILTERS` filters (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[RecallFilter, _Entry] = OrderedDict()

    def get(
        self, conn: sqlite3.Connection, vectors: VectorMatrix, recall: RecallFilter
    ) -> Candidates:
        if recall.modified_after_ns is not None:
            return candidates(conn, vectors, recall)
        schema = int(conn.execute("PRAGMA schema_version").fetchone()[0])
        last = changelog.last(conn, "fts_log")
        with self._lock:
            entry = self._entries.get(recall)
        if entry is None or entry.schema != schema or entry.seq > last:
            entry = self._fresh(conn, vectors, recall, schema, last)
        elif entry.seq < last:
            entry = self._caught_up(conn, vectors, recall, entry, last)
        elif entry.version != vectors.version:
            groups = regrouped(entry.etags, entry.groups, entry.version, vectors)
            found = embedded(entry.ids, groups)
            entry = _Entry(schema, last, entry.ids, entry.etags, vectors.version, groups, found)
        with self._lock:
            self._entries[recall] = entry
            self._entries.move_to_end(recall)
            while len(self._entries) > CACHED_FILTERS:
                self._entries.popitem(last=False)
        return entry.found

    def _fresh(
        self,
        conn: sqlite3.Connection,
        vectors: VectorMatrix,
        recall: RecallFilter,
        schema: int,
        last: int,
    ) -> _Entry:
        return _entry(schema, last, *passing(conn, recall), vectors)

    def _caught_up(
        self,
        conn: sqlite3.Connection,
        vectors: VectorMatrix,
        recall: RecallFilter,
        entry: _Entry,
        last: int,
    ) -> _Entry:
        """The entry with the files the log names since its position read again."""
        np = _numpy()
        logged = changelog.since(conn, "fts_log", "doc", entry.seq, CATCH_UP_MAX)
        if logged is None:  # the log cut, or too much to catch up
            return self._fresh(conn, vectors, recall, entry.schema, last)
        changed = [int(d) for d in logged]
        kept = ~np.isin(entry.ids, np.array(changed, dtype=np.int64))
        new_ids, new_etags = passing(conn, recall, changed)
        ids = np.concatenate([entry.ids[kept], new_ids])
        etags = np.concatenate([entry.etags[kept], new_etags])
        groups = np.concatenate(
            [
                regrouped(entry.etags[kept], entry.groups[kept], entry.version, vectors),
                groups_of(new_etags, vectors),
            ]
        )
        found = embedded(ids, groups)
        return _Entry(entry.schema, last, ids, etags, vectors.version, groups, found)


def _entry(schema: int, last: int, ids: Any, etags: Any, vectors: VectorMatrix) -> _Entry:
    groups = groups_of(etags, vectors)
    return _Entry(schema, last, ids, etags, vectors.version, groups, embedded(ids, groups))
