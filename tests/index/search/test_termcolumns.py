"""Term columns: a search of common words answers exactly what FTS5's ranking of every match
answers — same hits, same order, same scores to the last bit — before and after writes.

A word gets a column here from 20 documents (``MIN_DF``), so a few hundred files exercise
every branch: one to three words, repeated words, a rare word (no column: FTS5 answers), exact
ties (copied texts) broken by path, filters that keep few, and pages deep into the ranking.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy
import pytest

from kiwifs.index import build, changelog
from kiwifs.index.core import Index
from kiwifs.index.filters import RecallFilter
from kiwifs.index.search import (
    bm25,
    columnkeeping,
    doccounts,
    feedback,
    keyword,
    storedcolumns,
    termcolumns,
)
from kiwifs.index.search.query import parse
from kiwifs.index.texts import Codec
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from partskit import index_keeper

QUERIES = ["fox", "river", "fox river", "stone fox", "river stone fox", "fox fox", "meadow fox"]
QUERIES += ["releases fox"]  # indexed as "releas", which FTS5 would look up as "relea"
# FTS5 syntax of AND-ed phrases and prefixes: a column per phrase as written
QUERIES += ['"fox river"', "riv*", '"river fox" sto*', 'fox AND "river stone"', '"fox fox"']
QUERIES += ["rele* fox", '"stone river"*', "mead*"]
# natural language: words OR-ed (common ones from columns, rare ones from FTS5), stop words
# left out, quoted and joined words also OR-ed as phrases
QUERIES += ["When did the fox cross the river?", 'Was the meadow "river stone" there?']
QUERIES += ["meadow-stone filler"]
PAGES = [(10, 0), (20, 30), (3, 0), (200, 0), (5, 150)]
FILTERS: list[dict[str, Any]] = [
    {},
    {"path_prefix": "a/"},
    {"path_prefix": "b/p000"},
    {"scope": "small"},
    {"scope": "wide"},
    {"include_superseded": True},
    {"path_prefix": "b/", "scope": "wide"},
]


def corpus(seed: int, count: int = 400) -> dict[str, str]:
    """``fox`` in every file, ``river`` in most, ``stone`` and ``release`` in fewer, ``meadow`` in
    a few; the lengths and counts vary, and one text in eight is a copy of another (ties)."""
    rng = random.Random(seed)
    pages: dict[str, str] = {}
    texts: list[str] = []
    for i in range(count):
        if texts and rng.random() < 0.125:
            body = rng.choice(texts)
        else:
            words = ["fox"] * rng.randint(1, 4) + ["filler"] * rng.randint(0, 30)
            words += ["river"] * (rng.randint(1, 3) if rng.random() < 0.7 else 0)
            words += ["stone"] * (rng.randint(1, 2) if rng.random() < 0.4 else 0)
            words += ["meadow"] if rng.random() < 0.04 else []
            words += ["release"] if rng.random() < 0.5 else []
            rng.shuffle(words)
            body = " ".join(words)
            texts.append(body)
        head = [f"n: {i}"]
        if i % 37 == 0:
            head.append("scope: small")
        elif i % 3 == 0:
            head.append("scope: wide")
        if i % 11 == 0:
            head.append("memory_status: superseded")
        folder = "a" if i % 4 else "b"
        pages[f"{folder}/p{i:04}.md"] = "---\n" + "\n".join(head) + f"\n---\n{body}\n"
    return pages


@contextmanager
def watched(root: Path) -> Iterator[tuple[Knowledge, Index]]:
    """A knowledge root as a server holds it (the term columns serve long-lived processes), and
    the index it answers from. No answers are kept: a search asked again with the columns off
    (:func:`both_ways`) must be ranked again, not given the kept answer of the columns."""
    with watching_keeper(root) as (kb, keeper):
        yield kb, keeper._open()


@contextmanager
def watching_keeper(root: Path) -> Iterator[tuple[Knowledge, IndexKeeper]]:
    """:func:`watched`, giving the index keeper (its watcher) instead of the index."""
    keeper = index_keeper(root, Tuning.from_env().but(search_cache=0))
    with Knowledge(root, index=keeper) as kb:
        Serving(kb).start_watching()
        while not kb.ready():
            time.sleep(0.01)
        try:
            yield kb, keeper
        finally:
            Serving(kb).stop_watching()


@pytest.fixture(autouse=True)
def small_columns(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(termcolumns, "MIN_DF", 20)
    yield


def log_end(index: Index) -> int:
    with index.reader() as conn:
        return int(conn.execute("SELECT max(seq) FROM fts_log").fetchone()[0] or 0)


def both_ways(kb: Knowledge, index: Index, **kwargs: Any) -> list[Any]:
    """One search with the columns and one ranked by FTS5 (``Tuning.term_columns`` and
    ``search_top_k`` off: the plain path), over the same index state: the watcher re-reads files
    written less than 2 s ago, so a pair it raced is asked again."""
    for _ in range(250):
        start = log_end(index)
        pair = []
        for fast in (True, False):
            index.tuning = Tuning(term_columns=fast, search_top_k=fast)
            pair.append(kb.search(**kwargs).to_json())
        index.tuning = Tuning()
        if log_end(index) == start:
            return pair
        time.sleep(0.02)
    raise AssertionError("the index never stood still")


def assert_same(kb: Knowledge, index: Index) -> None:
    found = 0
    for query in QUERIES:
        for limit, offset in PAGES:
            for filters in FILTERS:
                case = {"query": query, "limit": limit, "offset": offset, **filters}
                fast, plain = both_ways(kb, index, **case)
                assert fast == plain, case
                found += bool(plain["results"])
    assert found > len(QUERIES) * len(PAGES) * len(FILTERS) // 2


def from_columns(
    kb: Knowledge, index: Index, query: str, limit: int, offset: int = 0
) -> list[Any] | None:
    """What the term columns alone answer (``None``: they leave it to FTS5)."""
    kb.search(query, limit=1)  # brings the index up to date with the files
    words = bm25.query_words(query)
    assert words is not None
    with index.reader() as conn:
        conn.execute("BEGIN")
        try:
            return index.columns.ranked(conn, words, "", (), None, limit, offset)
        finally:
            conn.rollback()


# how the columns sum the scores: tables of (count, length) in one slice; the same summed by
# three threads in slices of 64 documents; the formula per document (no table small enough);
# and how the page is cut: a partition of every score, or bounded from a sample of 16 first;
# and tables that stop at a count of 2
SUMS = {
    "tables": (1 << 20, 1, 250_000, 65_536),
    "slices": (1 << 20, 3, 64, 65_536),
    "formula": (0, 1, 250_000, 65_536),
    "sampled": (1 << 20, 3, 64, 64),
    "capped": (1 << 20, 3, 64, 65_536),  # tables stop at 2: higher counts scored alone
    "pruned": (1 << 20, 1, 250_000, 65_536),  # only the documents that can reach the page
    "pruned-capped": (1 << 20, 3, 64, 64),  # the same in slices, tables stopping at 2, sampled
}


@pytest.mark.parametrize("summed", list(SUMS))
def test_columns_answer_as_fts5_ranks(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, summed: str
) -> None:
    table, threads, piece, sampled = SUMS[summed]
    monkeypatch.setattr(termcolumns, "MAX_TABLE", table)
    monkeypatch.setattr(termcolumns, "SLICE", piece)
    monkeypatch.setattr(termcolumns, "SAMPLED", sampled)
    monkeypatch.setattr(termcolumns, "SAMPLES", min(sampled, 16))
    if summed.endswith("capped"):
        monkeypatch.setattr(termcolumns, "CAP", 2)
    if summed.startswith("pruned"):  # however many candidates; a first level often too high
        monkeypatch.setattr(termcolumns, "PRUNE_FROM", 0)
        monkeypatch.setattr(termcolumns, "PRUNE_MOST", 1)
        monkeypatch.setattr(termcolumns, "PRUNE_SHARE", 0.02 if summed == "pruned" else 0.3)
        monkeypatch.setattr(termcolumns, "LEVEL_SAMPLES", 1 << 20 if summed == "pruned" else 16)
    with watched(make_root(corpus(1))) as (kb, index):
        index.columns._threads = threads
        assert_same(kb, index)
        assert from_columns(kb, index, "fox river", 10) is not None
        assert from_columns(kb, index, "meadow fox", 10) is None  # meadow is rare: FTS5 ranks it
        made = index.columns._tf
        words = sorted(k for k in made if not k.startswith(termcolumns.PHRASE))
        assert words == ["filler", "fox", "releas", "river", "stone"]  # meadow is rare
        phrases = {k[1:] for k in made if k.startswith(termcolumns.PHRASE)}
        assert {'"fox river"', "riv*", "mead*", "rele*"} <= phrases  # mead* is rare: a column
        if summed.startswith("pruned"):  # the first ranking itself (feedback may hide a miss)
            assert_pruned_as_summed(index)


def assert_pruned_as_summed(index: Index) -> None:
    """Every natural-language query's first ranking, pruned and every document summed: the
    same rows, page by page (superseded pages left out, as a search does by default)."""
    condition = RecallFilter().sql("f")[0]
    pruned = 0
    for query in QUERIES:
        terms = [(t.key, t.match) for t in parse(query).terms]
        for limit, offset in PAGES:
            with index.reader() as conn:
                conn.execute("BEGIN")
                try:
                    ranked = [
                        index.columns.ranked_any(
                            conn, terms, condition, (), None, limit, offset, True, prune
                        )
                        for prune in (True, False)
                    ]
                    nrows, ntokens = bm25.totals(conn)
                    found = [index.columns._term(numpy, conn, *t, nrows, ntokens) for t in terms]
                finally:
                    conn.rollback()
            assert ranked[0] == ranked[1], (query, limit, offset)
            if None not in found:
                known = [f for f in found if f is not None]
                wanted = limit + offset
                pruned += (
                    index.columns._pruned(numpy, known, nrows, ntokens, wanted, True) is not None
                )
    assert pruned > len(QUERIES) * len(PAGES) // 3  # the pruned path answered many of them


def test_syntax_that_is_not_and_ed_phrases_is_left_to_fts5() -> None:
    assert keyword.syntax_phrases('"a b" memo* AND c') == [
        (termcolumns.PHRASE + '"a b"', '"a b"'),
        (termcolumns.PHRASE + "memo*", "memo*"),
        (termcolumns.PHRASE + "c", "c"),
    ]
    for query in ["a OR b", "NOT a", "NEAR(a b)", "a AND", "AND a", "a AND AND b", "x:y", "^a"]:
        assert keyword.syntax_phrases(query) is None, query
    for query in ['"a"b', "a+b", "foo-bar", '"abc', "a * b", '""', '"_"', "(a b)", "a - b"]:
        assert keyword.syntax_phrases(query) is None, query


def test_phrase_columns_score_as_fts5(make_root: Callable[..., Path]) -> None:
    """A prefix (many words summed) and a phrase, each a column: FTS5's scores, bit for bit."""
    with watched(make_root(corpus(8))) as (kb, index):
        kb.search("fox", limit=1)
        query = '"river fox" f* sto*'
        phrases = keyword.syntax_phrases(query)
        with index.reader() as conn:
            conn.execute("BEGIN")
            try:
                mine = index.columns.ranked(conn, phrases or [], "", (), None, 400, 0)
            finally:
                conn.rollback()
            plain = conn.execute("SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ?", (query,))
            exact = dict(plain.fetchall())
        assert mine and len(mine) == len(exact)
        assert all(score == exact[i] for _, score, i, _ in mine)


