"""The lookups the index answers: keyword search, ``/meta`` frontmatter queries, and the
semantic and hybrid searches of the vector side.

:class:`IndexLookups` is a part the keeper builds (``keeper.lookups``), handed the keeper as a
:class:`~kiwifs.index.policy.KeeperPolicy`: each lookup reads the index through its
:meth:`~kiwifs.index.policy.KeeperPolicy.guarded`, and the vector side
(:meth:`~kiwifs.index.policy.KeeperPolicy.recall`) is the keeper's, built and stopped by it. A
part rather than a mixin, so what a lookup may touch of the keeper is written once and typed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

# search, /meta and vectors are imported by the methods that answer them: a one-shot command
# needs one of them, and the memory report from the CLI none.
if TYPE_CHECKING:
    from kiwifs.index.core import Index
    from kiwifs.index.filters import RecallFilter
    from kiwifs.index.graph import Graph, GraphPath, Health, Walk
    from kiwifs.index.links import Backlink, BrokenLink, OutLink
    from kiwifs.index.policy import KeeperPolicy
    from kiwifs.index.search.keyword import SearchResults
    from kiwifs.index.search.meta import Filter, MetaResults
    from kiwifs.index.search.termcolumns import TermColumns
    from kiwifs.index.vectors.hybrid import HybridResults
    from kiwifs.index.vectors.semantic import SemanticResults
    from kiwifs.index.vectors.store import VectorStatus

T = TypeVar("T")
# Longer queries are answered but not kept: 256 kept answers then hold at most ~0.5 MB of keys.
KEPT_QUERY_CHARS = 2048


class IndexLookups:
    """Search, ``/meta``, semantic and hybrid search, asked through the keeper's policy."""

    def __init__(self, keeper: KeeperPolicy) -> None:
        self._keeper = keeper

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
                columns = self._columns(index)

                def answer() -> SearchResults:
                    return search.search(
                        conn,
                        query,
                        limit,
                        offset,
                        path_prefix,
                        where,
                        recency_weight,
                        columns,
                        snippets,
                        index.tuning,
                    )

                if columns is None or recency_weight or len(query) > KEPT_QUERY_CHARS:
                    return answer()  # a one-shot command; the clock; a query kept too dear
                key = (query, limit, offset, path_prefix, where, snippets)
                kept = index.answers.answer(conn, key, answer)
                return replace(kept, results=list(kept.results))  # the caller's own list

        return self._keeper.guarded(run)

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
        path_prefix: str | None = None,
    ) -> MetaResults:
        from kiwifs.index.search import meta as meta_query

        def run(index: Index) -> MetaResults:
            with index.reader() as conn:
                return meta_query.query(
                    conn,
                    where,
                    or_,
                    sort,
                    order,
                    limit,
                    offset,
                    paths,
                    include_superseded,
                    path_prefix,
                )

        return self._keeper.guarded(run)

    def semantic(
        self,
        query: str,
        limit: int | None,
        offset: int,
        threshold: float | None,
        where: RecallFilter,
    ) -> SemanticResults:
        keeper = self._keeper
        recall = keeper.recall()
        return keeper.guarded(
            lambda index: recall.semantic(query, limit, offset, threshold, where, keeper.watching)
        )

    def _columns(self, index: Index) -> TermColumns | None:
        """The term columns, in a process that keeps running (a server): making a word's column
        costs about one plain query, which a one-shot command would never win back."""
        return index.columns if self._keeper.watching else None

    def hybrid(
        self,
        query: str,
        limit: int | None,
        offset: int,
        where: RecallFilter,
        snippets: bool = True,
    ) -> HybridResults:
        from kiwifs.index.vectors.side import keyword_only

        keeper = self._keeper
        if not keeper.vector.enabled:
            return keeper.guarded(
                lambda index: keyword_only(
                    index, query, limit, offset, where, snippets, self._columns(index)
                )
            )
        recall = keeper.recall()
        return keeper.guarded(
            lambda index: recall.hybrid(query, limit, offset, where, keeper.watching, snippets)
        )

    # -- links (index/links.py): ``prefix`` "" for the whole root -----------------------------

    def backlinks(self, path: str, prefix: str = "") -> list[Backlink]:
        from kiwifs.index import links

        return self._keeper.guarded(lambda index: _read(index, links.backlinks, path, prefix))

    def outbound(self, path: str, prefix: str = "") -> list[OutLink]:
        from kiwifs.index import links

        return self._keeper.guarded(lambda index: _read(index, links.outbound, path, prefix))

    def broken_links(self, prefix: str = "") -> list[BrokenLink]:
        from kiwifs.index import links

        return self._keeper.guarded(lambda index: _read(index, links.broken, prefix))

    def broken_count(self, prefix: str = "") -> int:
        from kiwifs.index import links

        return self._keeper.guarded(lambda index: _read(index, links.broken_count, prefix))

    def orphans(self, prefix: str = "") -> list[str]:
        from kiwifs.index import links

        return self._keeper.guarded(lambda index: _read(index, links.orphans, prefix))

    # -- graph navigation (index/graph.py), prefix-filtered the same way -----------------------

    def graph(self, prefix: str, limit: int) -> Graph:
        from kiwifs.index import graph

        return self._keeper.guarded(lambda index: _read(index, graph.graph, prefix, limit))

    def walk(self, path: str, prefix: str, include_siblings: bool) -> Walk | None:
        from kiwifs.index import graph

        return self._keeper.guarded(
            lambda index: _read(index, graph.walk, path, prefix, include_siblings)
        )

    def path_between(self, source: str, target: str, prefix: str) -> GraphPath | None:
        """The shortest path (``None``: none within the bounds); ``LookupError`` names a page
        that is not there."""
        from kiwifs.index import graph

        def query(conn: Any) -> GraphPath | None:
            chain = graph.path_between(conn, source, target, prefix)
            return (
                None if chain is None else graph.GraphPath(chain, graph.superseded_of(conn, chain))
            )

        return self._keeper.guarded(lambda index: _read(index, query))

    def health(self, path: str, prefix: str) -> Health | None:
        from kiwifs.index import graph

        return self._keeper.guarded(lambda index: _read(index, graph.health, path, prefix))

    def vector_status(self) -> VectorStatus:
        from kiwifs.index.vectors.store import VectorStatus

        if not self._keeper.vector.enabled:
            return VectorStatus(enabled=False)
        return self._keeper.recall().store.status()


def _read(index: Index, query: Callable[..., T], *args: Any) -> T:
    """``query(conn, *args)`` on one of the index's readers."""
    with index.reader() as conn:
        return query(conn, *args)
