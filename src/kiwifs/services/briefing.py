"""Making a brief: rank the pages that match a query, read them whole, pack them.

The ranking is hybrid search (keyword and semantic fused) when vectors are enabled, else keyword
search; the recall filter applies before ranking, and some pages beyond ``max_pages`` are ranked
too, so that the manifest shows what came near. Pages gone or unreadable since the index saw
them are skipped. What goes into the pack is decided purely by :func:`kiwifs.memory.brief.pack`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kiwifs.errors import UsageError
from kiwifs.git.repo import blob_id

# The brief's packing and the search modules load with the first brief, not with every command
# that opens a root.
if TYPE_CHECKING:
    from kiwifs.files.storage import Storage
    from kiwifs.index.filters import RecallFilter
    from kiwifs.index.search.keyword import SearchHit
    from kiwifs.index.upkeep import IndexKeeper
    from kiwifs.index.vectors.hybrid import HybridHit
    from kiwifs.memory.brief import Brief, Candidate


class Briefing:
    """The briefs of one root (``vectors``: whether hybrid search ranks them)."""

    def __init__(self, storage: Storage, indexing: IndexKeeper, vectors: bool) -> None:
        self.storage = storage
        self.indexing = indexing
        self.vectors = vectors

    def brief(self, query: str, budget_tokens: int, max_pages: int, where: RecallFilter) -> Brief:
        """The best pages for ``query``, whole, within ``budget_tokens`` and ``max_pages``."""
        from kiwifs.memory.brief import EXTRA_CANDIDATES, check_brief_args, pack

        budget, pages = check_brief_args(budget_tokens, max_pages)
        if not query.strip():
            raise UsageError("query is required")
        ranked = self._ranking(query, pages + EXTRA_CANDIDATES, where)
        texts = self.storage.read_many(hit.path for hit in ranked)
        found = [(h, data) for h, data in zip(ranked, texts, strict=True) if data is not None]
        candidates = [_candidate(hit, data) for hit, data in found]
        return pack(query, candidates, budget, pages)

    def _ranking(
        self, query: str, limit: int, where: RecallFilter
    ) -> Sequence[SearchHit | HybridHit]:
        """The pages a brief packs, best first, filtered before ranking (without snippets: the
        pages are read whole, and cutting snippets a brief never shows was time lost)."""
        if self.vectors:
            return self.indexing.lookups.hybrid(query, limit, 0, where, snippets=False).results
        return self.indexing.lookups.search(query, limit, 0, None, where, snippets=False).results


def _candidate(hit: SearchHit | HybridHit, data: bytes) -> Candidate:
    """A ranked page as read whole (its ETag is of the text packed)."""
    from kiwifs.memory.brief import Candidate

    return Candidate(hit.path, blob_id(data), hit.score, data.decode("utf-8", "replace"))
