"""The text index written last in each transaction, and FTS5's merge settings.

A transaction's words are held by :class:`TextChanges` and written after its other statements,
so FTS5 writes them as one segment instead of one per file; what the tables hold afterwards
must be what writing each change at once would leave, whatever the order of stores and
forgets within the transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiwifs.index.core import Index
from kiwifs.index.schema import FTS_MERGING, recreate
from kiwifs.index.texts import TextChanges
from kiwifs.tuning import Tuning


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "index.db")
    recreate(connection)
    yield connection
    connection.close()


def vocabulary(conn: sqlite3.Connection, table: str) -> list[tuple[str, int, int]]:
    """Every term of ``table`` with its document and token counts (FTS5's own view)."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table}_v USING fts5vocab({table}, 'row')")
    return list(conn.execute(f"SELECT term, doc, cnt FROM {table}_v ORDER BY term"))


def as_if_rebuilt(conn: sqlite3.Connection, texts: dict[int, str]) -> list[tuple[str, int, int]]:
    """The vocabulary of a text index holding exactly ``texts``, made afresh."""
    conn.execute(
        "CREATE VIRTUAL TABLE fresh USING fts5(body, content = '',"
        " tokenize = 'porter unicode61 remove_diacritics 1')"
    )
    conn.executemany("INSERT INTO fresh (rowid, body) VALUES (?, ?)", texts.items())
    return vocabulary(conn, "fresh")


def stored_ids(conn: sqlite3.Connection) -> list[int]:
    return [i for (i,) in conn.execute("SELECT id FROM bodies ORDER BY id")]


def test_stores_and_forgets_in_any_order_leave_what_the_last_of_each_says(
    conn: sqlite3.Connection,
) -> None:
    first = TextChanges()
    first.store(1, "alpha river")
    first.store(2, "beta stone")
    first.store(3, "gamma meadow")
    first.write(conn)
    conn.commit()

    changes = TextChanges()
    changes.forget(1)  # rewritten twice within the transaction
    changes.store(1, "delta river")
    changes.forget(1)
    changes.store(1, "epsilon river")
    changes.store(4, "zeta wholly new")  # stored, then gone again: never written
    changes.forget(4)
    changes.forget(2)  # deleted, and its id taken by a new file
    changes.store(2, "eta reused")
    changes.forget(3)  # deleted
    changes.write(conn)
    conn.commit()

    final = {1: "epsilon river", 2: "eta reused"}
    assert vocabulary(conn, "fts") == as_if_rebuilt(conn, final)
    assert stored_ids(conn) == [1, 2]
    logged = {d for (d,) in conn.execute("SELECT doc FROM fts_log")}
    assert logged == {1, 2, 3}  # every document whose words changed, for the term columns


def test_a_forget_without_stored_text_is_nothing(conn: sqlite3.Connection) -> None:
    """An unreadable file has a row and no text: forgetting it touches no word."""
    changes = TextChanges()
    changes.forget(7)
    changes.store(8, "river")
    changes.write(conn)
    conn.commit()
    assert vocabulary(conn, "fts") == as_if_rebuilt(conn, {8: "river"})


def files(count: int, word: str) -> dict[str, str]:
    text = "---\nstatus: draft\n---\n{word}{i} common words\n"
    return {f"notes/n{i:03}.md": text.format(word=word, i=i) for i in range(count)}


def data_rows(index: Index) -> int:
    with index.reader() as conn:
        return int(conn.execute("SELECT count(*) FROM fts_data").fetchone()[0])


def test_the_words_of_one_transaction_are_written_as_one_segment(
    make_root: Callable[..., Path],
) -> None:
    """An upsert inside a transaction made SQLite 3.40's FTS5 write out the words it held as a
    segment of their own: storing each file's words before the next row cost a segment (a
    leaf or more) per file."""
    root = make_root({"index.md": "# home\n"})
    index = Index(root)
    try:
        index.reconcile()
        before = data_rows(index)
        for rel, text in files(60, "otter").items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        index.refresh(sorted(files(60, "otter")))
        assert data_rows(index) - before < 10  # a segment of a leaf or two, not 60
    finally:
        index.close()


@pytest.mark.parametrize("texts_last", [True, False], ids=["texts-last", "words-at-once"])
def test_rewrites_and_deletes_in_one_round_match_a_fresh_index(
    make_root: Callable[..., Path], texts_last: bool
) -> None:
    """Either way a round's words reach FTS5 (``Tuning.texts_last`` off: each file's words as
    its row is stored, the plain path), the text index is a fresh one's."""
    root = make_root(files(30, "otter"))
    index = Index(root, tuning=Tuning(texts_last=texts_last))
    try:
        index.rebuild()
        for i in range(0, 30, 3):
            (root / f"notes/n{i:03}.md").write_text(f"badger{i} rewritten\n")
        for i in range(1, 30, 3):
            (root / f"notes/n{i:03}.md").unlink()
        assert index.refresh(sorted(f"notes/n{i:03}.md" for i in range(30))) == 30
        with index.reader() as conn:
            match = "SELECT f.path FROM fts JOIN files f ON f.id = fts.rowid WHERE fts MATCH ?"
            assert conn.execute(match, ("badger3",)).fetchall() == [("notes/n003.md",)]
            assert conn.execute(match, ("otter3",)).fetchall() == []  # its old words went
            assert conn.execute(match, ("otter4",)).fetchall() == []  # deleted
            assert conn.execute(match, ("otter5",)).fetchall() == [("notes/n005.md",)]
    finally:
        index.close()
    kept = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("n*.md")}
    rebuilt = make_root(kept)
    fresh = Index(rebuilt)
    try:
        fresh.rebuild()
    finally:
        fresh.close()
    assert text_index(root) == text_index(rebuilt)


def text_index(root: Path) -> list[tuple[str, int, int]]:
    """The vocabulary of the root's text index (terms, documents, tokens)."""
    conn = sqlite3.connect(root / ".kiwi/state/index.db")
    try:
        return vocabulary(conn, "fts")
    finally:
        conn.close()


def merge_settings(root: Path) -> dict[str, int]:
    conn = sqlite3.connect(root / ".kiwi/state/index.db")
    try:
        keys = "('automerge', 'crisismerge')"
        return dict(conn.execute(f"SELECT k, v FROM fts_config WHERE k IN {keys}"))
    finally:
        conn.close()


def test_merge_settings_are_given_to_new_and_old_indexes(make_root: Callable[..., Path]) -> None:
    root = make_root({"notes/a.md": "river\n"})
    Index(root).close()
    assert merge_settings(root) == FTS_MERGING
    Index(root, tuning=Tuning(fts_merge=False)).close()  # FTS5's defaults: an index made before
    assert merge_settings(root) == {}
    index = Index(root)  # an index without them gets them when opened
    try:
        assert merge_settings(root) == FTS_MERGING
        index.reconcile()
        with index.reader() as conn:
            assert conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'river'").fetchall()
    finally:
        index.close()
