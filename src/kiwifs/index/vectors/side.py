"""The vector side of one index: its store, its in-memory matrix, its worker, and the two
queries that use them (semantic and hybrid).

Built on first use by :meth:`IndexKeeper.recall` (so a command that never searches by meaning
never loads a model). Answers are current the same way keyword answers are: with a server
running, the watcher and the worker keep rows and vectors up to date; a one-shot command
reconciles and then embeds whatever is queued before it answers, so an out-of-band edit is
found by meaning without any server.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kiwifs.config import VectorConfig
from kiwifs.errors import KiwiError, Unavailable, UsageError
from kiwifs.index.core import Index
from kiwifs.index.filters import RecallFilter
from kiwifs.index.search import keyword as search
from kiwifs.index.search.termcolumns import TermColumns
from kiwifs.index.vectors.candidates import CandidateCache
from kiwifs.index.vectors.embedders import make_embedder
from kiwifs.index.vectors.hybrid import DEFAULT_LIMIT, HybridHit, HybridResults, depth, fuse
from kiwifs.index.vectors.matrix import MatrixCache, VectorMatrix
from kiwifs.index.vectors.semantic import (
    SemanticResults,
    best_chunk_text,
    check_top_k,
    rank,
    semantic_search,
)
from kiwifs.index.vectors.store import VectorStore
from kiwifs.index.vectors.worker import EmbedWorker

if TYPE_CHECKING:
    from kiwifs.index.vectors.embedders import Matrix

T = TypeVar("T")


class Recall:
    """Semantic and hybrid search over one index."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self.matrix = MatrixCache()
        self.candidates = CandidateCache()
        self._worker: EmbedWorker | None = None

    @classmethod
    def open(cls, root: Path, index: Index, vector: VectorConfig) -> Recall:
        """Build the embedder ``vector`` names; :class:`Unavailable` when vectors are off."""
        if not vector.enabled:
            raise Unavailable(
                "semantic search is not enabled: set [search.vector] enabled = true and an"
                " embedder ([search.vector.embedder] provider = local, openai or ollama) in"
                " .kiwi/config.toml; see docs/search.md"
            )
        store = VectorStore(index, make_embedder(vector.embedder, root), vector.chunk)
        store.ensure_ready()
        return cls(store)

    # -- the worker -------------------------------------------------------------------------

    def start_worker(self) -> None:
        if self._worker is None:
            self._worker = EmbedWorker(self.store)
            self._worker.start()

    def stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def wake(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.wake()

    def waking(self, action: Callable[..., T]) -> Callable[..., T]:
        """``action`` followed by a wake-up of the worker (it may have queued embeddings)."""

        def run(*args: object) -> T:
            try:
                return action(*args)
            finally:
                self.wake()

        return run

    # -- queries ----------------------------------------------------------------------------

    def semantic(
        self,
        query: str,
        limit: int | None,
        offset: int | None,
        threshold: float | None,
        where: RecallFilter,
        watched: bool,
    ) -> SemanticResults:
        """Pages nearest ``query`` in meaning; ``watched``: a worker keeps vectors current."""
        lim, off = check_top_k(limit, offset)
        _check_threshold(threshold)
        text = query.strip()
        if not text or lim == 0:
            return SemanticResults(query, lim, off, [])
        if not watched:
            self.store.embed_all()
        vector = self._embed_query(text)
        with self.store.index.reader() as conn:
            matrix = self.matrix.get(conn)
            cache = self._cache(watched)
            hits = semantic_search(conn, matrix, vector, where, lim, off, threshold, cache)
        return SemanticResults(query, lim, off, hits)

    def hybrid(
        self,
        query: str,
        limit: int | None,
        offset: int | None,
        where: RecallFilter,
        watched: bool,
        snippets: bool = True,
    ) -> HybridResults:
        """Keyword and semantic ranks fused (reciprocal rank fusion), each result attributed;
        ``snippets=False`` leaves them empty (a brief shows none: it reads the pages)."""
        lim, off = search.check_limits(DEFAULT_LIMIT if limit is None else limit, offset)
        text = query.strip()
        if search.is_blank(text) or lim == 0:
            return HybridResults(query, lim, off, True, [])
        if not watched:
            self.store.embed_all()
        vector = self._embed_query(text)
        wanted = depth(lim, off)
        with self.store.index.reader() as conn:
            columns = self.store.index.columns if watched else None  # see IndexKeeper
            tuning = self.store.index.tuning
            keyword = search.search(
                conn,
                text,
                wanted,
                0,
                None,
                where,
                columns=columns,
                snippets=snippets,
                tuning=tuning,
            ).results
            matrix = self.matrix.get(conn)
            ranked = rank(conn, matrix, vector, where, wanted, None, self._cache(watched))
            semantic = [(path, "") for _, path, _, _ in ranked]
            hits = fuse([(h.path, h.snippet) for h in keyword], semantic, lim, off)
            if snippets:
                hits = _with_semantic_snippets(conn, hits, ranked, matrix, vector)
        return HybridResults(query, lim, off, True, hits)

    def _cache(self, watched: bool) -> CandidateCache | None:
        """The candidates' cache, in a long-lived process (a one-shot command asks once), unless
        ``Tuning.cached_candidates`` is off (the plain path: queried for every search)."""
        cached = self.store.index.tuning.cached_candidates
        return self.candidates if watched and cached else None

    def _embed_query(self, text: str) -> Matrix:
        try:
            return self.store.embed_queries([text])
        except KiwiError:
            raise
        except Exception as exc:  # noqa: BLE001 - a provider's failure, reported not crashed
            raise Unavailable(f"the embedder failed: {exc}") from exc


def keyword_only(
    index: Index,
    query: str,
    limit: int | None,
    offset: int | None,
    where: RecallFilter,
    snippets: bool = True,
    columns: TermColumns | None = None,
) -> HybridResults:
    """Hybrid search with vectors off: the keyword ranking, every result ``keyword only``."""
    lim, off = search.check_limits(DEFAULT_LIMIT if limit is None else limit, offset)
    text = query.strip()
    if search.is_blank(text) or lim == 0:
        return HybridResults(query, lim, off, False, [])
    with index.reader() as conn:
        found = search.search(
            conn,
            text,
            off + lim,
            0,
            None,
            where,
            columns=columns,
            snippets=snippets,
            tuning=index.tuning,
        )
    found_hits = found.results
    hits = fuse([(h.path, h.snippet) for h in found_hits], [], lim, off)
    return HybridResults(query, lim, off, False, hits)


def _with_semantic_snippets(
    conn: sqlite3.Connection,
    hits: list[HybridHit],
    ranked: list[tuple[float, str, int, int]],
    matrix: VectorMatrix,
    vector: Matrix,
) -> list[HybridHit]:
    """Give a hit the keyword side did not find its best chunk as snippet."""
    located = {path: (file_id, group) for _, path, file_id, group in ranked}
    out: list[HybridHit] = []
    for hit in hits:
        if hit.snippet or hit.path not in located:
            out.append(hit)
            continue
        file_id, group = located[hit.path]
        out.append(replace(hit, snippet=best_chunk_text(conn, matrix, vector, file_id, group)))
    return out


def _check_threshold(threshold: float | None) -> None:
    if threshold is not None and not math.isfinite(threshold):
        raise UsageError(f"threshold must be a number, got {threshold}")
