"""Semantic search: exact nearest pages over the stored chunk vectors, filters first.

The query is embedded, then scored against every stored chunk with one matrix product (the
vectors are L2-normalised, so the score is the cosine similarity); a page scores as its best
chunk. Candidates come from the ``files`` rows that pass the :class:`RecallFilter` — superseded,
scope, path prefix, modification time — and only then are they ranked and the top k cut, so a
filtered query returns exactly what a brute-force scan of the filtered set would (ties broken
by path). ``threshold`` drops pages scoring below it, also before the cut.

The chunk vectors are held in memory as one matrix (:mod:`index.vectors.matrix`), caught up from the
vector change log when any process changed them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kiwifs.base.limits import SEMANTIC_TOP_K
from kiwifs.errors import Unavailable
from kiwifs.index.filters import RecallFilter
from kiwifs.index.search.keyword import SNIPPET_BYTES, check_limits
from kiwifs.index.texts import texts
from kiwifs.index.vectors.candidates import CandidateCache, candidates, paths_of
from kiwifs.index.vectors.embedders import _numpy
from kiwifs.index.vectors.matrix import VectorMatrix

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from kiwifs.index.vectors.embedders import Matrix

MAX_TOP_K = 200
TIES_BY_RANK = 1000  # more pages than this at or above the cut: ties ordered by path rank


@dataclass(frozen=True)
class SemanticHit:
    path: str
    score: float
    snippet: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "score": round(self.score, 6), "snippet": self.snippet}


@dataclass(frozen=True)
class SemanticResults:
    query: str
    limit: int
    offset: int
    results: list[SemanticHit] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "limit": self.limit,
            "offset": self.offset,
            "results": [h.to_json() for h in self.results],
        }


def check_top_k(
    limit: int | None, offset: int | None, default: int = SEMANTIC_TOP_K
) -> tuple[int, int]:
    """``limit`` defaults to ``default`` and is capped at 200; negatives are usage errors."""
    lim, off = check_limits(default if limit is None else limit, offset)
    return min(lim, MAX_TOP_K), off


def semantic_search(
    conn: sqlite3.Connection,
    vectors: VectorMatrix,
    query_vector: Matrix,
    recall: RecallFilter,
    limit: int,
    offset: int,
    threshold: float | None = None,
    cache: CandidateCache | None = None,
) -> list[SemanticHit]:
    """The best ``limit`` pages from ``offset`` among those passing ``recall`` (see module)."""
    ranked = rank(conn, vectors, query_vector, recall, offset + limit, threshold, cache)
    return [_hit(conn, vectors, query_vector, entry) for entry in ranked[offset:]]


def rank(
    conn: sqlite3.Connection,
    vectors: VectorMatrix,
    query_vector: Matrix,
    recall: RecallFilter,
    depth: int,
    threshold: float | None = None,
    cache: CandidateCache | None = None,
) -> list[tuple[float, str, int, int]]:
    """``(score, path, file id, group)`` of the best ``depth`` filtered pages, best first.

    The candidates (:func:`candidates`, or ``cache``'s) are scored with one matrix product,
    and paths are read only for the pages that can make the cut: per query the Python work is
    a few array operations, whatever the number of pages.
    """
    np = _numpy()
    if depth <= 0 or vectors.empty:
        return []
    if query_vector.shape[-1] != vectors.matrix.shape[1]:
        raise Unavailable(
            f"the embedder returns {query_vector.shape[-1]} dimensions but the stored vectors"
            f" have {vectors.matrix.shape[1]}; run 'kiwifs reindex --vector'"
        )
    found = candidates(conn, vectors, recall) if cache is None else cache.get(conn, vectors, recall)
    ids, groups = found.ids, found.groups
    if not len(ids):
        return []
    query = query_vector.reshape(-1)
    # the product ranks fast but its last bits depend on where a row sits in the matrix (BLAS
    # kernels); pages within ``margin`` of the cut are scored again exactly (see exact_scores)
    page_scores = np.maximum.reduceat(vectors.matrix @ query, vectors.starts)[groups]
    margin = _margin(query)
    keep = np.ones(len(ids), dtype=bool)
    if threshold is not None:
        # compared as float64: a threshold past float32's range (1e308) must not overflow
        keep &= page_scores >= np.float64(threshold) - margin
    if int(keep.sum()) > depth:
        # every page scoring at least the depth-th best score, ties included, then exact sort
        cut = np.partition(page_scores[keep], -depth)[-depth]
        keep &= page_scores >= cut - margin
    chosen = np.flatnonzero(keep)
    scores = exact_scores(vectors, query, groups[chosen]) if margin else page_scores[chosen]
    if margin:
        keep = np.ones(len(chosen), dtype=bool)
        if threshold is not None:
            keep &= scores >= np.float64(threshold)
        if int(keep.sum()) > depth:
            keep &= scores >= np.partition(scores[keep], -depth)[-depth]
        chosen, scores = chosen[keep], scores[keep]
    if len(chosen) > TIES_BY_RANK:  # many pages tied at the cut: order them by path rank
        ranks = found.path_ranks(conn)[chosen]
        order = np.lexsort((ranks, -scores))[:depth]
        chosen, scores = chosen[order], scores[order]
    paths = paths_of(conn, [int(i) for i in ids[chosen]])
    ranked = [
        (float(score), paths[int(ids[i])], int(ids[i]), int(groups[i]))
        for i, score in zip(chosen, scores, strict=True)
    ]
    ranked.sort(key=lambda e: (-e[0], e[1]))
    return ranked[:depth]


def _margin(query: NDArray[np.float32]) -> float:
    """A bound, with room to spare, on how far the product's score of a row may be from its
    exact score: a few rounding errors per dimension (vectors of norm 1); 0 for a query of
    zeros, whose every product is exactly 0."""
    return 4.0 * len(query) * 2.0**-24 if query.any() else 0.0


def exact_scores(
    vectors: VectorMatrix, query: NDArray[np.float32], groups: NDArray[np.int64]
) -> NDArray[np.float32]:
    """The pages' scores (their best row's) computed row by row by ``einsum``, which gives a
    row the same bits wherever it sits: a matrix caught up in place (rows in the order they
    were stored) answers exactly as a fresh load (rows in ETag order) does, and equal contents
    tie exactly (broken by path, as the rule says)."""
    np = _numpy()
    if not len(groups):
        return np.zeros(0, dtype=np.float32)  # type: ignore[no-any-return]
    starts, ends = vectors.starts[groups], vectors.ends[groups]
    lengths = ends - starts
    total = int(lengths.sum())
    if total * 2 > len(vectors.matrix):  # most of the matrix: score it all, in place
        every = np.einsum("ij,j->i", vectors.matrix, query)
        return np.maximum.reduceat(every, vectors.starts)[groups]  # type: ignore[no-any-return]
    offsets = np.cumsum(lengths) - lengths
    rows = np.repeat(starts - offsets, lengths) + np.arange(total)
    scores = np.einsum("ij,j->i", vectors.matrix[rows], query)
    return np.maximum.reduceat(scores, offsets)  # type: ignore[no-any-return]


def _hit(
    conn: sqlite3.Connection,
    vectors: VectorMatrix,
    query_vector: Matrix,
    entry: tuple[float, str, int, int],
) -> SemanticHit:
    score, path, file_id, group = entry
    return SemanticHit(path, score, best_chunk_text(conn, vectors, query_vector, file_id, group))


def best_chunk_text(
    conn: sqlite3.Connection, vectors: VectorMatrix, query_vector: Matrix, file_id: int, group: int
) -> str:
    """The page's best chunk, on one line, cut at 160 bytes: the snippet of a semantic hit."""
    begin, end = int(vectors.starts[group]), int(vectors.ends[group])
    scores = _numpy().einsum("ij,j->i", vectors.matrix[begin:end], query_vector.reshape(-1))
    row = begin + int(scores.argmax())
    start, stop = (int(x) for x in vectors.spans[row])
    text = " ".join(texts(conn, [file_id])[file_id][start:stop].split())
    raw = text.encode("utf-8", "replace")
    if len(raw) > SNIPPET_BYTES:
        text = raw[:SNIPPET_BYTES].decode("utf-8", "ignore") + "\u2026"
    return text
