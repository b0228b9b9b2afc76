"""Link reads for the interfaces: a page's backlinks and outbound links, the root's broken links
and orphans, answered by the link index (:mod:`kiwifs.index.links`), and the graph navigation
over it (:mod:`kiwifs.index.graph`): the graph, a one-hop walk, a shortest path, a page's health.

:class:`LinkReads` is a part of the facade: ``Knowledge`` inherits its one-line methods (through
``Wiring``), so the facade module stays the size it is. ``prefix`` is the narrowing a scoped key
(or a request) asks for: ``""`` for the whole root; the index filters by it before anything is
counted, so nothing outside it is ever read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiwifs.base.paths import canonical
from kiwifs.errors import NotFound

if TYPE_CHECKING:
    from kiwifs.index.graph import Graph, GraphPath, Health, Walk
    from kiwifs.index.links import Backlink, BrokenLink, OutLink
    from kiwifs.index.upkeep import IndexKeeper


class LinkReads:
    """Backlinks, outbound links, broken links and orphans, over the keeper ``indexing``."""

    indexing: IndexKeeper

    def backlinks(self, path: str, prefix: str = "") -> list[Backlink]:
        """The pages linking to ``path``: one entry per source and kind of link (wiki,
        markdown, typed:<field>, merged-from, derived-from, superseded-by), by path."""
        return self.indexing.lookups.backlinks(canonical(path, reading=True), _clean(prefix))

    def outbound_links(self, path: str, prefix: str = "") -> list[OutLink]:
        """The links of ``path``, each with the path it resolves to or none (broken)."""
        return self.indexing.lookups.outbound(canonical(path, reading=True), _clean(prefix))

    def broken_links(self, prefix: str = "") -> list[BrokenLink]:
        """Every link that resolves to no file."""
        return self.indexing.lookups.broken_links(_clean(prefix))

    def broken_link_count(self, prefix: str = "") -> int:
        """How many links :meth:`broken_links` lists (cheaper than listing them)."""
        return self.indexing.lookups.broken_count(_clean(prefix))

    def orphans(self, prefix: str = "") -> list[str]:
        """The markdown pages no other file links to (episodes left out)."""
        return self.indexing.lookups.orphans(_clean(prefix))

    def graph(self, prefix: str = "", limit: int | None = None) -> Graph:
        """The pages under ``prefix`` (the first ``limit`` in walk order, bounded by
        :data:`kiwifs.index.graph.GRAPH_MAX`) and the links between them."""
        from kiwifs.index.graph import GRAPH_LIMIT

        return self.indexing.lookups.graph(_clean(prefix), limit or GRAPH_LIMIT)

    def graph_walk(self, path: str, include_siblings: bool = True, prefix: str = "") -> Walk:
        """One hop from a page: where its links lead, who links to it, and (with
        ``include_siblings``) the pages of its folder and those sharing a tag."""
        found = self.indexing.lookups.walk(
            canonical(path, reading=True), _clean(prefix), include_siblings
        )
        if found is None:
            raise NotFound(f"File not found at {path}.")
        return found

    def graph_path(self, source: str, target: str, prefix: str = "") -> GraphPath:
        """The shortest chain of links from ``source`` to ``target``, breadth first and
        bounded; :class:`NotFound` for a missing page or no path (as KiwiFS answers)."""
        try:
            found = self.indexing.lookups.path_between(
                canonical(source, reading=True), canonical(target, reading=True), _clean(prefix)
            )
        except LookupError as missing:
            raise NotFound(f"node not found in graph: {missing.args[0]}") from None
        if found is None:
            raise NotFound("no path exists between the given pages")
        return found

    def health_check(self, path: str, prefix: str = "") -> Health:
        """A page's health: word, link and backlink counts, days since its last change, and
        its issues (KiwiFS's janitor checks the index can answer, and superseded)."""
        found = self.indexing.lookups.health(canonical(path, reading=True), _clean(prefix))
        if found is None:
            raise NotFound(f"File not found at {path}.")
        return found


def _clean(prefix: str | None) -> str:
    return (prefix or "").lstrip("/")
