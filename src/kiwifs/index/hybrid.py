"""Hybrid search: keyword (BM25) and semantic ranks fused by reciprocal rank fusion.

Each side ranks the pages that pass the same :class:`~kiwifs.index.filters.RecallFilter` (so
filters act before either side cuts its list) and contributes its best :func:`depth` pages. A
page scores ``sum(1 / (60 + rank))`` over the sides that found it (60 is the usual RRF
constant), so agreement counts: second on both sides (2/62) beats first on one side only (1/61).
Ties are broken by path. Every result says where it came from:
``match`` is ``both``, ``keyword only`` or ``semantic only``, with the rank it had on each side
(``null`` where it had none). Without vectors, every result is ``keyword only``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RRF_K = 60
MIN_DEPTH = 50
MAX_DEPTH = 200
DEFAULT_LIMIT = 15
BOTH, KEYWORD_ONLY, SEMANTIC_ONLY = "both", "keyword only", "semantic only"


@dataclass(frozen=True)
class HybridHit:
    path: str
    score: float
    match: str
    keyword_rank: int | None
    semantic_rank: int | None
    snippet: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "score": round(self.score, 6),
            "match": self.match,
            "keyword_rank": self.keyword_rank,
            "semantic_rank": self.semantic_rank,
            "snippet": self.snippet,
        }


@dataclass(frozen=True)
class HybridResults:
    query: str
    limit: int
    offset: int
    semantic: bool  # False: vectors are off, the answer is keyword-only
    results: list[HybridHit] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "limit": self.limit,
            "offset": self.offset,
            "semantic": self.semantic,
            "results": [h.to_json() for h in self.results],
        }


def depth(limit: int, offset: int) -> int:
    """How many pages each side contributes: twice the page asked for, at least 50, at most 200."""
    return max(MIN_DEPTH, min(MAX_DEPTH, 2 * (offset + limit)))


def fuse(
    keyword: Sequence[tuple[str, str]],
    semantic: Sequence[tuple[str, str]],
    limit: int,
    offset: int,
) -> list[HybridHit]:
    """Fuse two ranked lists of ``(path, snippet)``, best first, into one page of hits."""
    kw_rank = {path: r for r, (path, _) in enumerate(keyword, start=1)}
    sem_rank = {path: r for r, (path, _) in enumerate(semantic, start=1)}
    snippets = {path: snip for path, snip in semantic}
    snippets.update((path, snip) for path, snip in keyword if snip)
    hits: list[HybridHit] = []
    for path in {**kw_rank, **sem_rank}:
        k, s = kw_rank.get(path), sem_rank.get(path)
        score = (1 / (RRF_K + k) if k else 0.0) + (1 / (RRF_K + s) if s else 0.0)
        match = BOTH if k and s else KEYWORD_ONLY if k else SEMANTIC_ONLY
        hits.append(HybridHit(path, score, match, k, s, snippets.get(path, "")))
    hits.sort(key=lambda h: (-h.score, h.path))
    return hits[offset : offset + limit]
