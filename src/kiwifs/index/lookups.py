"""The lookups the index answers: keyword search, ``/meta`` frontmatter queries, and the
semantic and hybrid searches of the vector side.

Each is one method of :class:`~kiwifs.index.upkeep.IndexKeeper` (it inherits them from
:class:`IndexLookups`), read through the keeper's policy (:meth:`_guarded`); the vector side
itself (:meth:`recall`) is built and stopped by the keeper.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

# search, /meta and vectors are imported by the methods that answer them: a one-shot command
# needs one of them, and the memory report from the CLI none.
if TYPE_CHECKING:
    from kiwifs.config import VectorConfig
    from kiwifs.index.core import Index
    from kiwifs.index.filters import RecallFilter
    from kiwifs.index.search.keyword import SearchResults
    from kiwifs.index.search.meta import Filter, MetaResults
    from kiwifs.index.search.termcolumns import TermColumns
    from kiwifs.index.vectors.hybrid import HybridResults
    from kiwifs.index.vectors.semantic import SemanticResults
    from kiwifs.index.vectors.side import Recall
    from kiwifs.index.vectors.store import VectorStatus

T = TypeVar("T")


class IndexLookups:
    """Search, ``/meta``, semantic and hybrid search, answered by the index keeper."""

    vector: VectorConfig

    # -- what the keeper provides -----------------------------------------------------------

    def _guarded(self, action: Callable[[Index], T]) -> T:
        """``action`` on a current index, repaired once on damage (the keeper's policy)."""
        raise NotImplementedError

    @property
    def watching(self) -> bool:
        """True while a ready watcher keeps the index current."""
        raise NotImplementedError

    def recall(self) -> Recall:
        """The vector side, built on first use (the keeper's)."""
        raise NotImplementedError

    # -- the answers ------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        offset: int,
        path_prefix: str | None,
        where: RecallFilter | None = None,
        recency_weight: float | None = None,
        snippets: bool = True,
    ) -> SearchResults:
        from kiwifs.index.search import keyword as search

        def run(index: Index) -> SearchResults:
            with index.reader() as conn:
                return search.search(
                    conn,
                    query,
                    limit,
                    offset,
                    path_prefix,
                    where,
                    recency_weight,
                    self._columns(index),
                    snippets,
                    index.tuning,
                )

        return self._guarded(run)

    def meta(
        self,
        where: Sequence[str | Filter],
        or_: Sequence[str],
        sort: str | None,
        order: str,
        limit: int,
        offset: int,
        paths: Sequence[str] | None,
        include_superseded: bool = False,
    ) -> MetaResults:
        from kiwifs.index.search import meta as meta_query

        def run(index: Index) -> MetaResults:
            with index.reader() as conn:
                return meta_query.query(
                    conn, where, or_, sort, order, limit, offset, paths, include_superseded
                )

        return self._guarded(run)

    def semantic(
        self,
        query: str,
        limit: int | None,
        offset: int,
        threshold: float | None,
        where: RecallFilter,
    ) -> SemanticResults:
        recall = self.recall()
        return self._guarded(
            lambda index: recall.semantic(query, limit, offset, threshold, where, self.watching)
        )

    def _columns(self, index: Index) -> TermColumns | None:
        """The term columns, in a process that keeps running (a server): making a word's column
        costs about one plain query, which a one-shot command would never win back."""
        return index.columns if self.watching else None

    def hybrid(
        self,
        query: str,
        limit: int | None,
        offset: int,
        where: RecallFilter,
        snippets: bool = True,
    ) -> HybridResults:
        from kiwifs.index.vectors.side import keyword_only

        if not self.vector.enabled:
            return self._guarded(
                lambda index: keyword_only(
                    index, query, limit, offset, where, snippets, self._columns(index)
                )
            )
        recall = self.recall()
        return self._guarded(
            lambda index: recall.hybrid(query, limit, offset, where, self.watching, snippets)
        )

    def vector_status(self) -> VectorStatus:
        from kiwifs.index.vectors.store import VectorStatus

        if not self.vector.enabled:
            return VectorStatus(enabled=False)
        return self.recall().store.status()
