"""Pseudo-relevance feedback (RM3-style) for natural-language queries (docs/search.md).

A question shares few words with the page that answers it ("When did Caroline go to the support
group?" against "Caroline: I went to a LGBTQ support group yesterday"), but the best BM25 hits
usually do hold it, and pages about the same thing share *their* distinctive words — the same
episode's or session's frontmatter, the same names and places. So after the first ranking the
:data:`FEEDBACK_DOCS` best pages are read (from their stored texts), their words weighted by
``Σ tf/length · (page score / their scores' sum) · idf`` (a word the query already has, a stop
word or a bare number left out), and the :data:`EXPANSION_TERMS` heaviest ask a second time.
The answer is re-ranked by ``(1 − α) · query score / best + α · expansion score / best``, the
expansion score being the words' own FTS5 BM25, each times its weight.

A feedback word must be in at least two pages (one in a single page can only lift that page,
which is already a top hit) and in at most :data:`MAX_SHARE` of the pages and :data:`MAX_DF`
pages (a common word says nothing about the question; rare words are also cheap: counting
and ranking them costs FTS5 a few hundred µs each). When no word qualifies, the first ranking
stands unchanged. A query of a single word or phrase is a lookup, not a question: it is
not fed back (its answer is exactly the pages that hold it).

Counting a common word to its cap is what costs (~0.15 ms at 100k pages, ~0.3 ms at 1M, and
the best pages' frontmatter repeats the same words every query), so the counts are kept, exact
across writes (:mod:`index.search.doccounts`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from kiwifs.index.search import bm25
from kiwifs.index.search.doccounts import DocumentCounts
from kiwifs.index.search.query import STOP_WORDS
from kiwifs.index.texts import texts

FEEDBACK_DOCS = 3  # best first hits whose words feed back
EXPANSION_TERMS = 5  # feedback words asked in the second round
ALPHA = 0.5  # the expansion's share of the final score
POOL = 50  # hits of the first round (and of each feedback word) re-ranked
MAX_SHARE = 0.1  # a feedback word is in at most this share of the pages …
MAX_DF = 200  # … and at most this many (so counting and ranking one costs ~0.1 ms)
MIN_DF = 2  # … and in at least this many
MIN_TERMS = 2  # a query of one word is a lookup: its pages are the ones holding it

Row = tuple[Any, float, int, int]  # (path, score, id, mtime_ns)
_STOPS: frozenset[str] | None = None
_RANK_SQL = "SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?"
_PICK_SQL = "SELECT f.path, f.id, f.mtime_ns, f.key FROM files f WHERE f.id IN ({ids}){cond}"


def stemmed_stop_words() -> frozenset[str]:
    """The stop words as the index's tokenizer stores them (``because`` → ``becaus``)."""
    global _STOPS
    if _STOPS is None:
        found, _ = bm25.TOKENIZER.counts([" ".join(sorted(STOP_WORDS))])[0]
        _STOPS = frozenset(found)
    return _STOPS


def rerank(
    conn: sqlite3.Connection,
    rows: Sequence[Row],
    query_keys: frozenset[str],
    condition: str,
    extra: tuple[Any, ...],
) -> list[Row]:
    """``rows`` (the first ranking, best first, scores positive) re-ranked with feedback; the
    same rows when no feedback word qualifies. New pages pass ``condition`` like the first."""
    top = [r for r in rows[:FEEDBACK_DOCS] if r[1] > 0]
    nrows, _ = bm25.totals(conn)
    if not top or nrows == 0:
        return list(rows)
    weights = feedback_words(conn, top, query_keys, nrows)
    if not weights:
        return list(rows)
    expansion = expansion_scores(conn, weights)
    return blend(conn, rows, expansion, condition, extra)


def feedback_words(
    conn: sqlite3.Connection, top: Sequence[Row], query_keys: frozenset[str], nrows: int
) -> dict[str, float]:
    """The :data:`EXPANSION_TERMS` heaviest words of the ``top`` pages and their weights."""
    bodies = texts(conn, [r[2] for r in top])
    counted = bm25.TOKENIZER.counts([bodies[r[2]] for r in top])
    total = sum(r[1] for r in top)
    stops = stemmed_stop_words()
    mass: dict[str, float] = {}
    for row, (found, length) in zip(top, counted, strict=True):
        for word, tf in found.items():
            if word in query_keys or word in stops or word.isdigit() or not length:
                continue
            mass[word] = mass.get(word, 0.0) + tf / length * (row[1] / total)
    counts = DocumentCounts(conn, count_cap(nrows))
    weights: dict[str, float] = {}
    for word in sorted(mass, key=lambda w: (-mass[w], w)):
        df = counts.of(word)
        if MIN_DF <= df <= counts.cap:
            weights[word] = mass[word] * bm25.idf(nrows, df)
    best = sorted(weights, key=lambda w: (-weights[w], w))[:EXPANSION_TERMS]
    return {w: weights[w] for w in best}


def count_cap(nrows: int) -> int:
    """The most pages a feedback word may be in (:data:`MAX_SHARE` of ``nrows``, at most
    :data:`MAX_DF`): counting stops one past it."""
    return min(int(nrows * MAX_SHARE), MAX_DF)


def note_counts(conn: sqlite3.Connection, counts: dict[str, int]) -> None:
    """Keep ``counts`` (words' numbers of documents, in ``conn``'s snapshot: call inside the
    read transaction they were made in) as the feedback's counts of those words."""
    nrows, _ = bm25.totals(conn)
    if nrows and counts:
        DocumentCounts(conn, count_cap(nrows)).note(counts)


def expansion_scores(conn: sqlite3.Connection, weights: dict[str, float]) -> dict[int, float]:
    """Each page's weighted FTS5 BM25 for the feedback words (their best :data:`POOL` each)."""
    scores: dict[int, float] = {}
    for word, weight in weights.items():
        for rowid, score in conn.execute(_RANK_SQL, (f'"{word}"', POOL)):
            scores[rowid] = scores.get(rowid, 0.0) + weight * float(score)
    return scores


def blend(
    conn: sqlite3.Connection,
    rows: Sequence[Row],
    expansion: dict[int, float],
    condition: str,
    extra: tuple[Any, ...],
) -> list[Row]:
    """The first ranking and the expansion's, each over its best score, mixed by
    :data:`ALPHA`; ties keep the first ranking's order, then the new pages' key order."""
    best_q = max((r[1] for r in rows), default=0.0) or 1.0
    best_e = max(expansion.values(), default=0.0) or 1.0
    first = {r[2] for r in rows}
    mixed: list[tuple[float, int, Any, Row]] = []
    for rank, (path, score, file_id, mtime) in enumerate(rows):
        value = (1 - ALPHA) * score / best_q + ALPHA * expansion.get(file_id, 0.0) / best_e
        mixed.append((-value, rank, "", (path, value, file_id, mtime)))
    new = [i for i in expansion if i not in first]
    if new:
        sql = _PICK_SQL.format(ids=",".join(str(int(i)) for i in new), cond=condition)
        for path, file_id, mtime, key in conn.execute(sql, extra):
            value = ALPHA * expansion[file_id] / best_e
            mixed.append((-value, len(rows), key, (path, value, file_id, mtime)))
    mixed.sort(key=lambda m: (m[0], m[1], m[2]))
    return [m[3] for m in mixed]
