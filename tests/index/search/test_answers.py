"""A server's kept keyword search answers: the same as searching afresh, dropped at every change
of the index, whichever connection or process made it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiwifs.index.search.answers import AnswerCache
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from waiting import wait_for


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Callable[[], sqlite3.Connection]]:
    """Connections to one WAL database with a table ``t``, as the index's readers are."""
    path = tmp_path / "t.db"
    made = [sqlite3.connect(path, isolation_level=None)]
    made[0].execute("PRAGMA journal_mode=WAL")
    made[0].execute("CREATE TABLE t (x)")

    def connect() -> sqlite3.Connection:
        made.append(sqlite3.connect(path, isolation_level=None))
        return made[-1]

    yield connect
    for conn in made:
        conn.close()


def counted(conn: sqlite3.Connection, calls: list[int]) -> Callable[[], int]:
    def compute() -> int:
        calls.append(1)
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])

    return compute


def test_an_answer_is_kept_until_another_connection_commits(
    db: Callable[[], sqlite3.Connection],
) -> None:
    reader, writer = db(), db()
    cache: AnswerCache[int] = AnswerCache(8)
    calls: list[int] = []
    assert cache.answer(reader, "q", counted(reader, calls)) == 0
    assert cache.answer(reader, "q", counted(reader, calls)) == 0
    assert len(calls) == 1
    writer.execute("INSERT INTO t VALUES (1)")
    assert cache.answer(reader, "q", counted(reader, calls)) == 1
    assert len(calls) == 2


def test_a_change_seen_on_one_connection_drops_what_another_kept(
    db: Callable[[], sqlite3.Connection],
) -> None:
    first, second, writer = db(), db(), db()
    cache: AnswerCache[int] = AnswerCache(8)
    calls: list[int] = []
    cache.answer(first, "q", counted(first, calls))
    cache.answer(second, "other", counted(second, calls))  # a new connection: a clear
    cache.answer(first, "q", counted(first, calls))
    assert len(calls) == 3
    cache.answer(first, "q", counted(first, calls))
    assert len(calls) == 3
    writer.execute("INSERT INTO t VALUES (1)")
    assert cache.answer(second, "other", counted(second, calls)) == 1  # second sees it first
    assert cache.answer(first, "q", counted(first, calls)) == 1  # and first's answer is gone
    assert len(calls) == 5


def test_an_answer_computed_across_a_clear_is_not_kept(
    db: Callable[[], sqlite3.Connection],
) -> None:
    reader, other = db(), db()
    cache: AnswerCache[int] = AnswerCache(8)
    calls: list[int] = []

    def cleared_meanwhile() -> int:
        calls.append(1)
        # a lookup on a connection the cache has not met clears it, as one that saw a commit
        # would; ``reader`` saw no change, so only the epoch can tell this answer is stale
        cache.answer(other, "other", lambda: 0)
        return 7

    assert cache.answer(reader, "q", cleared_meanwhile) == 7
    assert cache.answer(reader, "q", counted(reader, calls)) == 0
    assert len(calls) == 2


def test_the_least_recently_used_answer_goes_first_and_size_0_keeps_none(
    db: Callable[[], sqlite3.Connection],
) -> None:
    reader = db()
    cache: AnswerCache[int] = AnswerCache(2)
    calls: list[int] = []
    for key in ["a", "b", "a", "c", "a", "b"]:  # "b" went when "c" came
        cache.answer(reader, key, counted(reader, calls))
    assert len(calls) == 4
    none: AnswerCache[int] = AnswerCache(0)
    for _ in range(3):
        none.answer(reader, "a", counted(reader, calls))
    assert len(calls) == 7


PAGES = {
    "notes/fox.md": "---\nscope: team\n---\nThe quick brown fox jumps\n",
    "notes/dog.md": "---\nscope: other\n---\nA lazy dog and a fox\n",
    "episodes/e1.md": "---\nmemory_kind: episodic\nepisode_id: e1\n---\nfox seen near the dog\n",
}
QUERIES = ["fox", "lazy dog", "what did the fox do", '"quick brown"', "wombat"]


def answers(kb: Knowledge) -> list[object]:
    found: list[object] = []
    for q in QUERIES:
        for scope in (None, "team"):
            found.append(kb.search(q, scope=scope).to_json())
            found.append(kb.search(q, limit=1, offset=1).to_json())
    return found


@pytest.fixture
def served(make_root: Callable[..., Path]) -> Iterator[tuple[Knowledge, Knowledge]]:
    """A watching library (a server's: it keeps answers) and a one-shot one on the same root,
    which reconciles and ranks afresh for every search."""
    root = make_root(PAGES)
    with Knowledge.open(root) as kept, Knowledge.open(root) as plain:
        Serving(kept).start_watching()
        assert wait_for(kept.ready)
        yield kept, plain
        Serving(kept).stop_watching()


def test_kept_answers_are_the_fresh_ones_after_writes_and_edits(
    served: tuple[Knowledge, Knowledge],
) -> None:
    kept, plain = served
    before = answers(kept)
    assert answers(kept) == before == answers(plain)
    kept.write("notes/wombat.md", "---\nscope: team\n---\nA wombat, and a fox\n")
    assert wait_for(lambda: answers(kept) == answers(plain) != before)
    assert any("wombat" in str(a) for a in answers(kept))
    # an edit behind kiwifs's back, then a command in another process rewriting the index
    (kept.root / "notes/dog.md").write_text("---\nscope: team\n---\nno more canines\n")
    root = str(kept.root)
    subprocess.run(
        [sys.executable, "-m", "kiwifs", "reindex", "--root", root], check=True, capture_output=True
    )
    assert wait_for(lambda: answers(kept) == answers(plain))
    assert "notes/dog.md" not in str(kept.search("lazy dog").to_json())


def test_a_caller_changing_its_hits_does_not_change_the_next_answer(
    served: tuple[Knowledge, Knowledge],
) -> None:
    kept, _ = served
    first = kept.search("fox")
    first.results.clear()
    assert kept.search("fox").results


def test_a_very_long_query_is_answered_but_not_kept(served: tuple[Knowledge, Knowledge]) -> None:
    kept, _ = served

    def kept_answers() -> int:
        return kept.indexing.guarded(lambda index: len(index.answers))

    found = [h.path for h in kept.search("fox").results]
    assert kept_answers() == 1
    assert [h.path for h in kept.search("fox " + "x" * 3000).results] == found
    assert kept_answers() == 1
    kept.search("dog")
    assert kept_answers() == 2
