"""The chunk vectors of one index held in memory as one matrix, kept current from ``vec_log``.

Semantic ranking scores every stored chunk with one matrix product, so a long-lived process
keeps all of them in memory. Reading them all again after every change cost 0.4–0.6 s at
100,000 pages — in an agent's loop (remember, then brief) the first brief after each write.
So the matrix is caught up instead, from the vector change log (:mod:`index.vectorschema`):
every transaction that stores or removes a content's vectors, in any process, appends that
content's ETag to ``vec_log``; before each use the cache reads the log's end and

* nothing moved: the cached matrix;
* the log moved: only the contents it names are read again; their old groups are marked dead
  (their rows stay, scored and ignored) and the contents that still have vectors are appended
  as new groups, in rows past every published view's end (a matrix in use never changes);
* the generation moved (vectors wiped: a new embedder, ``reindex --vector``), the log was cut
  past the cached position, more than :data:`CATCH_UP_MAX` contents changed, or dead rows pass
  :data:`DEAD_SHARE` of the matrix: every vector read again (which also compacts).

Groups are numbered in the order they were added and never renumbered within one
:class:`VectorMatrix` lineage, so the candidates matched to an older matrix of the same
generation need matching again only for the pages whose group died or that had none
(:mod:`index.vectors.candidates`). ``keys``/``key_groups`` are the live contents sorted by ETag: one
sorted search finds a content's group.

The position and generation are read before the rows, so rows may be newer than the position
says; the next catch-up reads those contents again, which changes nothing (it is idempotent).
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kiwifs.errors import Unavailable
from kiwifs.index import changelog
from kiwifs.index.vectors.embedders import _numpy

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from kiwifs.index.vectors.embedders import Matrix

ETAG_CHARS = 40  # a git blob id in hex
CATCH_UP_MAX = 5000  # more changed contents than this since the cached position: load afresh
DEAD_SHARE = 0.25  # dead rows past this share of the matrix: load afresh (compacts)
HEADROOM = 0.125  # spare rows allocated at a load, so that catching up rarely copies the matrix
CHUNKS = 500  # ETags to a query when reading changed contents
_LINEAGES = itertools.count(1)


@dataclass
class _Rows:
    """The growing buffers behind the matrices of one lineage: rows ``[0:used)`` are written
    and never rewritten; views handed out end at or before ``used``."""

    vectors: Any  # NDArray[np.float32], (capacity, width)
    spans: Any  # NDArray[np.int64], (capacity, 2)
    used: int


@dataclass(frozen=True)
class VectorMatrix:
    """Every stored chunk vector, grouped by content: rows ``starts[g]:ends[g]`` are group g;
    ``alive[g]`` is false for a group whose content was stored again or removed since."""

    generation: str
    lineage: int  # one per full load: matrices of one lineage number their groups alike
    seq: int  # the last ``vec_log`` entry these vectors reflect
    matrix: Matrix
    spans: NDArray[np.int64]
    starts: NDArray[np.int64]
    ends: NDArray[np.int64]
    keys: NDArray[np.bytes_]  # the live groups' ETags, sorted
    key_groups: NDArray[np.int64]  # the group of keys[i]
    alive: NDArray[np.bool_]
    dead_rows: int = 0
    rows: _Rows | None = field(default=None, repr=False, compare=False)

    @property
    def version(self) -> tuple[int, int]:
        """Equal versions: the same groups, numbered alike."""
        return self.lineage, self.seq

    @property
    def empty(self) -> bool:
        return not len(self.keys)


class MatrixCache:
    """The in-memory matrix of one index, caught up when the stored vectors change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: VectorMatrix | None = None

    def get(self, conn: sqlite3.Connection) -> VectorMatrix:
        meta = dict(conn.execute("SELECT key, value FROM vec_meta WHERE key = 'generation'"))
        generation = meta.get("generation", "")
        last = changelog.last(conn, "vec_log")
        with self._lock:
            current = self._current
            if current is None or current.generation != generation:
                current = load(conn, generation, last)
            elif current.seq < last:
                current = catch_up(conn, current, last) or load(conn, generation, last)
            # current.seq > last: this connection reads an older state; the newer vectors
            # serve it (its candidates come from its own rows)
            self._current = current
            return current


def load(conn: sqlite3.Connection, generation: str, seq: int) -> VectorMatrix:
    """Every stored vector, read at once (groups in ETag order)."""
    np = _numpy()
    rows = conn.execute(
        "SELECT etag, start, end, vector FROM vec_chunks ORDER BY etag, seq"
    ).fetchall()
    width = _width(rows, None)
    spare = int(len(rows) * HEADROOM) + 256
    store = _Rows(
        np.empty((len(rows) + spare, width), dtype="<f4"),
        np.empty((len(rows) + spare, 2), dtype=np.int64),
        0,
    )
    _write(store, rows, width)
    keys, start_arr, ends = _groups(rows, 0)
    groups = np.arange(len(keys), dtype=np.int64)
    alive = np.ones(len(keys), dtype=bool)
    return VectorMatrix(
        generation,
        next(_LINEAGES),
        seq,
        store.vectors[: len(rows)],
        store.spans[: len(rows)],
        start_arr,
        ends,
        keys,
        groups,
        alive,
        0,
        store,
    )


