"""The bulk rebuild (``kiwifs reindex``) leaves exactly the tables the row-by-row path leaves."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from kiwifs.index import build as bulk
from kiwifs.index import texts
from kiwifs.index.build import parsed
from kiwifs.index.core import Index
from kiwifs.index.walk import start_walk
from kiwifs.tuning import Tuning

PAGES = {
    "episodes/2026/a.md": "---\nmemory_kind: episodic\nepisode_id: ep-1\n---\nalpha beta\n",
    "episodes/2026/b.md": "---\nmemory_kind: episodic\nepisode_id: ep-2\n---\nbeta gamma\n",
    "episodes/c.md": "---\nmemory_kind: episodic\n---\nno id here\n",
    "episodes/d.md": "---\nmemory_kind: episodic\nid: ep-4\nanchor: &a [1, 2]\nb: *a\n---\n",
    "pages/merged.md": (
        "---\nmerged-from:\n  - type: episode\n    id: ep-1\n  - path: episodes/c.md\n"
        "scope: team\n---\nmerged page\n"
    ),
    "pages/bad.md": "---\nkey: [unclosed\n---\nbroken yaml still searchable\n",
    "pages/old.md": "---\nmemory_status: superseded\n---\nforgotten\n",
    "plain.md": "no frontmatter at all\n",
    "pages/links.md": (
        "---\nsuperseded_by: pages/merged\ncontradicts: [[plain]]\n---\n"
        + " ".join(f"[[episodes/2026/{c}]] [x](../episodes/{c}.md#h)" for c in "abcd")
        + " [[nowhere#top]] [[Plain|alias]]\n"
    ),
}
TABLES = {
    "files": "SELECT * FROM files ORDER BY id",
    "cover_ids": "SELECT ident, file_id FROM cover_ids ORDER BY 1, 2",
    "cover_paths": "SELECT target, file_id FROM cover_paths ORDER BY 1, 2",
    "words": "SELECT rowid FROM fts WHERE fts MATCH 'beta OR merged OR searchable' ORDER BY rowid",
    "dirs": "SELECT * FROM dirs ORDER BY key",
    "links": "SELECT * FROM links ORDER BY file_id, rowid",
    # the load drops indexes and idle triggers and sets FTS5's hash size: all made again
    "schema": "SELECT type, name, sql FROM sqlite_schema ORDER BY type, name",
    "fts_config": "SELECT * FROM fts_config ORDER BY k",
}


def tables(db: Path) -> dict[str, list[object]]:
    conn = sqlite3.connect(db)
    try:
        found = {name: conn.execute(sql).fetchall() for name, sql in TABLES.items()}
        # the frontmatter as JSON: its compressed bytes depend on the dictionary
        found["files"] = [
            (*r[:8], texts.frontmatter_text(conn, r[8]), *r[9:]) for r in found["files"]
        ]
        ids = [r[0] for r in conn.execute("SELECT id FROM bodies ORDER BY id")]
        found["bodies"] = sorted(texts.texts(conn, ids).items())  # the texts, not the bytes
        return found
    finally:
        conn.close()


def built(
    root: Path, name: str, count: int = 9, tuning: Tuning | None = None, **kw: object
) -> dict[str, list[object]]:
    db = root.parent / f"{name}.db"
    index = Index(root, db, tuning=tuning)
    try:
        assert index.rebuild(**kw) == count  # type: ignore[arg-type]
    finally:
        index.close()
    return tables(db)


def test_bulk_rebuild_equals_the_row_by_row_one(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    (root / "episodes" / "link.md").symlink_to("/nonexistent")  # an error record
    rows = built(root, "rows", 10, bulk=False)
    bulk = built(root, "bulk", 10, workers=1)
    assert rows["files"] and len(rows["links"]) > 10, "the comparison must compare something"
    assert bulk == rows
    covered = {r[3]: r[18] for r in bulk["files"]}  # path -> covered
    assert covered["episodes/2026/a.md"] == 1
    assert covered["episodes/2026/b.md"] == 0


def test_links_loaded_many_a_statement_equal_the_row_by_row_ones(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statements of three link rows and the rest one a statement: the same rows. The text
    index is left as one segment (an INSERT that may abort half done would have flushed
    FTS5's pending terms at each statement: a segment each)."""
    monkeypatch.setattr(bulk, "ROWS_PER_INSERT", 3)
    monkeypatch.setattr(bulk, "LOAD_BATCH", 2)
    root = make_root(PAGES)
    rows = built(root, "rows", 9, bulk=False)
    many = built(root, "many", 9, workers=1)
    assert len(rows["links"]) % 3 and many == rows
    conn = sqlite3.connect(root.parent / "many.db")
    try:  # the structure record and one segment's rows (its leaves, with no index pages)
        blocks = conn.execute("SELECT count(*) FROM fts_data WHERE id > 10").fetchone()[0]
    finally:
        conn.close()
    assert blocks == 1


