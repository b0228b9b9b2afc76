"""Full-text search over the index: the query rule of :mod:`index.search.query`, BM25 ranking,
snippets.

A query is natural language unless it is clearly FTS5 (:func:`kiwifs.index.search.query.parse`):
plain text is matched as any of its words (OR, stop words left out), BM25-ranked; explicit FTS5
syntax is run as written, and read as natural language when FTS5 rejects it. No query string is
an error. A natural reading of two terms or more is then re-ranked with pseudo-relevance
feedback (:mod:`index.search.feedback`: the best hits' distinctive words asked again, mixed in at
half weight). In a server the term columns (:mod:`index.search.termcolumns`) rank both readings
without FTS5 scoring every match, to the same answer.

Snippets come from the stored text (:mod:`index.texts`, no disk reads): the first line holding
a query word, cut at 160 bytes, with the first occurrence of each word in ``<mark>``
(:func:`marked_parts` splits them again for interfaces that print plain text).

Recall filters (:class:`~kiwifs.index.filters.RecallFilter`: superseded pages, ``scope``,
``modified_after``) apply inside the query, before ranking and paging. ``recency_weight`` (0–1)
blends relevance with age: the best :func:`recency_window` BM25 hits are re-scored as
``(1 - w) * score / best_score + w * 0.5 ** (age_days / 30)`` and paged from there; ``w = 0``
(or none) keeps the plain BM25 order and scores.
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from kiwifs.base.limits import SEARCH_LIMIT
from kiwifs.base.text import check_text
from kiwifs.errors import InvalidQuery, UsageError
from kiwifs.index.connections import is_busy, is_damage
from kiwifs.index.filters import RecallFilter
from kiwifs.index.record import py_text
from kiwifs.index.report import snapshot
from kiwifs.index.search import feedback
from kiwifs.index.search.bm25 import TOKENIZER
from kiwifs.index.search.query import Query, parse
from kiwifs.index.search.termcolumns import PHRASE, TermColumns
from kiwifs.index.texts import texts
from kiwifs.memory.rules import check_paging
from kiwifs.tuning import Tuning

MAX_LIMIT = 200
SNIPPET_BYTES = 160
_OPERATORS = {"AND", "OR", "NOT", "NEAR"}
_WORD = re.compile(r"\w+")
# What ``str.splitlines`` ends a line at ("\r\n" is its "\r" then its "\n")
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_BREAK = re.compile(f"[{re.escape(LINE_BREAKS)}]")
_OTHER_BREAK = re.compile(f"[{re.escape(LINE_BREAKS[1:])}]")  # any but "\n"
_MARKED = re.compile(r"<mark>(.*?)</mark>", re.DOTALL)
# one FTS5 phrase: a string ("" is a quote inside it) or a bareword (ASCII letters, digits,
# "_", U+001A and every non-ASCII character), either one perhaps a prefix (*)
_PHRASE_TOKEN = re.compile(r'(?:"(?:[^"]|"")*"|[A-Za-z0-9_\x1a\x80-\U0010ffff]+)\*?')
RECENCY_HALF_LIFE_DAYS = 30.0
_NS_PER_DAY = 86_400 * 10**9


@dataclass(frozen=True)
class SearchHit:
    path: str
    score: float
    snippet: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "score": self.score,
            "snippet": self.snippet,
            "matches": [{"line": 0, "text": self.snippet}],
        }


@dataclass(frozen=True)
class SearchResults:
    query: str
    limit: int
    offset: int
    results: list[SearchHit] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "limit": self.limit,
            "offset": self.offset,
            "results": [h.to_json() for h in self.results],
        }


def check_limits(limit: int | None, offset: int | None) -> tuple[int, int]:
    """Limit defaults to 50 and is capped at 200; otherwise the paging rule of every list."""
    lim = SEARCH_LIMIT if limit is None else limit
    _, off = check_paging(lim, offset)
    return min(lim, MAX_LIMIT), off


def is_blank(query: str) -> bool:
    return not query.strip(" \t\r\n*?")


SQL = (
    "SELECT f.path, -bm25(fts) AS score, f.id, f.mtime_ns FROM fts JOIN files f"
    " ON f.id = fts.rowid WHERE fts MATCH ?{prefix} ORDER BY bm25(fts), f.key LIMIT ? OFFSET ?"
)
# The top-k path: the best ``window`` matches by BM25 alone (FTS5 and one sorter, no join per
# match), then only those rows joined with ``files``, filtered and tie-broken by key.
TOP_SQL = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY 2 LIMIT ?"
PICK_SQL = (
    "SELECT f.id, f.path, f.key, f.mtime_ns FROM files f {hint} WHERE f.id IN ({ids}){prefix}"
)
# NOT INDEXED: look the ids up by row id; with ``superseded = 0`` in the filters the planner
# otherwise scans the ``files_recall`` index, which those columns happen to lead
# A search's filters: the SQL condition over ``files f`` and its parameters, the scope, and
# whether superseded pages are left out (the condition says so too; the term columns use it)
Sifted = tuple[str, tuple[Any, ...], str | None, bool]
FIRST_WINDOW = 64  # matches ranked by the first top-k round (grown ×8 while the cut is unsure)
MAX_WINDOW = 4096  # beyond this the filters are too selective: the full query answers


def check_recency_weight(value: float | None) -> float:
    """``recency_weight`` as a number from 0 to 1 (absent means 0); anything else is refused."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise UsageError(f"recency_weight must be a number from 0 to 1, got {value!r}")
    return float(value)