def catch_up(conn: sqlite3.Connection, current: VectorMatrix, last: int) -> VectorMatrix | None:
    """``current`` with the contents the log names after its position read again; ``None``
    when a full load is due (log cut, too many changes, too many dead rows)."""
    logged = changelog.since(conn, "vec_log", "etag", current.seq, CATCH_UP_MAX)
    if logged is None:
        return None
    changed = sorted(logged)
    rows = _rows_of(conn, changed)
    return _patched(current, changed, rows, last)


def _rows_of(conn: sqlite3.Connection, etags: list[str]) -> list[tuple[str, int, int, bytes]]:
    found: list[tuple[str, int, int, bytes]] = []
    for start in range(0, len(etags), CHUNKS):
        chunk = etags[start : start + CHUNKS]
        marks = ",".join("?" * len(chunk))
        sql = (
            f"SELECT etag, start, end, vector FROM vec_chunks WHERE etag IN ({marks})"
            " ORDER BY etag, seq"
        )
        found += conn.execute(sql, chunk).fetchall()
    found.sort(key=lambda r: r[0])  # stable: each content's chunks stay in order
    return found


def _patched(
    current: VectorMatrix,
    changed: list[str],
    rows: list[tuple[str, int, int, bytes]],
    last: int,
) -> VectorMatrix | None:
    np = _numpy()
    store = current.rows
    n = len(current.matrix)
    if store is None or store.used != n:  # not the newest of its lineage: load afresh
        return None
    width = _width(rows, current.matrix.shape[1] if len(current.matrix) else None)
    if len(current.matrix) and width != current.matrix.shape[1]:
        return None  # another width: the load reports it
    # the changed contents' groups die
    changed_keys = np.array([e.encode("ascii") for e in changed], dtype=f"S{ETAG_CHARS}")
    pos = np.searchsorted(current.keys, changed_keys).clip(0, max(len(current.keys) - 1, 0))
    hit = pos[current.keys[pos] == changed_keys] if len(current.keys) else pos[:0]
    alive = current.alive.copy()
    dying = current.key_groups[hit]
    alive[dying] = False
    dead_rows = current.dead_rows + int((current.ends[dying] - current.starts[dying]).sum())
    keys = np.delete(current.keys, hit)
    key_groups = np.delete(current.key_groups, hit)
    # the contents that still have vectors are appended as new groups
    total = n + len(rows)
    if total and dead_rows > DEAD_SHARE * total:
        return None
    if total > len(store.vectors) or store.vectors.shape[1] != width:
        # (a matrix loaded before any vector existed has width 0 and no rows to copy)
        grown = total + int(total * HEADROOM) + 256
        vectors = np.empty((grown, width), dtype="<f4")
        spans = np.empty((grown, 2), dtype=np.int64)
        if n:
            vectors[:n] = store.vectors[:n]
            spans[:n] = store.spans[:n]
        store = _Rows(vectors, spans, n)
    _write(store, rows, width)
    added_keys, added_starts, added_ends = _groups(rows, n)
    first_group = len(current.starts)
    added_groups = np.arange(first_group, first_group + len(added_keys), dtype=np.int64)
    at = np.searchsorted(keys, added_keys)
    return VectorMatrix(
        current.generation,
        current.lineage,
        last,
        store.vectors[:total],
        store.spans[:total],
        np.concatenate([current.starts, added_starts]),
        np.concatenate([current.ends, added_ends]),
        np.insert(keys, at, added_keys),
        np.insert(key_groups, at, added_groups),
        np.concatenate([alive, np.ones(len(added_keys), dtype=bool)]),
        dead_rows,
        store,
    )


def _write(store: _Rows, rows: list[tuple[str, int, int, bytes]], width: int) -> None:
    """Append ``rows`` (etag, start, end, vector) to ``store``, which has room for them."""
    np = _numpy()
    at, end = store.used, store.used + len(rows)
    if rows:
        blob = b"".join(r[3] for r in rows)
        store.vectors[at:end] = np.frombuffer(blob, dtype="<f4").reshape(len(rows), width)
        store.spans[at:end] = np.array([(r[1], r[2]) for r in rows], dtype=np.int64)
    store.used = end


def _groups(
    rows: list[tuple[str, int, int, bytes]], first: int
) -> tuple[NDArray[np.bytes_], NDArray[np.int64], NDArray[np.int64]]:
    """The contents of ``rows`` (sorted by ETag, a content's chunks together) written from row
    ``first``: each one's ETag as a key, its first row and the row after its last."""
    np = _numpy()
    etags: list[str] = []
    starts: list[int] = []
    for i, (etag, _, _, _) in enumerate(rows):
        if not etags or etags[-1] != etag:
            etags.append(etag)
            starts.append(first + i)
    start_arr = np.array(starts, dtype=np.int64)
    ends = np.append(start_arr[1:], first + len(rows))[: len(start_arr)].astype(np.int64)
    keys = np.array([e.encode("ascii") for e in etags], dtype=f"S{ETAG_CHARS}")
    return keys, start_arr, ends


def _width(rows: list[Any], known: int | None) -> int:
    sizes = {len(r[3]) for r in rows}
    if len(sizes) > 1:
        raise Unavailable(
            "stored vectors have different sizes (the embedder changed its output);"
            " run 'kiwifs reindex --vector'"
        )
    return sizes.pop() // 4 if sizes else (known or 0)
