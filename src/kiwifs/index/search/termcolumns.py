"""Term columns: each queried common word's frequency in every document, held in memory, so a
query of common words is ranked by array arithmetic instead of FTS5 scoring every match.

FTS5 computes ``bm25()`` for every document a query matches, ~1 µs each: a word found in
most files (``run`` matches 105,976 of 106,230 on the benchmark's corpus) costs ~100 ms a
query however few hits are wanted, and pruning (keeping each word's best documents and
stopping early) fails on such words, whose scores are nearly flat. So this process keeps, for
each common word it was asked about, a column ``tf[doc]`` (numpy, indexed by row id), and for
every document its length ``dl[doc]``; a query's exact BM25 over all its matches is then a
handful of vector operations (~1–3 ms at 100k documents, ~6 ms for three words at 1M; at most
:data:`MAX_COLUMNS` columns are kept, the least recently used dropped), with FTS5's formula,
operations and order (:mod:`index.search.bm25`), so the scores are FTS5's own to the last bit.
A word's share of a score depends only on its count and the document's length, so it is read
from a small table of the (count, length) pairs (:meth:`TermColumns._totals`), and a large
index is summed in slices by a few threads (numpy lets go of the interpreter lock).

**Making a column** (first query of a word in this process): a word's instances are read from
FTS5's index (``fts5vocab``: each document's count is its number of instances, what BM25 counts;
~0.1 s at 150k matches of 1M documents). A phrase is ranked by FTS5 once (``rowid, bm25``) and
``tf`` is solved from each score; the score recomputed from it must be FTS5's exactly, or no
column is made and the plain query answers.
Words in fewer than :data:`MIN_DF` documents get no column (FTS5 ranks them in ~1 ms).

**Staying current.** Every change of the text index appends the document's id to ``fts_log``
(``bodies.TextChanges``, in the writer's transaction: a rolled-back write leaves no entry). A query
reads, in one snapshot, the log past the last entry the columns have seen, and recounts those
documents (their stored text, FTS5's tokenizer, FTS5's stored lengths). The columns are thrown
away and remade when they cannot be caught up: the log was cut past them (it keeps
``changelog.KEEP`` entries), the schema changed (a rebuild), or the totals disagree with
FTS5's (text indexed by a path that does not log, such as the bulk load into an empty index).

**Phrases and prefixes.** A query of FTS5 syntax that is only AND-ed phrases (``"a b"``,
``memo*``, ``"a b"*``, barewords) is ranked the same way: FTS5's BM25 treats each phrase as a
term whose frequency is its number of instances in the document and whose document count is the
number of documents holding it, so each phrase gets a column (key :data:`PHRASE` + the phrase as
written) made from FTS5's ranking of that phrase alone, whatever its document count (the cost
of such a query is FTS5 matching the common words it is made of, not the phrase's rarity). A
changed document's phrase counts are solved from FTS5's BM25 of the phrase over the changed
texts in the private tokenizer table (:meth:`bm25.Tokenizer.phrase_counts`), checked to the
last bit like a column's making; a phrase column that cannot be caught up is dropped.

**Words OR-ed** (a natural-language query, :mod:`index.search.query`): FTS5's BM25 of an OR is the
same sum over its phrases in the query's order, a phrase a document lacks adding ``0.0``, over
every document holding any of them. Common words come from their columns; a rare word (fewer
than :data:`MIN_DF` documents) from FTS5's ranking of it alone, in one pass that stops at
:data:`MIN_DF` matches, its counts solved and checked like a column's making; a phrase gets a
column whatever its count. So an OR of common words costs vector arithmetic, not FTS5 scoring
nearly every document.

**Pruning** (:meth:`TermColumns._pruned`, a large index, no filter but the superseded rule):
only the documents whose counts could bring them onto the page are scored, and every other one
is held under an exact bound (their largest possible sum, added in the terms' order); when the
page's last candidate scores more than that, the page is theirs, else every document is summed.

numpy is imported on the first such query; without numpy, queries take the plain path.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kiwifs.index import changelog
from kiwifs.index.filters import RecallFilter
from kiwifs.index.schema import INSTANCE_TABLE
from kiwifs.index.search import bm25, storedcolumns
from kiwifs.index.texts import texts

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from numpy.typing import NDArray

MIN_DF = 2000  # fewer matches than this: FTS5 ranks them in ~2 ms, no column needed
MAX_COLUMNS = 256  # columns kept (least recently used dropped): ~27 MB at 100k documents
FIRST_CUT = 64  # candidates filtered in the first round (×8 while too few pass)
# the most (count, length) pairs a term's score table may hold (8 MB): see TermColumns._totals
MAX_TABLE = 1 << 20
# A table stops at this count (a few hundred kB at 1,500 lengths: it stays in the CPU's cache,
# where a table of a count of 400 took 2 ms a query to read); higher counts are scored alone.
CAP = 31
TABLE_BYTES = 64 << 20  # the tables kept for the next queries (least recently used dropped)
SAMPLED, SAMPLES = 65_536, 16_384  # scores cut from a sample of 16k: arrays of 64k or more
SPARSE = 4  # matches fewer than 1 in this many documents: the page is cut from them alone
SLICE = 250_000  # documents at least a thread sums (fewer: a thread costs more than it saves)
# Pruning (see TermColumns._pruned): from this many documents (fewer: every sum is cheap), a
# first level meant to take this share of them, and a term whose largest share is under the
# heaviest's over this factor is light (bounded whole, its documents not candidates)
PRUNE_FROM = 200_000
PRUNE_SHARE = 0.05
LEVEL_SAMPLES = 4096  # documents the first level is chosen from (each one read is a cache miss)
LEVEL_RANK = 3  # the sampled score the first level's bound is set under: see _first_level
PRUNE_MOST = 4  # more candidates than 1 document in this many: every sum costs less
LIGHT = 16.0
# Room made when a new document's id is past the columns: 1/32 of them more (at least 1,024).
# Every column is copied to grow, so room saves copies; a quarter more, as at first, was 48 MB of
# zeros in a served 1M root's 182 columns from its first new file on.
GROW_SHARE = 32
GROW_LEAST = 1024
PHRASE = "\x01"  # a column key starting with this is an FTS5 phrase as written, not a word
# The conditions that pass every live page (none, or the superseded rule alone): see _page
_NO_FILTER = ("", RecallFilter().sql("f")[0])
_TOKEN = re.compile(r"[^\W_]+")  # a token the index stores as it is (no phrase, no separator)

Row = tuple[Any, float, int, int]  # (path, score, id, mtime_ns)
# an OR-ed term: (its key, its documents or None for a column, counts, document count, top count)
Term = tuple[str, Any, Any, int, int]
Facts = tuple[int, int, Any]  # a column's document count, top count, documents past CAP
Step = tuple[str, Any, Any]  # how a term's share is added: see _add_steps
PRUNE_ARRAYS = ("uint8", "uint8", "bool")  # the pruned path's kept arrays: see TermColumns._kept


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy ships with the package
        return None
    return numpy


class TermColumns:
    """The columns of one index in this process (thread-safe; queries take turns)."""

    def __init__(self, threads: int = 1) -> None:
        """``threads``: how many threads may sum a large index's scores at once."""
        self._lock = threading.Lock()
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._epoch: tuple[int, int] | None = None  # (schema version, last log entry seen)
        self._dl: NDArray[np.int64] | None = None
        self._present: NDArray[np.bool_] | None = None
        # each document's length as a code: its place in ``_lengths``, the distinct lengths
        self._codes: NDArray[np.intp] | None = None  # (the index type: see _look_up)
        self._superseded: NDArray[np.bool_] | None = None  # superseded pages, by row id
        self._dropped: NDArray[np.intp] | None = None  # their row ids (see _superseded_ids)
        self._lengths: list[int] = []
        self._code_of: dict[int, int] = {}
        self._tf: OrderedDict[str, NDArray[Any]] = OrderedDict()  # least recently used first
        self._failed: set[str] = set()  # words FTS5 did not score as expected (until a reload)
        self._facts: dict[str, Facts] = {}  # what queries need of each column: see _facts_of
        self._tables: OrderedDict[tuple[Any, ...], Any] = OrderedDict()  # see _table
        self._table_bytes = 0
        self._rows = self._tokens = 0  # documents and words the lengths hold (FTS5's totals)
        self._scratch: dict[str, tuple[Any, ...]] = {}  # arrays kept for the next query: _kept
        self._generation = 0  # moves whenever the columns start afresh (see kept_column)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._epoch, self._dl, self._present, self._codes = None, None, None, None
            self._superseded, self._lengths, self._code_of = None, [], {}
            self._dropped = None
            self._scratch = {}
            self._tf.clear()
            self._failed.clear()
            self._facts.clear()
            self._tables.clear()
            self._table_bytes = 0

    def close(self) -> None:
        """Let the summing threads go (the columns stay usable: a new one starts if asked)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def load(self, conn: sqlite3.Connection) -> dict[str, int]:
        """Bring the document lengths, and the columns a rebuild kept, up to ``conn``'s
        snapshot now (inside a read transaction), rather than at the first query; and count
        what a query needs of each column (its documents, its top count, those past
        :data:`CAP`: two passes over a million documents a column). Returns each word column's
        number of documents in that snapshot (none without numpy or text)."""
        np = _numpy()
        if np is None:
            return {}
        with self._lock:
            nrows, ntokens = bm25.totals(conn)
            if not nrows or not self._current(np, conn, nrows, ntokens):
                return {}
            return {
                key: self._facts_of(np, key)[0] for key in self._tf if not key.startswith(PHRASE)
            }

    def ranked(
        self,
        conn: sqlite3.Connection,
        words: list[tuple[str, str]],
        condition: str,
        extra: tuple[Any, ...],
        scope: str | None,
        lim: int,
        off: int,
        live: bool = False,
    ) -> list[Row] | None:
        """Hits ``off`` to ``off + lim`` in (BM25, key) order, as the plain query gives them,
        or ``None`` (a rare word, no numpy, a column that could not be made). ``words`` are
        ``(key, token)``: an indexed word and its token as written, or :data:`PHRASE` + an
        FTS5 phrase and that phrase. ``condition`` (SQL over ``files f``, with ``extra``) and
        ``scope`` filter the hits; ``live``: the condition leaves out superseded pages, which
        are then dropped before the cut (by a mask kept here, as the lengths are), so that
        pages matching best but superseded do not make the filter look at thousands of rows.
        Call inside a read transaction: the log, the totals and the rows must come from one
        snapshot."""
        np = _numpy()
        if np is None or len(dict(words)) > MAX_COLUMNS:
            return None
        with self._lock:
            nrows, ntokens = bm25.totals(conn)
            if nrows == 0 or not self._current(np, conn, nrows, ntokens):
                return None
            for word, token in dict(words).items():
                if word in self._tf:
                    self._tf.move_to_end(word)
                elif not self._make(np, conn, word, token, nrows, ntokens):
                    return None
            scores, ids = self._scores(np, [word for word, _ in words], nrows, ntokens)
            if live:
                assert self._superseded is not None
                kept = ~self._superseded[ids]
                scores, ids = scores[kept], ids[kept]
        if scope is not None:
            keep = _scope_ids(np, conn, scope, condition, extra)
            inside = np.isin(ids, keep)
            scores, ids = scores[inside], ids[inside]
        return _page(np, conn, scores, ids, condition, extra, lim, off)

    def ranked_any(
        self,
        conn: sqlite3.Connection,
        terms: list[tuple[str, str]],
        condition: str,
        extra: tuple[Any, ...],
        scope: str | None,
        lim: int,
        off: int,
        live: bool = False,
        prune: bool = True,
    ) -> list[Row] | None:
        """Like :meth:`ranked`, for the terms OR-ed (``(key, FTS5 string)`` each, as
        :mod:`index.search.query` makes them): every document holding any term, scored with FTS5's
        sum over the terms in their order (a term a document lacks adds FTS5's ``0.0``). A common
        term is read from its column; a rare one (fewer than :data:`MIN_DF` documents, no
        column) from FTS5's ranking of it alone, solved for its counts and checked to the last
        bit like a column's making. ``None``: no numpy, or a score that did not solve. ``prune``:
        with no filter but the superseded rule, a large index scores only the documents that
        can reach the page (:meth:`_pruned`; off: every document, the plain sums)."""
        np = _numpy()
        if np is None or not terms or len(terms) > MAX_COLUMNS:
            return None
        with self._lock:
            nrows, ntokens = bm25.totals(conn)
            if nrows == 0 or not self._current(np, conn, nrows, ntokens):
                return None
            found = [self._term(np, conn, key, match, nrows, ntokens) for key, match in terms]
            if any(f is None for f in found):
                return None
            known = [f for f in found if f is not None]
            picked = None
            if prune and scope is None and _passes_every_live(condition, extra):
                picked = self._pruned(np, known, nrows, ntokens, off + lim, live)
            if picked is None:
                total = self._totals(np, known, nrows, ntokens)
                if live:
                    total[self._superseded_ids(np)] = 0.0  # as if they held none of the terms
                if scope is None:  # (under the lock: ``total`` is the next query's buffer too)
                    # at most this many documents hold any term: when few, the page is cut
                    # from them
                    bound = sum(term[3] for term in known)
                    return _page(np, conn, total, None, condition, extra, lim, off, bound)
                ids = np.flatnonzero(total > 0.0)  # a term a document holds adds more than 0
                picked = total[ids], ids
        scores, ids = picked  # arrays of this query's own
        if scope is not None:
            inside = np.isin(ids, _scope_ids(np, conn, scope, condition, extra))
            scores, ids = scores[inside], ids[inside]
        return _page(np, conn, scores, ids, condition, extra, lim, off)

    def _pruned(
        self, np: Any, found: list[Term], nrows: int, ntokens: int, wanted: int, live: bool
    ) -> tuple[NDArray[np.float64], NDArray[np.intp]] | None:
        """The scores of only the documents that can be among the ``wanted`` best, and their
        ids; ``None``: every document's sum answers (a small index, a term scored by formula,
        or too many candidates).

        A term's share of a score grows with its count and shrinks with the document's length,
        the same way for every term. So for a level ``λ`` each length has a least count whose
        share reaches it; a document below that count for every *essential* term (the query's
        weighty ones) scores at most the sum of each term's largest share under those counts
        (and, for the light terms, of their largest share at all): the bound ``B``, summed in
        the terms' order as a score is, so no rounding can carry a score past it. The
        documents at or above the count for some essential term, and every document of a
        rare term, are the candidates; they are scored exactly, as every document would be. When
        the ``wanted``-th best of them scores more than ``B``, no other document can reach the
        page, ties included, and the page is cut from them alone. ``λ`` is first the higher of
        two levels read from a sample: one about :data:`PRUNE_SHARE` of the documents reach,
        and one whose bound a page as good as the sample's few best would pass (far fewer
        candidates when one term outweighs the others); when that was too high, it is lowered
        once to what the candidates' ``wanted``-th score allows."""
        assert self._dl is not None and self._codes is not None
        if len(self._dl) < PRUNE_FROM:
            return None
        shape, steps = self._steps(np, found, nrows, ntokens)
        if any(how == "direct" for how, _, _ in steps):
            return None
        width = len(shape)
        tops = [_largest(np, how, value) for how, _, value in steps]
        heaviest = max(tops)
        # a rare term's documents are all candidates (it bounds nothing); a light term is bounded
        # by its largest share (its documents are not candidates for it)
        essential = [
            how != "add" and top * LIGHT >= heaviest
            for (how, _, _), top in zip(steps, tops, strict=True)
        ]
        if not any(essential):
            return None
        weight = light = 0.0  # the essential terms' idf and the light ones' largest shares
        for term, (how, _, _), top, keep in zip(found, steps, tops, essential, strict=True):
            weight += bm25.idf(nrows, term[3]) if keep else 0.0
            light += top if how != "add" and not keep else 0.0
        kept = [what for (_, what, _), keep in zip(steps, essential, strict=True) if keep]
        most = self._most(np, kept)
        factor = bm25.share(1.0, np.arange(CAP + 2, dtype=np.float64)[:, None], shape[None, :])
        level = _first_level(np, factor, most, self._codes, steps, essential, (weight, light))
        for _ in range(2):
            least = _least_counts(np, factor, level)
            bound = 0.0  # summed in the terms' order, as a score is
            for (how, _, value), top, keep in zip(steps, tops, essential, strict=True):
                if how != "add":
                    bound += _largest_under(np, how, value, least, width) if keep else top
            ids = self._candidates(np, most, least, steps, live)
            if ids is None:
                return None
            scores = _scored_at(np, ids, self._codes.take(ids), shape, steps)
            if len(scores) < wanted:  # fewer than a page: every document of a weighty term
                level = float(factor[1].min())
                continue
            floor = float(np.partition(scores, len(scores) - wanted)[len(scores) - wanted])
            if floor > bound:
                return scores, ids
            # the level whose bound the candidates' ``wanted``-th score would pass
            level = (floor - light) / weight * (1.0 - 1e-9)
            if level <= 0.0:
                return None
        return None

    def _most(self, np: Any, counts: list[Any]) -> Any:
        """Each document's largest count of the essential terms (a kept buffer when they are
        bytes, as nearly all columns are)."""
        if len(counts) == 1:
            return counts[0]
        if all(c.dtype == np.uint8 for c in counts):
            most = self._kept(np, "prune", PRUNE_ARRAYS)[0]
            np.maximum(counts[0], counts[1], out=most)
        else:
            most = np.maximum(counts[0], counts[1])
        for column in counts[2:]:
            np.maximum(most, column, out=most)
        return most

    def _candidates(
        self, np: Any, most: Any, least: Any, steps: list[Step], live: bool
    ) -> NDArray[np.intp] | None:
        """The documents holding an essential term at least ``least`` (by length code) times,
        or a rare term; not the superseded ones when ``live``. ``None``: more than one in
        :data:`PRUNE_MOST` (summing every document then costs less)."""
        codes = self._codes
        assert codes is not None
        _, needed, mask = self._kept(np, "prune", PRUNE_ARRAYS)
        forced = [what for how, what, _ in steps if how == "add"]
        dropped = self._superseded_ids(np) if live else None

        def part(lo: int, hi: int) -> Any:
            np.take(least, codes[lo:hi], out=needed[lo:hi], mode="clip")  # codes are in range
            np.greater_equal(most[lo:hi], needed[lo:hi], out=mask[lo:hi])
            for ids in forced:  # (in row id order: a rare term's, the superseded pages)
                mask[ids[np.searchsorted(ids, lo) : np.searchsorted(ids, hi)]] = True
            if dropped is not None:
                mask[dropped[np.searchsorted(dropped, lo) : np.searchsorted(dropped, hi)]] = False
            return np.flatnonzero(mask[lo:hi]) + lo

        found: NDArray[np.intp] = np.concatenate(self._in_slices(len(mask), part))
        return found if len(found) * PRUNE_MOST <= len(mask) else None

    def _superseded_ids(self, np: Any) -> NDArray[np.intp]:
        """The superseded pages' row ids, kept until the mask changes: setting a million
        documents' scores through a mask took 0.7 ms a query, through the few ids 0.1."""
        if self._dropped is None:
            assert self._superseded is not None
            self._dropped = np.flatnonzero(self._superseded)
        return self._dropped

    def _term(
        self, np: Any, conn: sqlite3.Connection, key: str, match: str, nrows: int, ntokens: int
    ) -> Term | None:
        """One OR-ed term as ``(ids or None, counts, document count, top count)``: ``ids`` is
        ``None`` for a column (counts indexed by row id), else the rare term's documents and
        counts."""
        if key in self._tf:
            self._tf.move_to_end(key)
            return key, None, self._tf[key], *self._facts_of(np, key)[:2]
        phrase = key.startswith(PHRASE)
        rows = []
        if not phrase:  # one pass: FTS5 stops at MIN_DF matches (those of a common word)
            sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? LIMIT ?"
            rows = conn.execute(sql, (match, MIN_DF)).fetchall()
        if phrase or len(rows) >= MIN_DF:  # a phrase costs its words' matching: keep a column
            if not self._make(np, conn, key, match if phrase else match[1:-1], nrows, ntokens):
                return None
            return key, None, self._tf[key], *self._facts_of(np, key)[:2]
        found = np.array(rows, dtype=np.float64).reshape(-1, 2)
        assert self._dl is not None
        ids = found[:, 0].astype(np.int64)
        if len(ids) and ids.max() >= len(self._dl):
            return None
        tf = bm25.solve(np, found[:, 1], self._dl[ids], nrows, len(ids), ntokens)
        return None if tf is None else (key, ids, tf, len(ids), 0)

    def _table(
        self, np: Any, key: str, weight: float, top: int, shape: Any, nrows: int, ntokens: int
    ) -> Any:
        """A term's table of shares by (count, length code), kept while the text index stands
        still (its totals, the term's document count and top count, the lengths known): a
        word counted hundreds of times in a page has a table of ~600k shares, 2 ms to make."""
        stamp = (key, weight, top, len(shape), nrows, ntokens)
        table = self._tables.get(stamp)
        if table is not None:
            self._tables.move_to_end(stamp)
            return table
        tfs = np.arange(top + 1, dtype=np.float64)[:, None]
        table = bm25.share(weight, tfs, shape[None, :]).reshape(-1)
        self._tables[stamp] = table
        self._table_bytes += table.nbytes
        while self._table_bytes > TABLE_BYTES and len(self._tables) > 1:
            self._table_bytes -= self._tables.popitem(last=False)[1].nbytes
        return table

    def _facts_of(self, np: Any, key: str) -> Facts:
        """What queries need of ``key``'s column, counted once and kept until it changes: its
        document count, its top count, and the documents holding it more than :data:`CAP`
        times (in row id order; ``None`` when none can)."""
        facts = self._facts.get(key)
        if facts is None:
            column = self._tf[key]
            top = int(column.max())
            over = np.flatnonzero(column > CAP) if top > CAP else None
            facts = self._facts[key] = (int(np.count_nonzero(column)), top, over)
        return facts

    def _totals(self, np: Any, found: list[Term], nrows: int, ntokens: int) -> NDArray[np.float64]:
        """Every document's sum over the terms in their order (FTS5's, sign flipped), by id:
        ``0.0`` for a document that holds none.

        A term's share of a document's score depends on its count there and the document's
        length alone, so it is read from a table of every (count, length) pair the term has,
        computed with FTS5's operations: the same doubles as scoring each document, in two
        array passes instead of seven (lengths are few: a few hundred distinct ones at 1M
        documents). A table that would be too big (a count in the thousands) is not made.
        Each document's sum is its own, so a large index is summed in slices, one a thread."""
        assert self._dl is not None and self._codes is not None
        shape, steps = self._steps(np, found, nrows, ntokens)
        total: NDArray[np.float64]
        total, shares, at = self._kept(np, "sums", (np.float64, np.float64, np.intp))
        codes = self._codes
        self._in_slices(
            len(total),
            lambda lo, hi: _sum_slice(np, total, codes, shape, steps, lo, hi, shares, at),
        )
        return total

    def _in_slices(self, size: int, work: Callable[[int, int], object]) -> list[object]:
        """``work(lo, hi)`` over ``0`` to ``size`` in slices, one a thread (numpy lets go of the
        interpreter lock), when the slices are large enough to pay for a thread; the results in
        slice order."""
        pieces = max(1, min(self._threads, size // SLICE))
        bounds = [size * i // pieces for i in range(pieces + 1)]
        slices = list(itertools.pairwise(bounds))
        if pieces == 1:
            return [work(*slices[0])]
        pool = self._pool
        if pool is None:  # imported here: the memory report from the CLI loads this module
            from concurrent.futures import ThreadPoolExecutor

            pool = self._pool = ThreadPoolExecutor(self._threads - 1, "kiwifs-columns")
        pending = [pool.submit(work, lo, hi) for lo, hi in slices[1:]]
        first = work(*slices[0])
        return [first, *(future.result() for future in pending)]

    def _steps(
        self, np: Any, found: list[Term], nrows: int, ntokens: int
    ) -> tuple[Any, list[Step]]:
        """How each term's share is added (see :func:`_sum_slice`), in the terms' order, and
        the length part of the formula by length code."""
        assert self._codes is not None
        avgdl = ntokens / nrows
        lengths = np.array(self._lengths, dtype=np.float64)
        shape = bm25.shape(lengths, avgdl)  # by length code
        steps: list[Step] = []
        for key, ids, counts, nhit, top in found:
            weight = bm25.idf(nrows, nhit)
            if ids is not None:  # a rare term: its few documents alone, in row id order
                order = np.argsort(ids, kind="stable")
                tf = counts[order].astype(np.float64)
                part = bm25.share(weight, tf, shape[self._codes[ids[order]]])
                steps.append(("add", ids[order], part))
            elif (min(top, CAP) + 1) * len(shape) > MAX_TABLE:
                steps.append(("direct", counts, weight))
            elif top <= CAP:
                table = self._table(np, key, weight, top, shape, nrows, ntokens)
                steps.append(("table", counts, table))
            else:  # counts past CAP: the table stops there, those few documents scored alone
                table = self._table(np, key, weight, CAP, shape, nrows, ntokens)
                over = self._facts_of(np, key)[2]
                tf = counts[over].astype(np.float64)
                exact = bm25.share(weight, tf, shape[self._codes[over]])
                steps.append(("capped", counts, (table, over, exact)))
        return shape, steps

    def _kept(self, np: Any, name: str, dtypes: tuple[Any, ...]) -> tuple[Any, ...]:
        """Arrays of one value a document, of ``dtypes``, kept under ``name`` for the next
        query (only one query uses them at a time: the lock): ``sums``, every document's total,
        a term's shares and their table indexes; ``prune``, the largest counts, the least
        counts by document and the candidates' mask.

        Made anew for each query, arrays of a million documents were memory the allocator
        mapped and the kernel zeroed page by page each time: in a server, whose threads keep the
        allocator from reusing it, that was a third of a first query's time at 1M documents."""
        assert self._dl is not None
        size = len(self._dl)
        kept = self._scratch.get(name)
        if kept is None or len(kept[0]) != size:
            kept = self._scratch[name] = tuple(np.empty(size, dtype=d) for d in dtypes)
        return kept

    # -- kept in the index again (index.search.columnkeeping) -----------------------------------

    def keeping_base(self, conn: sqlite3.Connection) -> tuple[int, int, int, Any] | None:
        """The columns brought up to ``conn``'s snapshot (inside a read transaction), then
        ``(generation, schema version, log entry, lengths)``: what a copy of them kept in the
        index starts from, every document's length (int32, ``-1``: no text). ``None``: no
        numpy, no text."""
        np = _numpy()
        if np is None:
            return None
        with self._lock:
            nrows, ntokens = bm25.totals(conn)
            if not nrows or not self._current(np, conn, nrows, ntokens):
                return None
            assert self._epoch is not None and self._dl is not None and self._present is not None
            lengths = np.where(self._present, self._dl, -1).astype(np.int32)
            return self._generation, self._epoch[0], self._epoch[1], lengths

    def kept_column(
        self, conn: sqlite3.Connection, word: str, generation: int, size: int
    ) -> tuple[bool, Any]:
        """A copy of ``word``'s counts in the first ``size`` documents, brought up to ``conn``'s
        snapshot (inside a read transaction): ``(True, copy)``, ``(True, None)`` when no
        column of it is held, ``(False, None)`` when the columns started afresh since
        :meth:`keeping_base` gave ``generation``."""
        np = _numpy()
        assert np is not None
        with self._lock:
            nrows, ntokens = bm25.totals(conn)
            if not nrows or not self._current(np, conn, nrows, ntokens):
                return False, None
            if self._generation != generation:
                return False, None
            column = self._tf.get(word)
            return True, None if column is None else column[:size].copy()

    # -- keeping the columns current ------------------------------------------------------------

    def _current(self, np: Any, conn: sqlite3.Connection, nrows: int, ntokens: int) -> bool:
        schema = int(conn.execute("PRAGMA schema_version").fetchone()[0])
        last = changelog.last(conn, "fts_log")
        epoch = self._epoch
        at = epoch[1] if epoch is not None else 0
        if epoch is None or epoch[0] != schema or epoch[1] > last:
            at = self._reload(np, conn, last)
        if at < last:
            logged = changelog.since(conn, "fts_log", "doc", at)
            if logged is None:  # the log was cut past our position: start afresh
                self._reload(np, conn, last, stored=False)
            else:
                self._recount(np, conn, [int(d) for d in logged])
        self._epoch = (schema, last)
        if not self._agrees(nrows, ntokens):
            self._reload(np, conn, last, stored=False)  # text indexed without the log
            return self._agrees(nrows, ntokens)
        return True

    def _agrees(self, nrows: int, ntokens: int) -> bool:
        return self._rows == nrows and self._tokens == ntokens

    def _reload(self, np: Any, conn: sqlite3.Connection, last: int, stored: bool = True) -> int:
        """Start afresh: the columns a rebuild kept (:mod:`index.search.storedcolumns`) when
        there are some the log can catch up, else every document's length from FTS5's own
        record of it and no word columns yet. Returns the log entry they are current at."""
        kept = storedcolumns.restore(conn) if stored else None
        if kept is not None and kept.log > last:
            kept = None  # not made from this text index (the caller catches up the others)
        self._generation += 1
        self._tf.clear()
        self._failed.clear()
        self._facts.clear()
        if kept is not None:
            self._set_lengths(np, conn, kept.lengths)
            for word, column in list(kept.columns.items())[:MAX_COLUMNS]:
                self._tf[word] = column
            return kept.log
        self._set_lengths(np, conn, bm25.document_lengths(np, conn))
        return last

    def _set_lengths(self, np: Any, conn: sqlite3.Connection, lengths: NDArray[np.int64]) -> None:
        """Each document's length (``-1``: not in the text index), and which are superseded
        (a page's frontmatter is in its text: it changes only with a logged text change)."""
        superseded = np.zeros(len(lengths), dtype=bool)
        found = [i for (i,) in conn.execute("SELECT id FROM files WHERE superseded = 1")]
        superseded[[i for i in found if i < len(lengths)]] = True
        self._superseded, self._dropped = superseded, None
        self._present = lengths >= 0
        self._dl = np.maximum(lengths, 0)
        self._rows, self._tokens = int(self._present.sum()), int(self._dl.sum())
        distinct, codes = np.unique(self._dl, return_inverse=True)
        self._codes = codes.astype(np.intp).reshape(-1)
        self._lengths = [int(n) for n in distinct]
        self._code_of = {n: i for i, n in enumerate(self._lengths)}

    def _grow(self, np: Any, size: int) -> None:
        assert self._dl is not None and self._present is not None
        if size <= len(self._dl):
            return
        size = max(size, len(self._dl) + max(len(self._dl) // GROW_SHARE, GROW_LEAST))
        grown = len(self._dl)
        self._dl = np.concatenate([self._dl, np.zeros(size - grown, dtype=np.int64)])
        self._present = np.concatenate([self._present, np.zeros(size - grown, dtype=bool)])
        assert self._codes is not None and self._superseded is not None
        more = np.zeros(size - grown, dtype=bool)
        self._superseded = np.concatenate([self._superseded, more])  # the same ids
        self._codes = np.concatenate(
            [self._codes, np.full(size - grown, self._code(0), dtype=np.intp)]
        )
        for word, column in self._tf.items():
            self._tf[word] = np.concatenate([column, np.zeros(size - grown, dtype=column.dtype)])

    def _code(self, length: int) -> int:
        """The code of a document length (a new length gets the next one)."""
        code = self._code_of.get(length)
        if code is None:
            code = self._code_of[length] = len(self._lengths)
            self._lengths.append(length)
        return code

    def _recount(self, np: Any, conn: sqlite3.Connection, docs: list[int]) -> None:
        """Bring the changed documents' lengths and word counts up to the snapshot."""
        if not docs:
            return
        self._grow(np, max(docs) + 1)
        assert self._dl is not None and self._present is not None
        marks = ",".join(str(d) for d in docs)
        sizes = {
            int(i): bm25.varint(sz)[0]
            for i, sz in conn.execute(f"SELECT id, sz FROM fts_docsize WHERE id IN ({marks})")
        }
        assert self._superseded is not None
        self._superseded[docs] = False
        self._dropped = None
        dead = f"SELECT id FROM files WHERE superseded = 1 AND id IN ({marks})"
        for (doc,) in conn.execute(dead):
            self._superseded[doc] = True
        assert self._codes is not None
        self._facts.clear()
        for doc in docs:
            length = sizes.get(doc, 0)
            self._rows += (doc in sizes) - bool(self._present[doc])
            self._tokens += length - int(self._dl[doc])
            self._dl[doc] = length
            self._codes[doc] = self._code(length)
            self._present[doc] = doc in sizes
            for column in self._tf.values():
                column[doc] = 0
        if not self._tf:
            return
        bodies = texts(conn, [d for d in docs if d in sizes])
        words = sorted(k for k in self._tf if not k.startswith(PHRASE))
        counted = bm25.TOKENIZER.counts([bodies[d] for d in bodies], words)
        for doc, (found, length) in zip(bodies, counted, strict=True):
            if length != sizes[doc]:  # the stored text is not what FTS5 indexed
                self._generation += 1
                self._tf.clear()  # remade from FTS5 itself on demand
                return
            for word, n in found.items():
                self._store(np, word, doc, n)
        self._recount_phrases(np, bodies)

    def _recount_phrases(self, np: Any, bodies: dict[int, str]) -> None:
        phrases = [k for k in self._tf if k.startswith(PHRASE)]
        if not phrases or not bodies:
            return
        docs = list(bodies)
        counted = bm25.TOKENIZER.phrase_counts([bodies[d] for d in docs], [k[1:] for k in phrases])
        if counted is None:  # FTS5 did not score as expected: remade from FTS5 on demand
            for key in phrases:
                del self._tf[key]
                self._facts.pop(key, None)
            return
        for key, found in zip(phrases, counted, strict=True):
            for at, n in found.items():
                self._store(np, key, docs[at], n)

    def _store(self, np: Any, word: str, doc: int, n: int) -> None:
        self._facts.pop(word, None)
        column = self._tf[word]
        if n > np.iinfo(column.dtype).max:
            column = self._tf[word] = column.astype(_wide(np, n))
        column[doc] = n

    def _make(
        self, np: Any, conn: sqlite3.Connection, word: str, token: str, nrows: int, ntokens: int
    ) -> bool:
        """The column of ``word`` (written ``token`` in the query) from FTS5's BM25 of it,
        checked to the last bit; False: none. A word is counted first (a rare one gets no
        column); a phrase is ranked at once (matching it is its cost, counting as dear)."""
        if word in self._failed:
            return False
        phrase = word.startswith(PHRASE)
        if not phrase:
            counted = self._counted(np, conn, word)
            if counted is not None:
                return counted
        match = token if phrase else '"' + token.replace('"', '""') + '"'
        nhit = None
        if not phrase:
            nhit = int(
                conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (match,)).fetchone()[0]
            )
            if nhit < MIN_DF:
                return False
        rows = conn.execute("SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ?", (match,))
        found = np.array(rows.fetchall(), dtype=np.float64).reshape(-1, 2)
        nhit = len(found) if nhit is None else nhit
        assert self._dl is not None
        ids = found[:, 0].astype(np.int64)
        fts = found[:, 1]
        if len(ids) != nhit or (len(ids) and ids.max() >= len(self._dl)):
            self._failed.add(word)
            return False
        tf = bm25.solve(np, fts, self._dl[ids], nrows, nhit, ntokens)
        if tf is None:
            self._failed.add(word)
            return False  # FTS5 did not score as expected: never guess
        self._keep(np, word, ids, tf)
        return True

    def _counted(self, np: Any, conn: sqlite3.Connection, word: str) -> bool | None:
        """The column of the indexed token ``word`` from its instances in FTS5's index (the
        ``fts5vocab`` table of :data:`~kiwifs.index.schema.INSTANCES`): each document's count
        is its number of rows, which is what FTS5's BM25 counts. Reading them costs a third of
        ranking the word (at 1M documents, 90–150 ms instead of 350–500 for a word in 13–16 %
        of them). False: a rare word; ``None``: not one token, or no such table on this
        connection (FTS5's BM25 of the word then makes the column)."""
        found = instance_counts(np, conn, word)
        if found is None:
            return None
        ids, counts = found
        assert self._dl is not None
        if len(ids) < MIN_DF:
            return False
        if ids[0] < 0 or ids[-1] >= len(self._dl):
            return None
        self._keep(np, word, ids, counts)
        return True

    def _keep(self, np: Any, word: str, ids: Any, counts: Any) -> None:
        """Keep ``word``'s column: ``counts`` at the documents ``ids``, 0 elsewhere, in the
        narrowest type that holds them (the least recently used column goes past
        :data:`MAX_COLUMNS`)."""
        assert self._dl is not None
        self._tf[word] = _dense(np, ids, counts, len(self._dl))
        self._facts.pop(word, None)
        while len(self._tf) > MAX_COLUMNS:
            self._facts.pop(self._tf.popitem(last=False)[0], None)

    # -- answering ----------------------------------------------------------------------------

    def _scores(
        self, np: Any, words: list[str], nrows: int, ntokens: int
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """Every document holding every word: its score (FTS5's, sign flipped) and its id."""
        columns = [self._tf[w] for w in words]
        matching = columns[0] > 0
        for column in columns[1:]:
            matching &= column > 0
        found: list[Term] = [(w, None, self._tf[w], *self._facts_of(np, w)[:2]) for w in words]
        ids = np.flatnonzero(matching)
        return self._totals(np, found, nrows, ntokens)[ids], ids


def instance_counts(np: Any, conn: sqlite3.Connection, word: str) -> tuple[Any, Any] | None:
    """The documents holding the indexed token ``word`` (by row id, ascending) and its count
    in each, from its instances in FTS5's index (the ``fts5vocab`` table of
    :data:`~kiwifs.index.schema.INSTANCES`); ``None``: not one token, or no such table on this
    connection."""
    if not _TOKEN.fullmatch(word):
        return None
    try:  # the table every read connection has (a connection of its own may not)
        rows = conn.execute(f"SELECT doc FROM temp.{INSTANCE_TABLE} WHERE term = ?", (word,))
        docs = np.fromiter((row[0] for row in rows), dtype=np.int64)
    except sqlite3.OperationalError:
        return None
    ids, counts = np.unique(docs, return_counts=True)
    return ids, counts


def made_column(np: Any, conn: sqlite3.Connection, word: str, size: int) -> Any | None:
    """``word``'s counts in the first ``size`` documents of ``conn``'s snapshot, made from its
    instances as a column is, in the narrowest type holding them; ``None``: a rare word (no
    column), not one token, or no instance table."""
    found = instance_counts(np, conn, word)
    if found is None or len(found[0]) < MIN_DF:
        return None
    ids, counts = found
    inside = ids < size
    return _dense(np, ids[inside], counts[inside], size)


def _dense(np: Any, ids: Any, counts: Any, size: int) -> Any:
    """A column of ``size`` documents: ``counts`` at ``ids``, 0 elsewhere, in the narrowest
    type that holds them."""
    dtype = _wide(np, int(counts.max()) if len(ids) else 0)
    column = np.zeros(size, dtype=dtype)
    column[ids] = counts.astype(dtype)
    return column


def _wide(np: Any, top: int) -> Any:
    """The narrowest integer type for counts up to ``top``: a million-document column of a word
    some page holds 400 times takes 2 MB, not 4."""
    if top <= 255:
        return np.uint8
    return np.int16 if top <= 32767 else np.int32


def _sum_slice(
    np: Any,
    total: NDArray[np.float64],
    codes: NDArray[np.intp],
    shape: NDArray[np.float64],
    steps: list[Step],
    lo: int,
    hi: int,
    shares_of: NDArray[np.float64],
    at_of: NDArray[np.intp],
) -> None:
    """Add each term's share, in the terms' order, to the documents ``lo`` to ``hi``
    (``shares_of`` and ``at_of``: room for a term's shares and table indexes, by document;
    see :func:`_look_up`)."""

    def places(docs: Any, values: Any) -> tuple[Any, Any]:
        first, last = np.searchsorted(docs, (lo, hi))
        return docs[first:last] - lo, values[first:last]

    part = total[lo:hi]
    reads = (lambda what: what[lo:hi]), places
    _add_steps(np, part, codes[lo:hi], shape, steps, reads, shares_of[lo:hi], at_of[lo:hi])


def _add_steps(
    np: Any,
    part: NDArray[np.float64],
    code: NDArray[np.intp],
    shape: NDArray[np.float64],
    steps: list[Step],
    reads: tuple[Callable[[Any], Any], Callable[[Any, Any], tuple[Any, Any]]],
    shares: NDArray[np.float64],
    at: NDArray[np.intp],
) -> None:
    """Write each term's share, in the terms' order, into ``part``: some documents' sums, of
    length codes ``code``. ``reads``: a column's counts at those documents, and where a list of
    documents (in row id order) falls among them, with its values there. The one way every
    sum is made, over a slice of every document or over chosen ones, so each is FTS5's to the
    bit either way."""
    counts_of, places_of = reads
    width = len(shape)
    fresh = True  # ``part`` holds nothing yet: the first column's shares are written, not added
    for how, what, value in steps:  # (FTS5 starts from 0.0, and 0.0 + x is x to the bit)
        if how == "add":
            if fresh:
                part.fill(0.0)
            mine, values = places_of(what, value)
            part[mine] += values
        elif how == "direct":
            tf = counts_of(what).astype(np.float64)
            if fresh:
                part[:] = 0.0 + bm25.share(value, tf, shape[code])
            else:
                part += bm25.share(value, tf, shape[code])
        elif how == "table":
            _look_up(np, value, counts_of(what), code, width, part, shares, at, fresh)
        else:  # "capped": as "table" with the counts past CAP cut to it, then those documents
            table, over, exact = value  # given the sum so far plus their exact share
            mine, values = places_of(over, exact)
            before = np.zeros(len(mine)) if fresh else part[mine]
            capped = np.minimum(counts_of(what), CAP)
            _look_up(np, table, capped, code, width, part, shares, at, fresh)
            part[mine] = before + values
        fresh = False
    if fresh:
        part.fill(0.0)


def _look_up(
    np: Any,
    table: Any,
    counts: Any,
    code: Any,
    width: int,
    part: Any,
    shares: Any,
    at: Any,
    fresh: bool,
) -> None:
    """Each document's share from ``table`` (by count × ``width`` + length code), written into
    ``part`` when it holds nothing yet (``fresh``), else added to it (through ``shares``).
    ``at`` (room for the indexes) and ``code`` are of the platform's index type, which ``take``
    would otherwise convert them to first (and adding codes of another type costs a
    conversion too). The indexes are always in range, so ``clip`` changes none of them: of
    ``take``'s modes it is the fastest (1.2 ns a document here; ``wrap`` 1.65, ``raise``
    more)."""
    np.multiply(counts, width, out=at, dtype=np.intp)
    np.add(at, code, out=at)
    np.take(table, at, mode="clip", out=part if fresh else shares)
    if not fresh:
        part += shares


def _largest(np: Any, how: str, value: Any) -> float:
    """A term's largest share of any document's score (a rare term's: of its documents)."""
    if how == "add":
        return float(value.max()) if len(value) else 0.0
    if how == "table":
        return float(value.max())
    table, _, exact = value  # "capped"
    return max(float(table.max()), float(exact.max()) if len(exact) else 0.0)


def _largest_under(np: Any, how: str, value: Any, least: Any, width: int) -> float:
    """A term's largest share in a document holding it fewer than ``least`` (by length code)
    times: the table's cells under those counts (counts past :data:`CAP` are never under)."""
    table = value if how == "table" else value[0]
    rows = len(table) // width
    under = np.arange(rows)[:, None] < least[None, :]  # row 0 (a count of 0) always
    return float(table.reshape(rows, width)[under].max())


def _first_level(
    np: Any,
    factor: Any,
    most: Any,
    codes: Any,
    steps: list[Step],
    essential: list[bool],
    sums: tuple[float, float],
) -> float:
    """The first level, read from one sample of :data:`LEVEL_SAMPLES` documents: the higher of
    one about :data:`PRUNE_SHARE` of the documents reach with their largest count (the least
    positive one when fewer hold a term), and one whose bound a document scoring as the
    sample's :data:`LEVEL_RANK`-th best would pass (the essential terms' shares). About
    ``LEVEL_RANK`` × the sampling step documents score that much or more, so the page's last
    one does too: the candidates of that level vouch for the page nearly always, and are far
    fewer when one term outweighs the others. ``sums``: the essential terms' idf and the light
    ones' largest shares, summed."""
    step = max(1, len(most) // LEVEL_SAMPLES)
    width = factor.shape[1]
    code = codes[::step]
    reached = factor.reshape(-1).take(
        np.minimum(most[::step], CAP + 1).astype(np.intp) * width + code
    )
    rank = max(1, int(len(reached) * PRUNE_SHARE))
    level = float(np.partition(reached, len(reached) - rank)[len(reached) - rank])
    if level <= 0.0:
        level = float(factor[1].min())
    total = np.zeros(len(code))
    for (how, what, value), keep in zip(steps, essential, strict=True):
        if keep:
            table = value if how == "table" else value[0]
            counts = np.minimum(what[::step], CAP)  # (a higher count only scores more)
            total += table.take(counts.astype(np.intp) * width + code)
    if len(total) < LEVEL_RANK:
        return level
    weight, light = sums
    best = float(np.partition(total, len(total) - LEVEL_RANK)[len(total) - LEVEL_RANK])
    return max(level, (best - light) / weight)


def _least_counts(np: Any, factor: Any, level: float) -> Any:
    """By length code, the least count whose factor reaches ``level`` (:data:`CAP` + 1 when
    none up to it does: only counts past the tables' then make a candidate)."""
    reaches = factor >= level
    reaches[-1, :] = True
    return reaches.argmax(axis=0).astype(np.uint8)


def _scored_at(np: Any, ids: Any, code: Any, shape: Any, steps: list[Step]) -> Any:
    """The documents ``ids``' (in row id order) scores, made as :func:`_sum_slice` makes every
    document's (:func:`_add_steps`), so each is its sum over every document to the bit."""

    def places(docs: Any, values: Any) -> tuple[Any, Any]:
        at = np.searchsorted(ids, docs)
        inside = at < len(ids)
        inside[inside] = ids[at[inside]] == docs[inside]
        return at[inside], values[inside]

    size = len(ids)
    total = np.empty(size, dtype=np.float64)
    reads = (lambda what: what.take(ids)), places
    _add_steps(np, total, code, shape, steps, reads, np.empty(size), np.empty(size, np.intp))
    return total


def _scope_ids(
    np: Any, conn: sqlite3.Connection, scope: str, condition: str, extra: tuple[Any, ...]
) -> NDArray[np.int64]:
    sql = f"SELECT f.id FROM files f WHERE f.scope = ?{condition}"
    ids: NDArray[np.int64] = np.array(
        [int(r[0]) for r in conn.execute(sql, (scope, *extra))], dtype=np.int64
    )
    return ids


def _passes_every_live(condition: str, extra: tuple[Any, ...]) -> bool:
    """Whether a search's filters pass every page that is not superseded: none, or the
    superseded rule alone (which the columns apply by their mask)."""
    return condition in _NO_FILTER and not extra


def _page(
    np: Any,
    conn: sqlite3.Connection,
    scores: NDArray[np.float64],
    ids: NDArray[np.int64] | None,
    condition: str,
    extra: tuple[Any, ...],
    lim: int,
    off: int,
    bound: int | None = None,
) -> list[Row]:
    """The best ``off + lim`` after the filters: every document scoring at least the cut's
    score is filtered and sorted with its key, so ties at the cut are broken as the plain
    query breaks them; the cut grows ×8 while too few pass. ``ids`` are the documents
    ``scores`` are for; ``None``: ``scores`` is by row id, ``0.0`` where a document does not
    match (no gathering of the matches into arrays of their own). ``bound``: at least as many
    documents as match (the terms' document counts summed), which spares counting them when
    it already tells whether they are few.

    A ``condition`` that can only leave out superseded pages, which a caller ranking live
    pages set to 0.0 already, passes every candidate: the first cut is then the page itself
    (and its ties), not twice it (each candidate filtered is a row read, ~10 µs at 1M files)."""
    wanted = off + lim
    passes_all = _passes_every_live(condition, extra)
    cut = wanted if passes_all else max(FIRST_CUT, 2 * wanted)
    if bound is not None and bound * SPARSE >= len(scores):
        few = False  # (a count would only tell whether the terms overlap a lot)
    else:
        few = ids is None and np.count_nonzero(scores) * SPARSE < len(scores)
    if ids is None and few:
        # few matches: gathered first (numpy's partition of an array of mostly equal values,
        # the zeros of the documents that do not match, took 26 ms at 1M documents)
        ids = np.flatnonzero(scores)
        scores = scores[ids]
    while True:
        chosen, every = _best(np, scores, cut, ids is None)
        named = chosen if ids is None else ids[chosen]
        found = dict(zip(named.tolist(), scores[chosen].tolist(), strict=True))
        hits = _filtered(conn, found, condition, extra)
        if len(hits) >= wanted or every:
            hits.sort(key=lambda h: (-h[0], h[1]))
            return [(path, score, i, mtime) for score, _, path, i, mtime in hits[off:wanted]]
        cut *= 8


def _best(np: Any, scores: Any, cut: int, by_id: bool) -> tuple[Any, bool]:
    """The indexes of every score at least the ``cut``-th best (ties included: they are broken
    by key later), or of a few more than that; and whether that is every match (with ``by_id``,
    the positive scores; else all of them). Any set holding every score at least some ``t``
    serves: a score left out is below every score taken.

    On a large array the cut's score is first bounded from a sample (a partition of 16k values
    instead of a million, and no count of the matches): every score at least the sample's
    bound is taken, then narrowed to the exact cut when that is more (a partition of a few
    hundred values; each one kept is a row the filter reads)."""
    size = len(scores)
    if size >= SAMPLED:
        step = size // SAMPLES
        sample = scores[::step]
        rank = cut // step + 2  # a little above the cut's place, to take enough at once
        if rank < len(sample):
            bound = np.partition(sample, len(sample) - rank)[len(sample) - rank]
            chosen = np.flatnonzero(scores >= bound) if bound > 0.0 or not by_id else None
            if chosen is not None and len(chosen) >= cut:
                if len(chosen) > cut:
                    values = scores[chosen]
                    floor = np.partition(values, len(values) - cut)[len(values) - cut]
                    chosen = chosen[values >= floor]
                return chosen, False
    if by_id:
        if cut >= np.count_nonzero(scores):
            return np.flatnonzero(scores > 0.0), True
    elif cut >= size:
        return np.arange(size), True
    floor = np.partition(scores, size - cut)[size - cut]
    return np.flatnonzero(scores >= floor), False


def _filtered(
    conn: sqlite3.Connection, scores: dict[int, float], condition: str, extra: tuple[Any, ...]
) -> list[tuple[float, bytes, Any, int, int]]:
    found: list[tuple[float, bytes, Any, int, int]] = []
    ids = list(scores)
    for start in range(0, len(ids), 5000):
        chunk = ",".join(str(i) for i in ids[start : start + 5000])
        # NOT INDEXED: id lookups, not a scan of an index the filter columns happen to lead
        sql = "SELECT f.id, f.path, f.key, f.mtime_ns FROM files f NOT INDEXED WHERE f.id IN "
        rows = conn.execute(f"{sql}({chunk}){condition}", extra)
        found += [(scores[i], key, path, i, mtime) for i, path, key, mtime in rows]
    return found