def recency_window(limit: int, offset: int) -> int:
    """How many BM25 hits a recency blend re-scores: three pages' worth, at least 60."""
    return max(3 * (limit + offset), 60)


def search(
    conn: sqlite3.Connection,
    query: str,
    limit: int | None = SEARCH_LIMIT,
    offset: int = 0,
    path_prefix: str | None = None,
    where: RecallFilter | None = None,
    recency_weight: float | None = None,
    columns: TermColumns | None = None,
    snippets: bool = True,
    tuning: Tuning | None = None,
) -> SearchResults:
    """Run ``query`` against the index; see the module docstring for the rules.

    ``where`` adds the recall filters (scope, superseded, …) before the ranking is cut; hybrid
    search uses it so both of its sides rank the same set of pages. ``columns`` (the index's
    :class:`~kiwifs.index.search.termcolumns.TermColumns`) ranks a query of common words without
    FTS5 scoring every match; without it FTS5 ranks. ``snippets=False`` leaves every snippet
    empty (a brief reads the pages whole and shows none). ``tuning``: its ``term_columns``,
    ``search_top_k`` and ``feedback`` (off: the plain paths, which the tests hold equal).
    """
    tuned = tuning if tuning is not None else Tuning()
    top_k = tuned.search_top_k
    lim, off = check_limits(limit, offset)
    weight = check_recency_weight(recency_weight)
    text = check_text(query, "search query", InvalidQuery).strip()
    check_text(path_prefix or "", "path prefix", InvalidQuery)
    if is_blank(text) or lim == 0:
        return SearchResults(query, lim, off, [])
    prefix = (path_prefix or "").lstrip("/")
    condition = " AND substr(f.path, 1, length(?)) = ?" if prefix else ""
    extra: tuple[Any, ...] = (prefix, prefix) if prefix else ()
    if where is not None:
        more, params = where.sql("f")
        condition += more
        extra += tuple(params)
    parsed = parse(text)
    window = (recency_window(lim, off), 0) if weight else (lim, off)
    scope = where.scope if where is not None else None
    fast = columns if tuned.term_columns and not weight else None
    # superseded pages left out: the columns drop them before their cut, by a mask they keep
    live = where is not None and not where.include_superseded
    sifted = (condition, extra, scope, live)
    rows = None
    if parsed.syntax is not None:
        rows = _syntax_rows(conn, parsed.syntax, sifted, fast, window, top_k)
    terms = query_terms(text) if rows is not None else list(parsed.words)
    if rows is None:
        if not parsed.terms:
            return SearchResults(query, lim, off, [])
        if tuned.feedback and not weight and len(parsed.terms) >= feedback.MIN_TERMS:
            rows = _with_feedback(conn, parsed, sifted, fast, (lim, off), tuned)
        else:
            rows = _any_rows(conn, parsed, sifted, fast, window, tuned)
    if weight:
        rows = blend_recency(rows, weight, time.time_ns())[off : off + lim]
    if not snippets:
        return SearchResults(
            query, lim, off, [SearchHit(py_text(p), float(s), "") for p, s, _, _ in rows]
        )
    bodies = texts(conn, [file_id for _, _, file_id, _ in rows])
    hits = [SearchHit(py_text(p), float(s), snippet(bodies[i], terms)) for p, s, i, _ in rows]
    return SearchResults(query, lim, off, hits)