def test_pruning_answers_only_what_its_bound_vouches_for(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages holding ``alpha`` four times are the first candidates (the highest counts), but
    pages holding ``alpha`` and ``beta`` twice each score more: the candidates' bound says so,
    and the page comes from a lower level or from every sum, never from the first candidates.
    ``alpha`` alone is answered from its candidates, bounded."""
    monkeypatch.setattr(termcolumns, "PRUNE_FROM", 0)
    monkeypatch.setattr(termcolumns, "PRUNE_MOST", 1)
    pages = {f"four/p{i:03}.md": "alpha alpha alpha alpha filler filler\n" for i in range(30)}
    pages |= {f"both/p{i:03}.md": "alpha beta alpha beta filler filler\n" for i in range(30)}
    pages |= {f"rest/p{i:03}.md": f"filler gamma filler {i}\n" for i in range(140)}
    with watched(make_root(pages)) as (kb, index):
        for query in ["alpha beta", "beta alpha", "alpha"]:
            fast, plain = both_ways(kb, index, query=query, limit=10)
            assert fast == plain
            if query == "alpha beta":
                assert all(h["path"].startswith("both/") for h in plain["results"])
        np = termcolumns._numpy()
        alpha, beta = ("alpha", '"alpha"'), ("beta", '"beta"')
        with index.reader() as conn:
            conn.execute("BEGIN")
            try:
                for terms in ([alpha], [alpha, beta]):
                    pruned, plain = (
                        index.columns.ranked_any(conn, terms, "", (), None, 10, 0, prune=prune)
                        for prune in (True, False)
                    )
                    assert pruned == plain
                nrows, ntokens = bm25.totals(conn)
                found = [index.columns._term(np, conn, *term, nrows, ntokens) for term in terms]
                first = index.columns._term(np, conn, *alpha, nrows, ntokens)
            finally:
                conn.rollback()
        columns = index.columns
        # alpha alone: answered by the pages holding it four times, which its bound vouches for
        picked = columns._pruned(np, [first], nrows, ntokens, 10, False)
        assert picked is not None and len(picked[1]) == 30
        # both: the first candidates (the same pages) do not vouch; the next level takes all 60
        picked = columns._pruned(np, found, nrows, ntokens, 10, False)
        assert picked is not None and len(picked[1]) == 60


def test_a_light_terms_pages_are_held_under_its_largest_share(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``beta`` is light (its largest share is under a sixteenth of ``alpha``'s), so its pages
    are not candidates; but a short page holding it twice outscores the very long pages
    holding ``alpha`` once, which are the best candidates after three: the bound counts ``beta``'s
    largest share, and the page is not cut from the candidates."""
    monkeypatch.setattr(termcolumns, "PRUNE_FROM", 0)
    monkeypatch.setattr(termcolumns, "PRUNE_MOST", 1)
    pages = {f"short/p{i}.md": "alpha alpha alpha\n" for i in range(3)}
    pages |= {f"long/p{i:02}.md": "alpha " + "filler " * 5000 + "\n" for i in range(20)}
    pages |= {f"beta/p{i:03}.md": "beta beta x\n" for i in range(458)}
    pages |= {f"rest/p{i:03}.md": "gamma x y\n" for i in range(519)}
    terms = [("alpha", '"alpha"'), ("beta", '"beta"')]
    with watched(make_root(pages)) as (kb, index):
        kb.search("alpha", limit=1)
        with index.reader() as conn:
            conn.execute("BEGIN")
            try:
                ranked = [
                    index.columns.ranked_any(conn, terms, "", (), None, 6, 0, prune=prune)
                    for prune in (True, False)
                ]
            finally:
                conn.rollback()
    assert ranked[0] == ranked[1]
    assert ranked[1] is not None
    assert [path.split("/")[0] for path, *_ in ranked[1]] == ["short"] * 3 + ["beta"] * 3


def test_the_feedback_is_given_the_column_words_counts_as_it_counts_them(
    make_root: Callable[..., Path],
) -> None:
    """Warming the search (a server does it before it is ready) gives the feedback each column
    word's number of documents in that state of the index, as its own count gives it."""
    with watched(make_root(corpus(4))) as (kb, index):
        kb.search("fox river stone", limit=5)  # columns made
        index.warm_search()
        with index.reader() as conn:
            nrows, _ = bm25.totals(conn)
            counts = doccounts.DocumentCounts(conn, feedback.count_cap(nrows))
            known = dict(counts._book.counts)  # given, not counted: before any is asked
            words = [w for w in index.columns._tf if not w.startswith(termcolumns.PHRASE)]
            assert {"fox", "river", "stone"} <= set(words) <= set(known)
            assert all(counts.of(w) == doccounts.document_count(conn, w, counts.cap) for w in words)


def test_scores_are_fts5s_to_the_last_bit(make_root: Callable[..., Path]) -> None:
    with watched(make_root(corpus(2))) as (kb, index):
        mine = from_columns(kb, index, "river stone fox river", 400)
        assert mine
        with index.reader() as conn:
            plain = conn.execute(
                "SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ?",
                ('"river" "stone" "fox" "river"',),
            )
            exact = dict(plain.fetchall())
        assert len(mine) == len(exact)
        assert all(score == exact[i] for _, score, i, _ in mine)


@pytest.mark.parametrize("pruned", [False, True])
def test_writes_are_caught_up(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, pruned: bool
) -> None:
    if pruned:  # the pruned first rankings follow the writes too
        monkeypatch.setattr(termcolumns, "PRUNE_FROM", 0)
        monkeypatch.setattr(termcolumns, "PRUNE_MOST", 1)
    root = make_root(corpus(3))
    with watched(root) as (kb, index):
        assert from_columns(kb, index, "fox river stone", 5) is not None
        columns = index.columns
        rng = random.Random(9)
        for i in range(40):  # new files (some better than any before)
            kb.write(f"c/new{i}.md", "fox " * rng.randint(1, 9) + "river stone" * (i % 2))
        assert_same(kb, index)
        made = {word: id(column) for word, column in columns._tf.items()}
        for path in sorted(root.glob("a/p00[0-4]*.md"))[:20]:  # rewrites and deletes
            kb.write(str(path.relative_to(root)), "fox fox fox river\n")
        for path in sorted(root.glob("b/p01*.md"))[:20]:
            kb.delete(str(path.relative_to(root)))
        assert_same(kb, index)
        assert {w: id(c) for w, c in columns._tf.items()} == made  # caught up, not remade
        # pages superseded and back: the columns' mask of them follows (the best page first)
        best = "fox fox fox fox fox river river stone stone\n"
        kb.write("c/best.md", "---\nmemory_status: superseded\n---\n" + best)
        for path in sorted(root.glob("a/p0[0-9][0-9]1.md"))[:30:3]:
            kb.write(str(path.relative_to(root)), "---\nmemory_status: superseded\n---\nfox\n")
        for path in sorted(root.glob("*/p0[0-9][0-9]0.md"))[:8]:  # i % 11 == 0 among them
            kb.write(str(path.relative_to(root)), "fox river stone\n")
        assert_same(kb, index)
        kb.write("c/best.md", best)
        assert_same(kb, index)
        if pruned:
            assert_pruned_as_summed(index)


def test_a_new_document_grows_the_columns_by_a_little(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document past the columns' end makes room for 1/GROW_SHARE more (at least GROW_LEAST),
    every column alike: a column is a byte per document, and a quarter more was 48 MB of zeros
    in a served 1M root. Answers stay exact."""
    monkeypatch.setattr(termcolumns, "GROW_LEAST", 4)
    root = make_root(corpus(3))
    with watched(root) as (kb, index):
        assert from_columns(kb, index, "fox river stone", 5) is not None
        columns = index.columns
        assert columns._dl is not None
        before = len(columns._dl)
        kb.write("c/new.md", "fox river stone stone\n")
        assert_same(kb, index)
        after = len(columns._dl)
        assert before < after <= before + max(before // termcolumns.GROW_SHARE, 4) + 1
        assert {len(column) for column in columns._tf.values()} == {after}


def test_text_indexed_without_the_log_starts_afresh(
    make_root: Callable[..., Path],
) -> None:
    """Text indexed by a path that does not log (here: SQL, as the bulk load does) makes the
    totals disagree; the columns are then remade from FTS5, and answers stay exact. So does a
    log cut past what the columns have seen."""
    with watched(make_root(corpus(4))) as (kb, index):
        assert from_columns(kb, index, "fox", 10) is not None
        with index.transaction() as conn:
            conn.execute("INSERT INTO fts (rowid, body) VALUES (99999, 'fox fox fox fox')")
            conn.execute(
                "INSERT INTO bodies (id, text) VALUES (99999, ?)", (Codec().pack("fox " * 4),)
            )
        assert_same(kb, index)  # (the text has no file row: no hit either way)
        columns = index.columns
        assert columns._present is not None and columns._present[99999]
        with index.transaction() as conn:
            forget = "INSERT INTO fts (fts, rowid, body) VALUES ('delete', 99999, ?)"
            conn.execute(forget, ("fox " * 4,))
            conn.execute("DELETE FROM bodies WHERE id = 99999")
            conn.execute("DELETE FROM fts_log")
            conn.execute("INSERT INTO fts_log (seq, doc) VALUES (1000000, 99999)")
        assert_same(kb, index)
        present = columns._present
        assert present is not None and (len(present) <= 99999 or not present[99999])


def test_a_rolled_back_write_leaves_the_columns_right(
    make_root: Callable[..., Path],
) -> None:
    with watched(make_root(corpus(5))) as (kb, index):
        before = from_columns(kb, index, "fox river", 10)
        with pytest.raises(RuntimeError), index.transaction() as conn:
            conn.execute("INSERT INTO fts (rowid, body) VALUES (99998, 'fox fox river river')")
            conn.execute("INSERT INTO fts_log (doc) VALUES (99998)")
            raise RuntimeError("roll back")
        assert from_columns(kb, index, "fox river", 10) == before


@pytest.mark.parametrize("keep", [False, True])
def test_a_rebuild_starts_the_columns_afresh(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """A rebuild gives every file a new row id: columns of the old ids must not survive it
    (with ``keep``, the server reads the columns the rebuild kept)."""
    if keep:
        monkeypatch.setattr(build, "COLUMN_FILES", 50)
    root = make_root(corpus(7))
    with watched(root) as (kb, index):
        assert from_columns(kb, index, "fox river", 10) is not None
        for path in sorted(root.glob("a/p00*.md"))[:40]:
            path.unlink()  # behind kiwifs's back: the rebuild numbers the rest anew
        kb.reindex()
        assert_same(kb, index)


def test_a_one_shot_process_ranks_with_fts5(make_root: Callable[..., Path]) -> None:
    """Making a column costs about one plain query: only a long-lived process makes them."""
    root = make_root(corpus(6))
    keeper = index_keeper(root)
    with Knowledge(root, index=keeper) as kb:
        assert kb.search("fox river", limit=5).results
        assert not keeper._open().columns._tf


def test_query_words_are_fts5s_words() -> None:
    found = bm25.query_words("Running FOXES café release")
    assert found == [("run", "Running"), ("fox", "FOXES"), ("cafe", "café"), ("releas", "release")]
    assert bm25.query_words("run-249") is None  # one token, two words: a phrase
    assert bm25.query_words("C++ x") == [("c", "C++"), ("x", "x")]
    assert bm25.query_words("++") is None


def test_a_word_fts5_cannot_parse_is_read_as_words(make_root: Callable[..., Path]) -> None:
    """A NUL ends FTS5's reading of a quoted word (it was a 400): the query is read as the
    words around it, with the columns in use as without them."""
    with watched(make_root(corpus(8))) as (kb, index):
        kb.search("fox", limit=1)  # the columns are in use from here
        assert kb.search("river\x00", limit=5).results == kb.search("river", limit=5).results
        assert kb.search('"river\x00"', limit=5).results == kb.search("river", limit=5).results


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rebuilds of 50 files or more keep the columns of their common words."""
    monkeypatch.setattr(build, "COLUMN_FILES", 50)


def kept_words(index: Index) -> list[str]:
    with index.reader() as conn:
        return sorted(w for (w,) in conn.execute("SELECT word FROM column_words"))


def test_a_server_starts_with_the_columns_a_rebuild_kept(
    make_root: Callable[..., Path], kept: None
) -> None:
    """The first fill of an empty index is a rebuild: it keeps the columns of the words in a
    tenth of the files, which the server reads before it is ready, answers from without
    making them again, and catches up with writes as it does the columns it makes."""
    pages = corpus(8)
    pages["b/many.md"] = "fox " * 300 + "river\n"  # over 255: kept beside that column
    root = make_root(pages)
    with watched(root) as (kb, index):
        stored = kept_words(index)
        assert {"filler", "fox", "releas", "river", "stone"} <= set(stored)
        assert "meadow" not in stored  # in fewer than a tenth of the files
        with index.reader() as conn:
            over = dict(conn.execute("SELECT word, over IS NOT NULL FROM column_words"))
        assert over["fox"] and not over["river"]
        assert index.columns._tf["fox"].max() == 300
        assert index.columns._tf["fox"].dtype.itemsize == 2  # the narrowest type holding 300
        columns = index.columns
        assert sorted(columns._tf) == stored  # read before the first search
        assert sorted(columns._facts) == stored  # and what queries need of each counted
        restored = {w: id(c) for w, c in columns._tf.items()}
        assert_same(kb, index)
        assert {w: id(columns._tf[w]) for w in restored} == restored  # used, not remade
        for path in sorted(root.glob("a/p02*.md"))[:20]:
            kb.write(str(path.relative_to(root)), "fox fox river stone stone\n")
        for path in sorted(root.glob("b/p03*.md"))[:10]:
            kb.delete(str(path.relative_to(root)))
        assert_same(kb, index)
    with watched(root) as (kb, index):  # a new server: the kept columns and the log since
        assert sorted(index.columns._tf) == stored
        assert_same(kb, index)


def test_kept_columns_the_log_cannot_catch_up_are_not_used_until_kept_again(
    make_root: Callable[..., Path], kept: None, short_log: None
) -> None:
    """The log was cut past the kept columns (written with no server running, so none kept
    them again): a start makes columns on demand instead; keeping its own makes the kept
    words' columns it lacks, so the start after it finds them made."""
    root = make_root(corpus(9))
    with watched(root) as (kb, index):
        stored = kept_words(index)
    with Knowledge(root, index=index_keeper(root)) as kb:
        rewrite(kb, root, "a/p01*.md", 12, "fox river river\n")
    with watched(root) as (kb, index):
        assert not index.columns._tf  # the log was cut past them: made on demand instead
        assert_same(kb, index)
        index.keep_columns()  # (unless the watcher's periodic reconcile kept them first)
        with index.reader() as conn:
            assert not storedcolumns.due(conn, columnkeeping.KEEP_BEHIND)
    with watched(root) as (kb, index):
        assert sorted(index.columns._tf) == stored
        assert_same(kb, index)


@pytest.fixture
def short_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text log of 3 entries, trimmed at every write."""
    monkeypatch.setattr(changelog, "KEEP", 3)
    monkeypatch.setattr(changelog, "TRIM_EVERY", 1)


def rewrite(kb: Knowledge, root: Path, pattern: str, n: int, text: str) -> None:
    """Write ``text`` over ``n`` files matching ``pattern``, then wait for them to be indexed."""
    for path in sorted(root.glob(pattern))[:n]:
        kb.write(str(path.relative_to(root)), text)
    kb.search("fox", limit=1)  # a reader waits for the writes before it to be indexed


def test_a_server_keeps_its_columns_again_before_the_log_leaves_the_kept_ones(
    make_root: Callable[..., Path], kept: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the kept columns are far enough behind the log, a server keeps its own, current
    ones in their place: the next start restores them and catches up only what came after,
    though the log (30 entries here) has been cut past the rebuild's position by then."""
    monkeypatch.setattr(changelog, "KEEP", 30)
    monkeypatch.setattr(changelog, "TRIM_EVERY", 1)
    pages = corpus(9)
    pages["b/many.md"] = "fox " * 300 + "river\n"  # over 255: kept beside the column again
    root = make_root(pages)
    with watched(root) as (kb, index):
        stored = kept_words(index)
        rewrite(kb, root, "a/p01*.md", 12, "fox river river\n")
        assert not index.keep_columns(behind=100)  # 12 entries behind: not yet
        assert index.keep_columns(behind=5)
        assert kept_words(index) == stored
        with index.reader() as conn:
            restored = storedcolumns.restore(conn)
        assert restored is not None and restored.log == log_end(index)
        assert not index.keep_columns(behind=5)  # current now
        rewrite(kb, root, "b/p02*.md", 25, "fox fox fox stone\n")  # after them: caught up
        with index.reader() as conn:
            assert conn.execute("SELECT min(seq) FROM fts_log").fetchone()[0] > 1
    with watched(root) as (kb, index):
        assert sorted(index.columns._tf) == stored  # restored, not made on demand
        assert_same(kb, index)


def test_the_periodic_reconcile_keeps_the_columns_again(
    make_root: Callable[..., Path], kept: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnkeeping, "KEEP_BEHIND", 5)
    root = make_root(corpus(9))
    with watching_keeper(root) as (kb, keeper):
        rewrite(kb, root, "a/p01*.md", 6, "fox river river\n")
        watcher = keeper._watcher
        assert watcher is not None
        watcher._reconcile()  # the watcher's periodic reconcile, as it runs it
        index = keeper._open()
        with index.reader() as conn:
            restored = storedcolumns.restore(conn)
        assert restored is not None and restored.log == log_end(index)


def test_columns_whose_lengths_disagree_with_fts5_are_not_kept(
    make_root: Callable[..., Path], kept: None
) -> None:
    """Kept only when every text's number of words is FTS5's: one off, and none is kept."""
    with watched(make_root(corpus(10))) as (kb, index):
        with index.reader() as conn:
            ids = [i for (i,) in conn.execute("SELECT id FROM fts_docsize ORDER BY id")]
            sizes = [bm25.varint(s)[0] for (s,) in conn.execute("SELECT sz FROM fts_docsize")]
        for wrong in (False, True):
            builder = storedcolumns.ColumnBuilder(["fox"], max(ids))
            for file_id, size in zip(ids, sizes, strict=True):
                builder.add(file_id, (b"\x01", size + (wrong and file_id == ids[-1]), ()))
            with index.transaction() as conn:
                assert builder.save(conn) is not wrong
                assert bool(conn.execute("SELECT * FROM column_words").fetchall()) is not wrong


def test_columns_are_kept_by_rebuilds_of_large_roots_only(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "COLUMN_FILES", 401)  # one file more than the root has
    with watched(make_root(corpus(11))) as (kb, index):
        assert not kept_words(index) and not index.columns._tf
        monkeypatch.setattr(build, "COLUMN_FILES", 400)
        kb.reindex()
        assert kept_words(index)
        index.tuning = Tuning(stored_columns=False)
        kb.reindex()
        assert not kept_words(index)  # not made, and those of the last rebuild gone
        index.tuning = Tuning()


@pytest.mark.parametrize("sampled", [64, 1 << 30])
def test_the_cut_takes_every_tie_and_enough(monkeypatch: pytest.MonkeyPatch, sampled: int) -> None:
    """What a page is cut from: at least ``cut`` scores (or every match), and a clean cut, every
    score left out below every score taken (ties included: the key breaks them later); from a
    sample's bound or from a partition of them all."""
    import numpy as np

    monkeypatch.setattr(termcolumns, "SAMPLED", sampled)
    monkeypatch.setattr(termcolumns, "SAMPLES", 16)
    rng = np.random.default_rng(5)
    for _ in range(300):
        size = int(rng.integers(1, 3000))
        scores = rng.integers(0, int(rng.integers(2, 40)), size).astype(np.float64) / 7
        cut = int(rng.integers(1, 400))
        for by_id in (True, False):
            values = scores if by_id else scores[scores > 0]
            if not len(values):
                continue
            chosen, every = termcolumns._best(np, values, cut, by_id)
            taken = np.zeros(len(values), dtype=bool)
            taken[chosen] = True
            matches = values > 0 if by_id else np.ones(len(values), dtype=bool)
            assert not taken[~matches].any()  # never a document that does not match
            assert taken.sum() >= min(cut, matches.sum())
            if (~taken & matches).any():
                assert values[~taken & matches].max() < values[taken].min()
            if every:
                assert taken[matches].all()


@pytest.mark.parametrize("harm", ["schema", "blob", "over"])
def test_kept_columns_not_as_the_rebuild_left_them_are_not_used(
    make_root: Callable[..., Path], kept: None, harm: str
) -> None:
    """The schema changed since the rebuild (another version rebuilt the index, leaving these
    tables it does not know), or a column does not read back whole: the columns are made on
    demand instead, and every answer stays FTS5's."""
    pages = corpus(12)
    pages["b/many.md"] = "fox " * 300 + "river\n"
    root = make_root(pages)
    with watched(root) as (kb, index):
        assert index.columns._tf
        with index.transaction() as conn:
            if harm == "schema":
                conn.execute("CREATE TABLE elsewhere (x)")
            elif harm == "blob":
                conn.execute("UPDATE column_words SET counts = x'00ff' WHERE word = 'river'")
            else:
                conn.execute("UPDATE column_words SET over = x'28b52ffd' WHERE over IS NOT NULL")
    with watched(root) as (kb, index):
        assert not index.columns._tf
        assert_same(kb, index)


def test_kept_columns_outlive_the_tables_kiwifs_makes_later(
    make_root: Callable[..., Path], kept: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index made before the kept report's and the change monitor's tables gets them when
    first used: a schema change of kiwifs's own, which leaves the texts alone and so keeps the
    columns current (a server's first searches still find them made)."""
    from kiwifs.index.memory import printed

    monkeypatch.setattr(printed, "MIN_BYTES", 0)
    root = make_root(corpus(13))
    with watched(root) as (kb, index):
        stored = kept_words(index)
        assert stored
        with index.transaction() as conn:  # as an index made before them was left
            for name in ("insert", "delete", "update"):
                conn.execute(f"DROP TRIGGER printed_reports_{name}")
            conn.execute("DROP TABLE printed_reports")
            conn.execute("DROP TABLE monitor_position")
            storedcolumns.stamp(conn)
    with Knowledge.open(root, tuning=Tuning(monitor_files=0)) as kb:
        kb.memory_report_document()  # a report kept: its table and triggers made now
    with watched(root) as (kb, index):
        with index.reader() as conn:
            assert conn.execute("SELECT count(*) FROM printed_reports").fetchone()[0] == 1
        assert sorted(index.columns._tf) == stored  # restored, not made on demand
        assert_same(kb, index)


def test_a_rebuild_that_keeps_reports_and_a_position_keeps_its_columns(
    make_root: Callable[..., Path], kept: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kiwifs reindex`` on a large root starts the change monitor, stores its position and
    keeps the report: none of it may leave the columns looking stale."""
    from kiwifs.index import monitor
    from kiwifs.index.memory import printed

    monkeypatch.setattr(printed, "MIN_BYTES", 0)
    root = make_root(corpus(14))
    try:
        with Knowledge.open(root, tuning=Tuning(monitor_files=1)) as kb:
            kb.reindex_or_reconcile()
            kb.memory_report_document()
        with watched(root) as (kb, index):
            with index.reader() as conn:
                assert conn.execute("SELECT count(*) FROM monitor_position").fetchone()[0] == 2
                assert conn.execute("SELECT count(*) FROM printed_reports").fetchone()[0] == 2
            assert sorted(index.columns._tf) == kept_words(index) != []
    finally:
        monitor.stop(root)
