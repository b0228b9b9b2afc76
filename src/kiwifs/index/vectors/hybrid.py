"""Hybrid search: keyword (BM25) and semantic ranks fused by weighted reciprocal rank fusion.

Each side ranks the pages that pass the same :class:`~kiwifs.index.filters.RecallFilter` (so
filters act before either side cuts its list) and contributes its best :func:`depth` pages. A
page scores ``KEYWORD_WEIGHT / (RRF_K + keyword rank) + SEMANTIC_WEIGHT / (RRF_K + semantic
rank)`` over the sides that found it, so agreement counts: second on both sides beats first on
one side only. Ties are broken by path. Every result says where it came from: ``match`` is
``both``, ``keyword only`` or ``semantic only``, with the rank it had on each side (``null``
where it had none). Without vectors, every result is ``keyword only``.

The constants were chosen on agents' questions (bench/recall.py, LoCoMo development half, turn
level, the bundled model): the textbook RRF (k = 60, equal weights, 50 a side) scored R@5 0.610
against keyword 0.603 and semantic 0.464, barely its better side, because a flat k = 60 lets a
page ranked 40th on one side outrank the keyword side's 3rd. k = 15 makes the top of each list
count; the semantic side, the weaker one on these questions, weighs 0.7; and 100 pages a side
let a page ranked deep on both still meet (R@5 0.655; every k from 10 to 20 with a weight from
0.6 to 0.8 scored 0.64-0.66, so the choice is not a knife-edge).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RRF_K = 15
KEYWORD_WEIGHT = 1.0
SEMANTIC_WEIGHT = 0.7
MIN_DEPTH = 100
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
    """How many pages each side contributes: twice the page asked for, at least 100, at most
    200 (a page deep on both sides still meets the other side's ranking)."""
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
        score = rrf_score(k, s)
        match = BOTH if k and s else KEYWORD_ONLY if k else SEMANTIC_ONLY
        hits.append(HybridHit(path, score, match, k, s, snippets.get(path, "")))
    hits.sort(key=lambda h: (-h.score, h.path))
    return hits[offset : offset + limit]


def rrf_score(keyword_rank: int | None, semantic_rank: int | None) -> float:
    """A page's fused score from its 1-based rank on each side (``None``: not found there)."""
    score = KEYWORD_WEIGHT / (RRF_K + keyword_rank) if keyword_rank else 0.0
    return score + (SEMANTIC_WEIGHT / (RRF_K + semantic_rank) if semantic_rank else 0.0)