def _syntax_rows(
    conn: sqlite3.Connection,
    syntax: str,
    sifted: Sifted,
    columns: TermColumns | None,
    window: tuple[int, int],
    top_k: bool,
) -> list[tuple[Any, float, int, int]] | None:
    """The page for a query of FTS5 syntax as written, or ``None`` when FTS5 rejects it (the
    caller then reads it as natural language)."""
    keys = syntax_phrases(syntax) if columns is not None else None
    condition, extra, _, _ = sifted
    rows = None
    try:
        rows = _from_columns(conn, keys, sifted, columns, *window)
    except sqlite3.OperationalError:
        rows = None  # a phrase FTS5 cannot read: the plain query below says so
    try:
        if rows is not None:
            return rows
        return _ranked(conn, syntax, condition, extra, *window, top_k)
    except sqlite3.OperationalError as exc:
        if is_busy(exc) or is_damage(exc):
            raise  # the index's trouble, not the query's
        return None


def _any_rows(
    conn: sqlite3.Connection,
    parsed: Query,
    sifted: Sifted,
    columns: TermColumns | None,
    window: tuple[int, int],
    tuning: Tuning,
) -> list[tuple[Any, float, int, int]]:
    """The page for the natural reading (any of its terms), from the term columns when a
    server keeps them, else from FTS5; the terms are FTS5 strings of words, which FTS5 never
    rejects. ``tuning``: its ``search_top_k`` and ``term_pruning``."""
    terms = [(t.key, t.match) for t in parsed.terms]
    condition, extra, scope, live = sifted
    prune = tuning.term_pruning
    rows = None
    if columns is not None:
        with snapshot(conn):
            rows = columns.ranked_any(
                conn, terms, condition, extra, scope, *window, live=live, prune=prune
            )
    if rows is not None:
        return rows
    try:
        return _ranked(conn, parsed.any_match, condition, extra, *window, tuning.search_top_k)
    except sqlite3.OperationalError as exc:  # pragma: no cover - strings of words always parse
        raise InvalidQuery(f"invalid search query {parsed.text!r}: {exc}") from exc


def _with_feedback(
    conn: sqlite3.Connection,
    parsed: Query,
    sifted: Sifted,
    columns: TermColumns | None,
    page: tuple[int, int],
    tuning: Tuning,
) -> list[tuple[Any, float, int, int]]:
    """The ``page`` (limit, offset) for the natural reading re-ranked with pseudo-relevance
    feedback (:mod:`index.search.feedback`): the first :data:`~kiwifs.index.search.feedback.POOL`
    hits (or the whole page asked for, when deeper) are ranked as usual, then mixed with the
    feedback words'."""
    lim, off = page
    window = (max(feedback.POOL, off + lim), 0)
    keys = frozenset(t.key for t in parsed.terms if not t.key.startswith(PHRASE))
    condition, extra, _, _ = sifted
    with snapshot(conn):  # the feedback's kept counts need the log position of their state
        rows = _any_rows(conn, parsed, sifted, columns, window, tuning)
        return feedback.rerank(conn, rows, keys, condition, extra)[off : off + lim]


