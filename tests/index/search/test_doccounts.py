"""The feedback's document counts kept across writes give what FTS5 counts afresh, in every
snapshot: after pages are added, edited and deleted, and in a read snapshot older than the one
a count was kept in."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiwifs.index import changelog
from kiwifs.index.core import Index
from kiwifs.index.search import doccounts
from kiwifs.knowledge import Knowledge
from partskit import index_keeper

WORDS = ("heron", "maple", "quartz", "violet")


def page(words: list[str]) -> str:
    return "---\nkind: note\n---\n" + " ".join(["filler", *words]) + "\n"


@contextmanager
def library(root: Path) -> Iterator[tuple[Knowledge, Index]]:
    keeper = index_keeper(root)
    with Knowledge(root, index=keeper) as kb:
        kb.search("filler")  # the index made
        yield kb, keeper._open()


@contextmanager
def snapshot(index: Index) -> Iterator[sqlite3.Connection]:
    """A read transaction held open: the counts are asked in one state of the index."""
    with index.reader() as conn:
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.rollback()


def check(conn: sqlite3.Connection, cap: int, words: tuple[str, ...] = WORDS) -> list[int]:
    """Each word's kept count in this snapshot, asserted equal to FTS5's count afresh."""
    counts = doccounts.DocumentCounts(conn, cap)
    kept = [counts.of(w) for w in words]
    assert kept == [doccounts.document_count(conn, w, cap) for w in words]
    return kept


def test_a_common_word_made_rare_by_deletes_is_counted_again(
    make_root: Callable[..., Path],
) -> None:
    """Six pages hold ``heron`` (cap 2: refused); as they are deleted one by one the kept count
    answers while the changes cannot have brought it under the cap, then counts again."""
    files = {f"p{n}.md": page(["heron"]) for n in range(6)}
    with library(make_root(files)) as (kb, index):
        with snapshot(index) as conn:
            assert check(conn, 2, ("heron",)) == [3]
        for n in range(5):
            kb.delete(f"p{n}.md")
            with snapshot(index) as conn:
                assert check(conn, 2, ("heron",)) == [min(5 - n, 3)]


def test_an_older_snapshot_does_not_trust_a_newer_count(make_root: Callable[..., Path]) -> None:
    """A reader still in the state where one page held ``maple`` gets 1, though a newer
    snapshot, after five more pages with it, kept 6."""
    with library(make_root({"a.md": page(["maple"])})) as (kb, index):
        with snapshot(index) as old:
            assert check(old, 2, ("maple",)) == [1]
            for n in range(5):
                kb.write(f"more{n}.md", page(["maple"]))
            with snapshot(index) as new:
                assert check(new, 2, ("maple",)) == [3]
            assert check(old, 2, ("maple",)) == [1]


def test_counts_given_whole_stay_exact_as_pages_change(make_root: Callable[..., Path]) -> None:
    """A count the term columns give (exact, not capped) answers until changes could matter."""
    files = {f"p{n}.md": page(["quartz"] if n < 4 else []) for n in range(8)}
    with library(make_root(files)) as (kb, index):
        with snapshot(index) as conn:
            doccounts.DocumentCounts(conn, 1).note({"quartz": 4})
        for n in range(4):
            kb.write(f"p{n}.md", page([]))
            with snapshot(index) as conn:
                assert check(conn, 1, ("quartz",)) == [min(3 - n, 2)]


ops = st.lists(
    st.tuples(
        st.sampled_from(["write", "delete"]),
        st.integers(0, 9),
        st.lists(st.sampled_from(WORDS), max_size=3),
        st.integers(0, 4),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_kept_counts_equal_fresh_counts_after_any_writes(
    steps: list[tuple[str, int, list[str], int]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp, library(Path(tmp)) as (kb, index):
        for what, n, words, cap in steps:
            path = f"p{n}.md"
            if what == "write":
                kb.write(path, page(words))
            elif (Path(tmp) / path).exists():
                kb.delete(path)
            with snapshot(index) as conn:
                check(conn, cap)


def test_a_rebuild_forgets_the_counts_though_its_log_comes_back_to_the_same_place(
    make_root: Callable[..., Path],
) -> None:
    """A rebuild starts the change log afresh: a count kept before it is not trusted when the
    new log reaches the old position (``violet`` left every page out of band meanwhile)."""
    root = make_root({f"p{n}.md": page(["violet"]) for n in range(6)})
    with library(root) as (kb, index):
        with snapshot(index) as conn:
            doccounts.DocumentCounts(conn, 2).note({"violet": 6})
            kept_at = changelog.last(conn, "fts_log")
        for n in range(6):
            (root / f"p{n}.md").write_text(page([]))
        kb.reindex()
        n = 0
        while (at := last_logged(index)) < kept_at:
            kb.write(f"new{n}.md", page([]))
            n += 1
        assert at == kept_at
        with snapshot(index) as conn:
            assert check(conn, 2, ("violet",)) == [0]


def last_logged(index: Index) -> int:
    with snapshot(index) as conn:
        return changelog.last(conn, "fts_log")