def test_forked_parsing_equals_parsing_here(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many small jobs: the first ones handed out at once, the rest as rows are taken."""
    root = make_root(
        {f"e/{i:03}.md": f"---\nepisode_id: ep-{i}\n---\nword {i}\n" for i in range(60)}
    )
    monkeypatch.setattr(bulk, "CHUNK", 3)
    monkeypatch.setattr(bulk, "AHEAD", 4)
    monkeypatch.setattr(bulk, "IN_FLIGHT", 1)
    walked = start_walk(root).result()
    keys = sorted(walked.state.sigs)
    here = list(parsed(os.fspath(root), str(root.resolve()), keys, {}, workers=1))
    forked = list(parsed(os.fspath(root), str(root.resolve()), keys, {}, workers=2, threshold=0))
    assert len(here) == 60 and forked == here


def test_a_jobs_keys_are_let_go_once_its_rows_are_taken(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild hands its keys to the jobs and lets go of them: the keys of a job whose rows
    were taken are held by nothing (a million keys were ~90 MB of a rebuild's peak memory)."""
    root = make_root({f"e/{i:03}.md": f"word {i}\n" for i in range(12)})
    monkeypatch.setattr(bulk, "CHUNK", 3)
    keys = sorted(start_walk(root).result().state.sigs)
    first, last = keys[0], keys[-1]
    held = sys.getrefcount(first)  # the list's reference, this name's and the call's
    rows = parsed(os.fspath(root), str(root.resolve()), keys, {}, workers=1)
    keys.clear()
    for _ in range(4):  # the first job's three rows, then one of the second job
        row = next(rows)
    assert row is not None
    del row
    assert sys.getrefcount(first) == held - 1  # only this name holds it now
    assert sys.getrefcount(last) > held - 1  # a job not yet parsed still holds its keys
    rows.close()


# Parsers started, one row taken, then the rows closed: in a fresh process, which has one
# thread (the workers are forked only then); prints the workers' pids while they ran and after.
CLOSED_EARLY = """
import glob, os, sys
from pathlib import Path
from kiwifs.index.build import parsed
root = sys.argv[1]
for i in range(40):
    Path(root, f"e{i}.md").write_text(f"word {i}\\n")
def children():
    tasks = glob.glob(f"/proc/{os.getpid()}/task/*/children")
    return sorted(pid for task in tasks for pid in open(task).read().split())
keys = [f"e{i}.md".encode() for i in range(40)]
with parsed(root, root, keys, {}, workers=2, threshold=1) as rows:
    assert next(rows) is not None
    print(len(children()), end=" ")
print(len(children()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux")
def test_rows_closed_before_they_are_all_taken_end_their_workers(tmp_path: Path) -> None:
    """A rebuild that fails after its parsers started (they start before the old tables are
    dropped) closes the rows: no worker is left behind."""
    command = [sys.executable, "-c", CLOSED_EARLY, str(tmp_path)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "0"]


# The whole rebuild as `kiwifs reindex` runs it: the parsers forked (a fresh process has one
# thread), started before the old tables are dropped, over an index that exists; then the same
# root built row by row. Prints whether the tables are the same and how many rows they hold.
FORKED_REBUILD = """
import sqlite3, sys
from pathlib import Path
from kiwifs.index import build as bulk, texts as bodies
from kiwifs.index.core import Index
from kiwifs.base.forking import fork_is_safe
root = Path(sys.argv[1])
for i in range(120):
    cites = f"merged-from:\\n  - type: episode\\n    id: ep-{i + 1}\\n" if i % 3 == 0 else ""
    page = root / f"e{i % 7}/{i:03}.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    head = f"---\\nmemory_kind: episodic\\nepisode_id: ep-{i}\\n{cites}---\\n"
    page.write_text(head + f"word{i} run\\n")
bulk.PARALLEL_THRESHOLD, bulk.CHUNK, bulk.AHEAD, bulk.IN_FLIGHT = 1, 7, 2, 1
def build(name, **kw):
    index = Index(root, root.parent / name)
    try:
        index.rebuild(**kw)
        index.rebuild(**kw)  # over the index the first one left
    finally:
        index.close()
    conn = sqlite3.connect(root.parent / name)
    rows = [(*r[:8], bodies.frontmatter_text(conn, r[8]), *r[9:])
            for r in conn.execute("SELECT * FROM files ORDER BY key")]
    words = conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'run' ORDER BY 1").fetchall()
    ids = [r[0] for r in conn.execute("SELECT id FROM bodies ORDER BY id")]
    texts = sorted(bodies.texts(conn, ids).values())
    conn.close()
    return [r[1:] for r in rows], len(words), texts
assert fork_is_safe()
forked = build("forked.db", workers=2)
rows = build("rows.db", bulk=False)
print(forked == rows, len(forked[0]), sum(r[17] for r in forked[0]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux")
def test_a_forked_rebuild_over_an_index_equals_the_row_by_row_one(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    command = [sys.executable, "-c", FORKED_REBUILD, str(tmp_path / "root")]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "120", "40"]  # every third episode covered


def test_coverage_worked_out_while_loading_equals_the_update_after_it(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Covered by a row before it, by itself, by a row after it (by id and by path), or not
    at all: the same ``covered`` as one UPDATE of every row after the load, and as the
    row-by-row path."""
    page = "---\nmerged-from:\n{}---\nmerged\n"
    root = make_root(
        {
            "a-first.md": page.format("  - type: episode\n    id: ep-2\n"),
            "e/1.md": "---\nmemory_kind: episodic\nepisode_id: ep-1\n---\none\n",
            "e/2.md": "---\nmemory_kind: episodic\nepisode_id: ep-2\n---\ntwo\n",
            "e/3.md": "---\nmemory_kind: episodic\nepisode_id: ep-3\n---\nthree\n",
            "e/4.md": "---\nmemory_kind: episodic\nepisode_id: ' ep-4 '\n---\nfour\n",
            "e/self.md": (
                "---\nmemory_kind: episodic\nepisode_id: ep-s\nmerged-from:\n"
                "  - type: episode\n    id: ep-s\n---\nitself\n"
            ),
            "e/uncovered.md": "---\nmemory_kind: episodic\nepisode_id: ep-9\n---\nnine\n",
            "z-last.md": page.format(
                "  - type: episode\n    id: ep-4\n  - type: file\n    path: e/1.md\n"
                "  - type: run\n    id: ep-3\n"
            ),
        }
    )
    rows = built(root, "rows", 8, bulk=False)
    loading = built(root, "loading", 8, workers=1)
    after = built(root, "after", 8, Tuning(cover_while_loading=False), workers=1)
    assert loading == after == rows
    covered = {r[3]: r[18] for r in loading["files"]}
    assert covered == {
        "a-first.md": 0,
        "e/1.md": 1,  # by path, from a later row
        "e/2.md": 1,  # by id, from an earlier row
        "e/3.md": 1,  # a run's id covers as an episode's does
        "e/4.md": 1,  # the id is stripped, as the report strips it
        "e/self.md": 1,
        "e/uncovered.md": 0,
        "z-last.md": 0,
    }


def test_reindex_progress_reaches_the_total(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    seen: list[tuple[int, int]] = []
    index = Index(root, root.parent / "index.db")
    try:
        index.rebuild(lambda done, total: seen.append((done, total)))
    finally:
        index.close()
    assert seen[-1] == (9, 9)


def test_texts_compressed_with_the_roots_dictionary_read_back_and_delete_exactly(
    make_root: Callable[..., Path],
) -> None:
    files = {
        f"episodes/{i:03}.md": f"---\nmemory_kind: episodic\nepisode_id: ep-{i}\ntags: [a, b]\n"
        f"title: The deploy of run {i}\n"
        f"---\n# Run {i}\n\nThe deploy of run {i} timed out; retried. caf\u00e9 {i * 7}\n"
        for i in range(300)
    }
    root = make_root(files)
    db = root.parent / "dict.db"
    index = Index(root, db)
    try:
        assert index.rebuild(workers=1) == 300
        with index.reader() as conn:
            kinds = dict(conn.execute("SELECT kind, id FROM body_dicts").fetchall())
            blob = conn.execute("SELECT text FROM bodies WHERE id = 1").fetchone()[0]
            frontmatter = conn.execute("SELECT frontmatter FROM files WHERE id = 1").fetchone()[0]
            # one dictionary for the texts, one for the frontmatter JSON, each in its frames
            assert set(kinds) == {texts.TEXTS, texts.FRONTMATTER} and 0 not in kinds.values()
            assert zstandard.get_frame_parameters(blob).dict_id == kinds[texts.TEXTS]
            json_id = zstandard.get_frame_parameters(frontmatter).dict_id
            assert json_id == kinds[texts.FRONTMATTER] != kinds[texts.TEXTS]
            stored = texts.texts(conn, list(range(1, 301)))
            json_text = conn.execute(f"SELECT {texts.frontmatter_sql()} FROM files WHERE id = 1")
            assert json.loads(json_text.fetchone()[0])["tags"] == ["a", "b"]
        assert sorted(stored.values()) == sorted(files.values())
        # a later write is compressed with the same dictionary; the old words are deleted
        (root / "episodes/007.md").write_text("---\nmemory_kind: episodic\n---\nkiwi only\n")
        index.refresh(["episodes/007.md"])
        with index.reader() as conn:
            words = "SELECT count(*) FROM fts WHERE fts MATCH ?"
            assert conn.execute(words, ("kiwi",)).fetchone()[0] == 1
            assert conn.execute(words, ("deploy",)).fetchone()[0] == 299
            row = conn.execute("SELECT id FROM files WHERE path = 'episodes/007.md'")
            (file_id,) = row.fetchone()
            assert texts.texts(conn, [file_id])[file_id].endswith("kiwi only\n")
        # a row written later compresses its frontmatter with the frontmatter's dictionary
        (root / "episodes/008.md").write_text(
            "---\nmemory_kind: episodic\nepisode_id: ep-8\ntags: [a, b, c]\ntitle: Later\n---\nx\n"
        )
        index.refresh(["episodes/008.md"])
        with index.reader() as conn:
            sql = "SELECT frontmatter FROM files WHERE path = 'episodes/008.md'"
            later = conn.execute(sql).fetchone()[0]
            assert zstandard.get_frame_parameters(later).dict_id == json_id
    finally:
        index.close()


def test_a_load_with_vectors_on_queues_every_content_as_rows_do(
    make_root: Callable[..., Path],
) -> None:
    """With vectors on, the queue's triggers stay during the load (they are dropped only while
    they can do nothing): every readable content is queued, as a row-by-row build queues it."""
    root = make_root(PAGES)
    queued: dict[str, list[object]] = {}
    for name, kw in (("rows", {"bulk": False}), ("bulk", {"workers": 1})):
        db = root.parent / f"vec-{name}.db"
        index = Index(root, db)
        try:
            conn = sqlite3.connect(db)
            conn.execute("INSERT OR REPLACE INTO vec_meta (key, value) VALUES ('enabled', '1')")
            conn.commit()
            conn.close()
            index.rebuild(**kw)  # type: ignore[arg-type]
        finally:
            index.close()
        conn = sqlite3.connect(db)
        queued[name] = conn.execute("SELECT etag FROM vec_queue ORDER BY etag").fetchall()
        conn.close()
    assert len(queued["rows"]) == 9  # every page is readable
    assert queued["bulk"] == queued["rows"]


def test_the_load_writes_its_words_in_fewer_segments_and_leaves_fts5s_default(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A larger FTS5 hash for the load: fewer segments to write and merge, the same answers,
    and afterwards no ``hashsize`` of its own in ``fts_config`` (later writes use FTS5's)."""
    words = " ".join(f"w{i}" for i in range(2000))
    root = make_root({f"e/{i:03}.md": f"{i} {words}\n" for i in range(300)})

    def segments(name: str) -> tuple[int, list[int], list[tuple[object, ...]]]:
        # the segments as written
        with contextlib.closing(rebuilt_db(root, name, Tuning(fts_optimize=False))) as conn:
            hits = [r[0] for r in conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'w7'")]
            config = conn.execute("SELECT * FROM fts_config ORDER BY k").fetchall()
            return conn.execute(SEGMENTS).fetchone()[0], hits, config

    big = segments("big")
    monkeypatch.setattr(bulk, "FTS_HASH", bulk.FTS_DEFAULT_HASH)
    small = segments("small")
    assert big[0] < small[0]
    assert big[1:] == small[1:] and len(big[1]) == 300


def test_the_loads_wal_is_emptied_and_a_reader_on_an_old_snapshot_keeps_its_rows(
    make_root: Callable[..., Path],
) -> None:
    """The load's WAL (as large as the index) is emptied before anything syncs it; a reader
    still on the old snapshot keeps it from being emptied, and the rebuild does not wait."""
    root = make_root(
        {f"e/{i:03}.md": f"---\nepisode_id: ep-{i}\n---\nword {i}\n" for i in range(300)}
    )
    db = root.parent / "wal.db"
    wal = Path(f"{db}-wal")
    index = Index(root, db)
    try:
        index.rebuild(workers=1)
        assert wal.stat().st_size < 64 << 10  # the digests' few pages, not the load
        reader = sqlite3.connect(db)
        try:
            reader.execute("BEGIN")
            old = reader.execute("SELECT count(*) FROM files").fetchone()[0]
            (root / "e/new.md").write_text("new\n")
            assert index.rebuild(workers=1) == 301
            assert reader.execute("SELECT count(*) FROM files").fetchone()[0] == old == 300
            reader.rollback()
            assert reader.execute("SELECT count(*) FROM files").fetchone()[0] == 301
        finally:
            reader.close()
    finally:
        index.close()


def test_the_load_leaves_one_segment_and_the_same_answers(
    make_root: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Tuning.fts_optimize``: the rebuild's text index is merged into one segment before its
    commit; every query answers as from the segments the load wrote (FTS5's own hash size
    here, so that it writes several)."""
    monkeypatch.setattr(bulk, "FTS_HASH", bulk.FTS_DEFAULT_HASH)
    words = " ".join(f"w{i}" for i in range(2000))
    root = make_root({f"e/{i:03}.md": f"{i} {words} x{i % 7}\n" for i in range(300)})

    def rebuilt(optimize: bool) -> tuple[int, list[list[tuple[int, float]]]]:
        tuning = Tuning(fts_optimize=optimize)
        with contextlib.closing(rebuilt_db(root, f"opt-{optimize}", tuning)) as conn:
            sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY 2, 1"
            ranked = [conn.execute(sql, (q,)).fetchall() for q in ("w7", "x3 OR w9", "w1*")]
            return conn.execute(SEGMENTS).fetchone()[0], ranked

    merged, written = rebuilt(True), rebuilt(False)
    assert merged[0] == 1 < written[0]
    assert merged[1] == written[1] and all(merged[1])


SEGMENTS = "SELECT count(DISTINCT segid) FROM fts_idx"  # the text index's segments


def rebuilt_db(root: Path, name: str, tuning: Tuning) -> sqlite3.Connection:
    """``root`` rebuilt in this process into ``<name>.db`` beside it, opened."""
    db = root.parent / f"{name}.db"
    index = Index(root, db, tuning=tuning)
    try:
        index.rebuild(workers=1)
    finally:
        index.close()
    return sqlite3.connect(db)