def blend_recency(rows: list[Any], weight: float, now_ns: int) -> list[Any]:
    """``(path, score, file id, mtime_ns)`` rows re-scored with recency and sorted, best first.

    Relevance is the score over the best score (1 for the best hit); recency halves every
    :data:`RECENCY_HALF_LIFE_DAYS` of age (1 for a file modified now; a future mtime counts as
    now). Ties keep the BM25 order.
    """
    best = max((float(r[1]) for r in rows), default=0.0)
    scored = []
    for rank, (path, score, file_id, mtime_ns) in enumerate(rows):
        relevance = float(score) / best if best > 0 else 1.0
        age_days = max(0, now_ns - mtime_ns) / _NS_PER_DAY
        recency = 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
        blended = (1.0 - weight) * relevance + weight * recency
        scored.append((-blended, rank, (path, blended, file_id, mtime_ns)))
    scored.sort()
    return [row for _, _, row in scored]


def syntax_phrases(text: str) -> list[tuple[str, str]] | None:
    """A query of FTS5 syntax that is only phrases AND-ed (``"a b" memo* AND run``) as term
    column keys and phrases (see :mod:`index.search.termcolumns`); ``None`` for anything else
    (``OR``, ``NOT``, ``NEAR``, groups, column filters, ``^``, ``+``, a phrase of no word):
    FTS5 ranks those, and reports their syntax errors."""
    phrases: list[tuple[str, str]] = []
    pos = 0
    joined = False  # the last token was AND: a phrase must follow
    for found in _PHRASE_TOKEN.finditer(text):
        start, token = found.start(), found.group()
        if text[pos:start].strip() or (start and not text[start - 1].isspace()):
            return None  # anything but whitespace between phrases
        pos = found.end()
        if token == "AND" and phrases and not joined:
            joined = True
            continue
        if token.rstrip("*") in _OPERATORS:
            return None
        joined = False
        phrases.append((PHRASE + token, token))
    if joined or not phrases or text[pos:].strip():
        return None
    inner = [p.rstrip("*").strip('"').replace('""', '"') for _, p in phrases]
    if any(length == 0 for _, length in TOKENIZER.counts(inner)):
        return None  # an empty phrase: left to FTS5
    return phrases


def _from_columns(
    conn: sqlite3.Connection,
    words: list[tuple[str, str]] | None,
    sifted: Sifted,
    columns: TermColumns | None,
    lim: int,
    off: int,
) -> list[tuple[Any, float, int, int]] | None:
    """The page from the term columns, read in one snapshot; ``None``: the plain query."""
    if columns is None or words is None:
        return None
    condition, extra, scope, live = sifted
    with snapshot(conn):
        return columns.ranked(conn, words, condition, extra, scope, lim, off, live)


def _ranked(
    conn: sqlite3.Connection,
    match: str,
    condition: str,
    extra: tuple[Any, ...],
    lim: int,
    off: int,
    top_k: bool = True,
) -> list[tuple[Any, float, int, int]]:
    """``(path, score, id, mtime_ns)`` of the hits ``off`` to ``off + lim`` in (BM25, key) order.

    A common word matches most of the corpus; joining every match with ``files`` to filter and
    tie-break costs as much as ranking it. So the matches are first cut to a window by BM25
    alone, and only the window is joined. The cut is exact when the window held every match,
    or when the last hit wanted scores strictly better than the window's worst (every match left
    out scores no better than that, so none could sort before it, ties included); otherwise the
    window grows, and past :data:`MAX_WINDOW` the full query answers.
    """
    wanted = off + lim
    window = max(FIRST_WINDOW, 2 * wanted)
    while top_k and window <= MAX_WINDOW:  # top_k off: the full query, the plain path
        top = conn.execute(TOP_SQL, (match, window)).fetchall()
        scores = dict(top)
        ids = ",".join(str(int(i)) for i in scores)
        picked = conn.execute(
            PICK_SQL.format(hint="NOT INDEXED", ids=ids or "NULL", prefix=condition), extra
        )
        ordered = sorted((scores[i], key, path, i, mtime) for i, path, key, mtime in picked)
        complete = len(top) < window
        if complete or (len(ordered) >= wanted and ordered[wanted - 1][0] < top[-1][1]):
            return [(path, -score, i, mtime) for score, _, path, i, mtime in ordered[off:wanted]]
        if len(ordered) * MAX_WINDOW < 2 * wanted * window:
            break  # the filters keep too few matches for any window to hold the page
        window *= 8
    sql = SQL.format(prefix=condition)
    return [tuple(r) for r in conn.execute(sql, (match, *extra, lim, off))]


