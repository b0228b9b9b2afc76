"""Link reads for the interfaces: a page's backlinks and outbound links, the root's broken links
and orphans, answered by the link index (:mod:`kiwifs.index.links`).

:class:`LinkReads` is a part of the facade: ``Knowledge`` inherits its one-line methods (through
``Wiring``), so the facade module stays the size it is. ``prefix`` is the narrowing a scoped key
(or a request) asks for: ``""`` for the whole root; the index filters by it before anything is
counted, so nothing outside it is ever read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiwifs.base.paths import canonical

if TYPE_CHECKING:
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

    def orphans(self, prefix: str = "") -> list[str]:
        """The markdown pages no other file links to (episodes left out)."""
        return self.indexing.lookups.orphans(_clean(prefix))


def _clean(prefix: str | None) -> str:
    return (prefix or "").lstrip("/")
