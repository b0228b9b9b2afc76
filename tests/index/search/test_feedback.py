"""Pseudo-relevance feedback: a natural-language question also finds the pages that share the
best hits' distinctive words, filters still hold, paging stays consistent, and nothing changes
when no word qualifies or the query is FTS5 syntax. (The term columns' fast path gives the same
answers with feedback on: tests/index/search/test_termcolumns.py asks natural-language queries
both ways.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kiwifs.index.search import feedback
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning
from partskit import index_keeper

FILLER = "the weather report said cloudy skies with a chance of {n} showers"


def pages() -> dict[str, str]:
    """60 filler pages, and one session (``alpha7``) of three turns about a hike: only the first
    holds the question's words, the others share its session and its place."""
    out = {
        f"notes/f{n:02}.md": f"---\nsession: s{n}\n---\nBob: {FILLER.format(n=n)}\n"
        for n in range(60)
    }
    out["talk/a.md"] = "---\nsession: alpha7\n---\nCaroline: I went hiking in the rockies\n"
    out["talk/b.md"] = "---\nsession: alpha7\n---\nMelanie: the rockies sound lovely\n"
    out["other/c.md"] = "---\nsession: alpha7\nscope: kept\n---\nMelanie: send photos\n"
    return out


def paths(results: Any) -> list[str]:
    return [hit.path for hit in results.results]


@pytest.fixture
def pages_root(make_root: Callable[..., Path]) -> Path:
    """``pages()`` in a plain folder (no git)."""
    return make_root(pages())


@pytest.fixture
def pages_keeper(pages_root: Path) -> IndexKeeper:
    """The index keeper ``pages_kb`` is opened with."""
    return index_keeper(pages_root)


@pytest.fixture
def pages_kb(pages_root: Path, pages_keeper: IndexKeeper) -> Iterator[Knowledge]:
    """The library on ``pages_root``."""
    with Knowledge(pages_root, index=pages_keeper) as k:
        yield k


def asked(kb: Knowledge, keeper: IndexKeeper, on: bool, **kwargs: Any) -> Any:
    """A search with feedback on or off (``Tuning.feedback``), then on again."""
    index = keeper._open()
    index.tuning = Tuning(feedback=on)
    try:
        return kb.search(**kwargs).to_json()
    finally:
        index.tuning = Tuning()


def test_feedback_finds_pages_without_the_question_words(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    question = "Where did Caroline go hiking?"
    plain = [h["path"] for h in asked(pages_kb, pages_keeper, False, query=question)["results"]]
    fed = [h["path"] for h in asked(pages_kb, pages_keeper, True, query=question)["results"]]
    assert plain == ["talk/a.md"]
    assert fed[0] == "talk/a.md"
    assert set(fed) == {"talk/a.md", "talk/b.md", "other/c.md"}


def test_feedback_words_are_shared_rare_content_words(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    pages_kb.search("hiking")  # brings the index up to date
    with pages_keeper._open().reader() as conn:
        sql = "SELECT path, 1.0, id, mtime_ns FROM files WHERE path = ?"
        row = conn.execute(sql, ("talk/a.md",)).fetchone()
        words = feedback.feedback_words(conn, [tuple(row)], frozenset({"hike"}), 63)
    # "alpha7" (3 pages) and "rocki" (2) qualify; "caroline" is in one page only, "session"
    # in every page, "i"/"in"/"the" are stop words
    assert set(words) == {"alpha7", "rocki"}


def test_no_qualifying_word_keeps_the_plain_ranking(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    for question in ("cloudy showers", "what did the weather report say?"):
        assert asked(pages_kb, pages_keeper, True, query=question) == asked(
            pages_kb, pages_keeper, False, query=question
        )


def test_filters_hold_for_pages_feedback_adds(pages_kb: Knowledge) -> None:
    question = "Where did Caroline go hiking?"
    assert set(paths(pages_kb.search(question, path_prefix="talk/"))) == {"talk/a.md", "talk/b.md"}
    assert paths(pages_kb.search(question, scope="kept")) == []


def test_pages_of_a_fed_back_ranking_agree(pages_kb: Knowledge) -> None:
    question = "Did Caroline hike in cloudy weather?"
    whole = paths(pages_kb.search(question, limit=100))
    pieces = [
        p for off in range(0, 100, 7) for p in paths(pages_kb.search(question, limit=7, offset=off))
    ]
    assert 3 < len(whole) < 100
    assert pieces == whole


def test_fts5_syntax_one_word_and_recency_are_not_fed_back(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    queries: list[dict[str, Any]] = [{"query": "hiking AND caroline"}, {"query": "hiking"}]
    queries.append({"query": "Caroline hiking", "recency_weight": 0.5})
    for kwargs in queries:
        on = [h["path"] for h in asked(pages_kb, pages_keeper, True, **kwargs)["results"]]
        off = [h["path"] for h in asked(pages_kb, pages_keeper, False, **kwargs)["results"]]
        assert on == off == ["talk/a.md"]


def test_counts_follow_writes(pages_kb: Knowledge) -> None:
    """A word's count is kept only while the index stands still: a page written later that
    makes a word shared (``canyon``: one page, then two) is fed back at once."""
    pages_kb.write("talk/d.md", "---\nsession: beta\n---\nCaroline: hiking the canyon at dawn\n")
    assert "talk/e.md" not in paths(pages_kb.search("Where did Caroline go hiking?"))
    pages_kb.write("talk/e.md", "---\nsession: gamma\n---\nMelanie: the canyon looked huge\n")
    assert "talk/e.md" in paths(pages_kb.search("Where did Caroline go hiking?"))