def query_terms(query: str) -> list[str]:
    """The words of a query, lower-cased, without FTS5 operators (for snippets)."""
    words: list[str] = []
    for tok in query.split():
        if tok in _OPERATORS:
            continue
        for word in _WORD.findall(tok):
            low = word.lower()
            if low not in words and not (word.isupper() and word in _OPERATORS):
                words.append(low)
    return words


def marked_parts(snippet: str) -> list[tuple[str, bool]]:
    """A snippet as ``(text, highlighted)`` parts, its ``<mark>`` tags taken out."""
    parts: list[tuple[str, bool]] = []
    pos = 0
    for found in _MARKED.finditer(snippet):
        if found.start() > pos:
            parts.append((snippet[pos : found.start()], False))
        parts.append((found.group(1), True))
        pos = found.end()
    if pos < len(snippet):
        parts.append((snippet[pos:], False))
    return parts


def snippet(body: str, terms: list[str]) -> str:
    """First line holding a term (else the first line), trimmed, ≤160 bytes, terms marked."""
    chosen = first_line_holding(body, terms).strip()
    raw = chosen.encode("utf-8", "replace")
    if len(raw) > SNIPPET_BYTES:
        chosen = raw[:SNIPPET_BYTES].decode("utf-8", "ignore") + "\u2026"
    return _mark(chosen, terms)


def first_line_holding(body: str, terms: list[str]) -> str:
    """The first of ``body.splitlines()`` whose lower case holds one of ``terms``, else the first
    line (``""`` for an empty body).

    Found from the earliest match in the whole body lowered once, then the line breaks around
    it: a page's 50 snippets took ~2 ms a search (a 1M root) splitting and lowering every line
    before the match. The breaks are found by one pattern, not a scan per kind of break (most
    kinds are in no page, and each scan read the whole page: 20 → 15 µs a snippet). A body
    whose lower case is not as long as itself (``İ`` lowers to two characters), or a term
    holding a line break, takes the plain way, line by line (a test holds the two equal).
    """
    low = body.lower()
    if len(low) != len(body) or any(_BREAK.search(t) for t in terms):
        return _first_line_plainly(body, terms)
    found = [at for at in (low.find(t) for t in terms) if at >= 0]
    at = min(found) if found else 0
    start = body.rfind("\n", 0, at) + 1  # then any other break between it and the match
    while (other := _OTHER_BREAK.search(body, start, at)) is not None:
        start = other.end()
    end = _BREAK.search(body, at)
    return body[start : end.start()] if end is not None else body[start:]


def _first_line_plainly(body: str, terms: list[str]) -> str:
    lines = body.splitlines() or [""]
    return next((ln for ln in lines if any(t in ln.lower() for t in terms)), lines[0])


def _mark(text: str, terms: list[str]) -> str:
    low = text.lower()
    spans: list[tuple[int, int]] = []
    for term in terms:
        at = low.find(term)
        if at < 0 or len(low) != len(text):
            continue
        end = at + len(term)
        if all(end <= s or at >= e for s, e in spans):
            spans.append((at, end))
    out: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        out.append(text[pos:start] + "<mark>" + text[start:end] + "</mark>")
        pos = end
    out.append(text[pos:])
    return "".join(out)
