"""A write that lands between a reconcile's read of a file and its store is what the index keeps.

A reconcile reads the files it found changed outside the writer lock, then stores their rows; a
write through kiwifs (and its own refresh of the index) can fall in between. These tests put
the write exactly there through the reconcile's ``after_read`` hook, then read the rows as
stored (no answer that would reconcile again first) and hold them against the file: its blob
id, its frontmatter, its words, and the memory report against a scan of the files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from kiwifs.index import report as indexed_report
from kiwifs.index.core import Index
from kiwifs.index.record import path_key, read_record
from kiwifs.index.storeorder import StoreOrder
from kiwifs.index.texts import frontmatter_sql
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import build_report
from kiwifs.memory.scan import scan_facts

E1 = "episodes/e1.md"
E2 = "episodes/e2.md"


def _episode(episode_id: str, words: str) -> str:
    return f"---\nmemory_kind: episodic\nepisode_id: {episode_id}\n---\n{words}\n"


def _once(action: Callable[[], object]) -> tuple[Callable[[list[bytes]], None], list[bool]]:
    """An ``after_read`` hook running ``action`` after the first batch read, and a flag list
    that says it ran."""
    ran: list[bool] = []

    def hook(keys: list[bytes]) -> None:
        if not ran:
            ran.append(True)
            action()

    return hook, ran


def _assert_rows_match_files(kb: Knowledge, index: Index, rel: str, word: str) -> None:
    """The row of ``rel`` holds the file as it is, and the report from the rows is the scan's."""
    key = path_key(rel)
    assert key is not None
    record = read_record(key, rel, os.fsencode(kb.root / rel))
    assert record is not None
    with index.reader() as conn:
        row = conn.execute(
            f"SELECT etag, {frontmatter_sql()}, unreadable FROM files WHERE key = ?", (key,)
        ).fetchone()
        hits = conn.execute(
            "SELECT f.path FROM fts JOIN files f ON f.id = fts.rowid WHERE fts MATCH ?", (word,)
        ).fetchall()
        stored, _ = indexed_report.report(conn, kb.episodes_prefix())
    assert row is not None
    assert row[0] == record.etag  # the write's bytes, not the ones read before it
    assert json.loads(row[1]) == json.loads(record.frontmatter)  # what /meta filters on
    assert row[2] == 0
    assert hits == [(rel,)]  # search finds the written words
    scanned = build_report(scan_facts(kb.root), kb.episodes_prefix())
    assert stored.to_json() == scanned.to_json()


def test_a_forget_between_a_reconcile_read_and_its_store_stays_forgotten(
    kb: Knowledge, index_keeper: IndexKeeper
) -> None:
    """The failure once seen in CI: right after a forget, the report still listed the episode."""
    kb.write(E1, _episode("e1", "first words"))
    index = index_keeper._open()
    index.reconcile()
    (kb.root / E1).write_text(_episode("e1", "edited outside kiwifs"))  # read again next time
    hook, ran = _once(lambda: kb.forget(E1, reason="wrong"))
    index.reconcile(after_read=hook)
    assert ran  # the forget really fell between the reconcile's read and its store
    assert "superseded" in (kb.root / E1).read_text()
    _assert_rows_match_files(kb, index, E1, "outside")
    with index.reader() as conn:
        (superseded,) = conn.execute(
            "SELECT superseded FROM files WHERE path = ?", (E1,)
        ).fetchone()
    assert superseded == 1


def test_a_write_over_an_unreadable_entry_between_read_and_store_is_kept(
    kb: Knowledge, index_keeper: IndexKeeper
) -> None:
    """A dangling link is an unreadable entry, a record read from no file: nothing about it
    could have told the store that the file changed. A write replaces the link by a file."""
    kb.write(E1, _episode("e1", "first words"))
    index = index_keeper._open()
    index.reconcile()
    (kb.root / E2).symlink_to("missing.md")  # inside the root, pointing at nothing
    hook, ran = _once(lambda: kb.write(E2, _episode("e2", "written over the link")))
    index.reconcile(after_read=hook)
    assert ran
    assert not (kb.root / E2).is_symlink()
    _assert_rows_match_files(kb, index, E2, "link")


def test_store_order_remembers_paths_only_while_a_reconcile_reads() -> None:
    """A refresh before a reconcile's mark never holds it back; one after does; and nothing
    is kept once no reconcile reads (the memory stays bounded on a long-running server)."""
    order = StoreOrder()
    order.stored([b"a.md"])  # no reconcile reading: nothing to remember
    with order.reading() as mark:
        assert order.stored_since(mark) == set()
        order.stored([b"b.md"])
        with order.reading() as later:
            order.stored([b"c.md"])
            assert order.stored_since(later) == {b"c.md"}
        assert order.stored_since(mark) == {b"b.md", b"c.md"}
    assert not order._last  # the memory of paths, emptied with the last mark
