"""The SQLite index: lifecycle, search, frontmatter queries, out-of-band edits, the CLI commands."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kiwifs.base.printed_json import RawJSON, dumps
from kiwifs.cli import cli
from kiwifs.errors import Busy, InvalidQuery, UsageError
from kiwifs.index import record
from kiwifs.index.report import prefix_range
from kiwifs.index.schema import SCHEMA_VERSION
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import build_report
from kiwifs.memory.scan import scan_facts
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from partskit import index_keeper
from waiting import wait_for

INDEX = Path(".kiwi/state/index.db")

PAGES = {
    "episodes/a.md": "---\nmemory_kind: episodic\nepisode_id: ep-1\n---\nalpha beta gamma\n",
    "episodes/b.md": "---\nepisode_id: ep-2\n---\nThe quick brown fox\n",
    "notes/n1.md": (
        "---\nstatus: verified\nconfidence: 0.9\nn: 5\nflag: true\nowner: null\n"
        "derived-from:\n  - type: run\n    id: run-249\n    actor: agent\n---\nfox hunting notes\n"
    ),
    "notes/n2.md": (
        "---\nstatus: draft\nconfidence: 0.3\nn: 12\nflag: false\nowner: ann\n"
        "derived-from:\n  - type: run\n    id: run-7\n---\nsomething else\n"
    ),
    "notes/n3.md": "---\nstatus: '5'\nn: '5'\ntags: [a, b]\n---\nplain\n",
    "other/n4.md": "no frontmatter, fox mentioned once\n",
}


@pytest.fixture
def pages_root(make_root: Callable[..., Path]) -> Path:
    """``PAGES`` in a plain folder (no git)."""
    return make_root(PAGES)


@pytest.fixture
def pages_keeper(pages_root: Path) -> IndexKeeper:
    """The index keeper ``pages_kb`` is opened with."""
    return index_keeper(pages_root)


@pytest.fixture
def pages_kb(pages_root: Path, pages_keeper: IndexKeeper) -> Iterator[Knowledge]:
    """The library on ``pages_root``."""
    with Knowledge(pages_root, index=pages_keeper) as k:
        yield k


def paths(results: object) -> list[str]:
    return [r.path for r in results.results]  # type: ignore[attr-defined]


# -- lifecycle --------------------------------------------------------------------------------


def test_index_lives_in_state_and_is_wal(pages_kb: Knowledge) -> None:
    pages_kb.search("fox")
    db = pages_kb.root / INDEX
    assert db.is_file()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_schema_version_mismatch_drops_and_rebuilds(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    with Knowledge(root) as kb:
        assert kb.search("fox").results
    conn = sqlite3.connect(root / INDEX)
    conn.execute("CREATE TABLE stale (x)")
    conn.execute("PRAGMA user_version = 999")
    conn.commit()
    conn.close()
    with Knowledge(root) as kb:
        assert sorted(paths(kb.search("fox"))) == ["episodes/b.md", "notes/n1.md", "other/n4.md"]
    conn = sqlite3.connect(root / INDEX)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'stale'").fetchall()
    conn.close()


def test_corrupt_index_file_is_rebuilt(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    (root / INDEX).parent.mkdir(parents=True)
    (root / INDEX).write_bytes(b"this is not a database" * 100)
    with Knowledge(root) as kb:
        assert len(kb.search("fox").results) == 3
        assert kb.memory_report().to_json() == kb.memory_report(use_index=False).to_json()


def test_index_deleted_between_runs_is_rebuilt(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    with Knowledge(root) as kb:
        kb.reindex()
    for suffix in ("", "-wal", "-shm"):
        Path(str(root / INDEX) + suffix).unlink(missing_ok=True)
    with Knowledge(root) as kb:
        assert len(kb.search("fox").results) == 3


def test_corruption_found_while_running_resets(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    pages_kb.search("fox")
    index = pages_keeper._open()
    with index._lock:
        index._writer.execute("DROP TABLE cover_ids")
        index._writer.commit()
    report = pages_kb.memory_report()
    assert report.to_json() == pages_kb.memory_report(use_index=False).to_json()


def test_a_busy_index_is_waited_for_then_reported_never_wiped(
    make_root: Callable[..., Path],
) -> None:
    """Another connection holding ``BEGIN IMMEDIATE`` makes calls fail with Busy, not a reset."""
    root = make_root(PAGES)
    with Knowledge(root) as kb:
        kb.reindex()
    db = root / INDEX
    inode = db.stat().st_ino
    (root / "notes/n5.md").write_text("a new fox, so the reconcile has to write\n")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    keeper = IndexKeeper(root, busy_timeout=0.2)
    try:
        for call in (
            keeper.reconcile,
            keeper.reindex,
            lambda: keeper.lookups.search("fox", 10, 0, None),
        ):
            with pytest.raises(Busy, match="index is busy"):
                call()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert db.stat().st_ino == inode
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == len(PAGES)
    conn.close()
    keeper.reconcile()  # once free, the same keeper carries on
    assert len(paths(keeper.lookups.search("fox", 10, 0, None))) == 4
    keeper.close()


def test_a_busy_empty_database_is_not_deleted_at_open(make_root: Callable[..., Path]) -> None:
    """Opening a database another process is still creating waits, then fails; it stays."""
    root = make_root(PAGES)
    db = root / INDEX
    db.parent.mkdir(parents=True)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE theirs (x)")
    keeper = IndexKeeper(root, busy_timeout=0.2)
    try:
        with pytest.raises(Busy):
            keeper.reconcile()
        holder.execute("COMMIT")
    finally:
        holder.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'theirs'").fetchone()
    conn.close()
    keeper.close()


def test_root_without_writable_state_falls_back(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    (root / ".kiwi").mkdir()
    (root / ".kiwi/state").write_text("a file where the state folder should be")
    keeper = index_keeper(root)
    with Knowledge(root, index=keeper) as kb:
        assert not keeper.in_root()
        assert kb.memory_report().to_json() == kb.memory_report(use_index=False).to_json()
        assert len(kb.search("fox").results) == 3
        assert kb.meta(["$.status=verified"]).count == 1


def test_reindex_counts_files_and_reports_progress(pages_kb: Knowledge) -> None:
    seen: list[tuple[int, int]] = []
    assert pages_kb.reindex(lambda done, total: seen.append((done, total))) == len(PAGES)
    assert seen[-1] == (len(PAGES), len(PAGES))


# -- search -----------------------------------------------------------------------------------


def test_search_ranks_and_marks(pages_kb: Knowledge) -> None:
    results = pages_kb.search("fox")
    assert sorted(paths(results)) == ["episodes/b.md", "notes/n1.md", "other/n4.md"]
    assert all(h.score > 0 for h in results.results)
    scores = [h.score for h in results.results]
    assert scores == sorted(scores, reverse=True)
    hit = next(h for h in results.results if h.path == "episodes/b.md")
    assert hit.snippet == "The quick brown <mark>fox</mark>"
    body = results.to_json()
    assert list(body) == ["query", "limit", "offset", "results"]
    assert body["results"][0]["matches"] == [{"line": 0, "text": body["results"][0]["snippet"]}]


def test_snippet_is_cut_at_160_bytes(pages_kb: Knowledge) -> None:
    pages_kb.write("long.md", "intro\n" + "word " * 100 + "needle\n" + "needle " + "x" * 300 + "\n")
    hit = pages_kb.search("needle").results[0]
    assert hit.snippet.endswith("\u2026")
    assert hit.snippet.startswith("word word")
    assert len(hit.snippet.replace("\u2026", "").encode()) <= 160


def test_plain_words_are_ored_and_hyphens_are_safe(pages_kb: Knowledge) -> None:
    """Plain text matches any of its words (KiwiFS ANDs them): the page holding both comes
    first; a joined word is its words plus the phrase, so the page holding it comes first."""
    found = paths(pages_kb.search("quick fox"))
    assert found[0] == "episodes/b.md"
    assert sorted(found) == ["episodes/b.md", "notes/n1.md", "other/n4.md"]
    found = paths(pages_kb.search("run-249"))
    assert found[0] == "notes/n1.md" and "notes/n2.md" in found  # n2 holds run-7


def test_rewritten_file_no_longer_matches_old_words(pages_kb: Knowledge) -> None:
    pages_kb.write("episodes/b.md", "---\nepisode_id: ep-2\n---\nnothing canine here\n")
    assert "episodes/b.md" not in paths(pages_kb.search("fox"))
    assert paths(pages_kb.search("canine")) == ["episodes/b.md"]


def test_out_of_band_rewrite_and_delete_are_seen(pages_kb: Knowledge) -> None:
    assert len(pages_kb.search("fox").results) == 3
    (pages_kb.root / "other/n4.md").write_text("zebra only\n")
    (pages_kb.root / "notes/n1.md").unlink()
    (pages_kb.root / "new.md").write_text("a fox appears\n")
    assert sorted(paths(pages_kb.search("fox"))) == ["episodes/b.md", "new.md"]
    assert paths(pages_kb.search("zebra")) == ["other/n4.md"]


def test_deleted_file_no_longer_matches(pages_kb: Knowledge) -> None:
    pages_kb.delete("episodes/b.md")
    assert "episodes/b.md" not in paths(pages_kb.search("fox"))
    assert "episodes/b.md" not in paths(pages_kb.search("quick"))


def test_path_prefix_limit_offset(pages_kb: Knowledge) -> None:
    assert paths(pages_kb.search("fox", path_prefix="notes/")) == ["notes/n1.md"]
    assert paths(pages_kb.search("fox", path_prefix="/other")) == ["other/n4.md"]
    everything = paths(pages_kb.search("fox"))
    assert paths(pages_kb.search("fox", limit=1, offset=1)) == everything[1:2]
    assert pages_kb.search("fox", limit=1000).limit == 200


def test_no_query_string_is_an_error(pages_kb: Knowledge) -> None:
    """Syntax FTS5 rejects is read as plain words (these were 400s); paging stays checked."""
    assert paths(pages_kb.search('"unterminated fox')) == paths(pages_kb.search("fox"))
    assert paths(pages_kb.search("fox AND")) == paths(pages_kb.search("fox"))
    with pytest.raises(UsageError):
        pages_kb.search("fox", limit=-1)
    assert pages_kb.search("  ").results == []
    assert pages_kb.search("* ?").results == []


def test_plain_text_colons_are_plain_words(pages_kb: Knowledge) -> None:
    assert paths(pages_kb.search("episode_id: ep-2"))[0] == "episodes/b.md"
    assert "notes/n1.md" in paths(pages_kb.search("fo*"))
    assert paths(pages_kb.search("quick OR canine")) == ["episodes/b.md"]


def test_unparseable_file_is_indexed_as_text_with_its_warning(pages_kb: Knowledge) -> None:
    (pages_kb.root / "bad.md").write_text("---\nkey: [unclosed\n---\nplatypus body\n")
    assert paths(pages_kb.search("platypus")) == ["bad.md"]
    warnings = pages_kb.memory_report().warnings
    assert any("invalid frontmatter in bad.md" in w for w in warnings)
    assert pages_kb.meta(paths=["bad.md"]).results[0].frontmatter == {}


# -- meta -------------------------------------------------------------------------------------


def meta_paths(kb: Knowledge, *where: str, **kw: object) -> list[str]:
    return paths(kb.meta(list(where), **kw))  # type: ignore[arg-type]


def test_meta_numbers_compare_as_numbers(pages_kb: Knowledge) -> None:
    assert meta_paths(pages_kb, "$.confidence>0.8") == ["notes/n1.md"]
    assert meta_paths(pages_kb, "$.confidence<0.8") == ["notes/n2.md"]
    assert meta_paths(pages_kb, "$.n>=5") == ["notes/n1.md", "notes/n2.md"]
    assert meta_paths(pages_kb, "$.n=5") == ["notes/n1.md", "notes/n3.md"]  # number or the text "5"
    assert meta_paths(pages_kb, "$.n!=5") == ["notes/n2.md"]


def test_meta_booleans_and_null(pages_kb: Knowledge) -> None:
    assert meta_paths(pages_kb, "$.flag=true") == ["notes/n1.md"]
    assert meta_paths(pages_kb, "$.flag=false") == ["notes/n2.md"]
    assert meta_paths(pages_kb, "$.flag!=true") == ["notes/n2.md"]
    assert "notes/n1.md" in meta_paths(pages_kb, "$.owner=null")
    assert "notes/n2.md" not in meta_paths(pages_kb, "$.owner=null")
    assert meta_paths(pages_kb, "$.owner!=null") == ["notes/n2.md"]


def test_meta_strings_like_and_lists(pages_kb: Knowledge) -> None:
    assert meta_paths(pages_kb, "$.status=verified") == ["notes/n1.md"]
    assert meta_paths(pages_kb, "$.status like dra%") == ["notes/n2.md"]
    assert meta_paths(pages_kb, "$.status NOT LIKE dra%") == ["notes/n1.md", "notes/n3.md"]
    assert meta_paths(pages_kb, "$.derived-from[*].id=run-249") == ["notes/n1.md"]
    assert meta_paths(pages_kb, "$.tags[*]=b") == ["notes/n3.md"]
    assert meta_paths(pages_kb, "$.derived-from[*].actor=agent") == ["notes/n1.md"]


def test_meta_or_group_sort_order_paging(pages_kb: Knowledge) -> None:
    result = pages_kb.meta(or_=["$.status=verified", "$.status=draft"], sort="$.confidence")
    assert paths(result) == ["notes/n2.md", "notes/n1.md"]
    result = pages_kb.meta(["$.n>0"], sort="$.n", order="DESC", limit=1, offset=1)
    assert paths(result) == ["notes/n1.md"]
    assert result.count == 2
    body = result.to_json()
    assert list(body) == ["count", "limit", "offset", "results"]
    assert body["results"][0]["frontmatter"]["derived-from"][0]["id"] == "run-249"
    assert paths(pages_kb.meta(limit=2)) == ["episodes/a.md", "episodes/b.md"]
    assert paths(pages_kb.meta(paths=["notes/n2.md", "/other/n4.md"])) == [
        "notes/n2.md",
        "other/n4.md",
    ]


def test_meta_counts_every_match_on_every_page(pages_kb: Knowledge) -> None:
    """The count comes with the page in one pass; a page past the end, or of no rows, still
    says how many match."""
    everything = pages_kb.meta(limit=200)
    assert everything.count == len(everything.results) >= 4
    for limit, offset in [(1, 0), (2, 1), (0, 0), (5, 100), (0, 3)]:
        page = pages_kb.meta(limit=limit, offset=offset)
        assert page.count == everything.count, (limit, offset)
        assert paths(page) == paths(everything)[offset : offset + limit]
    assert pages_kb.meta(["$.status=nothing-has-this"], offset=2).count == 0


def test_long_frontmatter_is_stored_compressed_and_reads_back(pages_kb: Knowledge) -> None:
    """A long frontmatter is kept compressed in the index; meta, its filters and its sort
    read it as the file's frontmatter."""
    tags = [f"tag-{i}" for i in range(40)]
    head = "---\ntitle: Long\nrank: 7\ntags: [" + ", ".join(tags) + "]\n---\nbody\n"
    pages_kb.write("notes/long.md", head)
    pages_kb.write("notes/short.md", "---\nrank: 3\n---\nbody\n")
    (hit,) = pages_kb.meta(["$.tags[*]=tag-39"]).results
    assert hit.path == "notes/long.md"
    assert hit.frontmatter == {"title": "Long", "rank": 7, "tags": tags}
    assert paths(pages_kb.meta(["$.rank>0"], sort="$.rank")) == ["notes/short.md", "notes/long.md"]
    conn = sqlite3.connect(pages_kb.root / ".kiwi" / "state" / "index.db")
    try:
        query = "SELECT path, frontmatter FROM files WHERE path LIKE 'notes/%o%.md'"
        stored = dict(conn.execute(query).fetchall())
    finally:
        conn.close()
    assert isinstance(stored["notes/long.md"], bytes)
    assert len(stored["notes/long.md"]) < len(json.dumps(hit.frontmatter)) / 2
    assert stored["notes/short.md"] == '{"rank":3}'  # short JSON stays text


@pytest.mark.parametrize(
    ("where", "sort", "message"),
    [
        (["status=verified"], None, r"filter\[0\]: invalid field"),
        (["$.ok=1", "$.a;drop=1"], None, r"filter\[1\]: invalid field"),
        (["$.status"], None, "no operator"),
        ([], "$.tags[*]", "invalid sort field"),
        ([], "status", "invalid sort field"),
        (["$.n<null"], None, "null"),
    ],
)
def test_meta_rejects_bad_filters(
    pages_kb: Knowledge, where: list[str], sort: str | None, message: str
) -> None:
    with pytest.raises(InvalidQuery, match=message):
        pages_kb.meta(where, sort=sort)


def test_frontmatter_with_non_json_values_is_stored(pages_kb: Knowledge) -> None:
    pages_kb.write("odd.md", "---\nwhen: !!timestamp 2024-01-02\nset: !!set {a, b}\n1: one\n---\n")
    fm = pages_kb.meta(paths=["odd.md"]).results[0].frontmatter
    assert fm == {"when": "2024-01-02", "set": ["a", "b"], "1": "one"}


# -- memory report from the index ---------------------------------------------------------------

WALK_ORDER = {
    "episodes/b.md": "---\nepisode_id: e4\n---\n",
    "episodes/a.md": "---\nepisode_id: e3\n---\n",
    "episodes/a/y.md": "---\nepisode_id: e2\n---\n",
    "episodes/A/z.md": "---\nepisode_id: e1\n---\n",
    "episodes/\u00e9.md": "---\nepisode_id: e5\n---\n",
    "inbox/x.md": "---\nmemory_kind: episodic\n---\n",
    "concepts/c.md": (
        "---\nmemory_kind: semantic\nmerged-from:\n  - type: run\n    id: e3\n"
        "  - type: note\n    path: /episodes/a/y.md\n  - type: run\n    path: ../x.md\n"
        "  - null\n---\n"
    ),
    "concepts/d.md": "---\nmerged-from: {type: run, id: e4}\n---\n",
}


def test_report_is_in_walk_order_and_equals_the_scan(make_root: Callable[..., Path]) -> None:
    keeper = index_keeper(root := make_root(WALK_ORDER))
    with Knowledge(root, index=keeper) as kb:
        kb.reindex()
        report = kb.memory_report()
        assert [e.path for e in report.episodic_files] == [
            "episodes/A/z.md",
            "episodes/a/y.md",
            "episodes/a.md",
            "episodes/b.md",
            "episodes/\u00e9.md",
            "inbox/x.md",
        ]
        for prefix in (None, "episodes/a", "inbox", "nothing/"):
            for limit, offset in ((None, 0), (0, 0), (2, 1), (10, 5)):
                fast = kb.memory_report(prefix, limit, offset)
                slow = kb.memory_report(prefix, limit, offset, use_index=False)
                assert fast.to_json() == slow.to_json()
        stored = keeper.answers.stored_facts_report(kb.episodes_prefix())
        assert stored.to_json() == build_report(scan_facts(kb.root), "episodes/").to_json()


def test_report_scans_until_an_index_exists(make_root: Callable[..., Path]) -> None:
    """A one-shot report on a fresh root scans frontmatter instead of building the full index."""
    with Knowledge(make_root(WALK_ORDER)) as kb:
        scanned = kb.memory_report()
        assert not (kb.root / INDEX).exists()
        kb.search("anything")  # search needs the index and builds it
        assert (kb.root / INDEX).is_file()
        (kb.root / "episodes/new.md").write_text("---\nepisode_id: n1\n---\n")
        from_index = kb.memory_report()
        assert from_index.episodic_count == scanned.episodic_count + 1
        assert from_index.to_json() == kb.memory_report(use_index=False).to_json()


def test_prefix_range_bounds() -> None:
    lo, hi = prefix_range("episodes/")
    assert lo <= b"episodes\0a.md" < hi
    assert not lo <= b"episodes.md" < hi
    assert not lo <= b"episodesx\0a.md" < hi


# -- folder digests: a reconcile compares rows only where the files moved -----------------------


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust every file's timestamps at once (no 2-second racy window to wait out)."""
    monkeypatch.setattr(record, "RACY_NS", 0)


def digests(kb: Knowledge) -> dict[bytes, bytes | None]:
    with sqlite3.connect(kb.root / INDEX) as conn:
        return dict(conn.execute("SELECT key, digest FROM dirs"))


def moved_folders(keeper: IndexKeeper) -> list[bytes]:
    return keeper._open()._walk_after(monitored=False)[0].result().changed


@pytest.mark.usefixtures("settled")
def test_reconcile_compares_only_the_folders_that_moved(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    pages_kb.reconcile()
    stored = digests(pages_kb)
    assert set(stored) == {b"", b"episodes", b"notes", b"other"}
    assert all(d is not None for d in stored.values())
    assert moved_folders(pages_keeper) == []
    (pages_kb.root / "notes/n2.md").write_text("---\nstatus: done\n---\nzebra\n")
    assert moved_folders(pages_keeper) == [b"notes"]
    assert pages_kb.reconcile().updated == 1
    assert paths(pages_kb.search("zebra")) == ["notes/n2.md"]
    assert moved_folders(pages_keeper) == []


def test_a_reconcile_counts_the_changes_no_event_can_still_be_on_its_way_for(
    pages_kb: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``missed`` (what tells the watcher its events are lost) counts old-enough changes and
    removals, not a file written a moment ago, nor a racy row read again unchanged."""
    pages_kb.reconcile()
    (pages_kb.root / "notes/fresh.md").write_text("just written\n")
    assert pages_kb.reconcile().missed == 0  # its event may still be coming
    assert paths(pages_kb.search("written")) == ["notes/fresh.md"]
    assert pages_kb.reconcile().missed == 0  # its racy row read again: the same content
    monkeypatch.setattr(record, "RACY_NS", 0)  # every stat old enough to trust from here
    assert pages_kb.reconcile().missed == 0
    (pages_kb.root / "notes/n2.md").write_text("---\nstatus: done\n---\nzebra\n")
    (pages_kb.root / "other/n4.md").unlink()
    stats = pages_kb.reconcile()
    assert (stats.updated, stats.removed, stats.missed) == (1, 1, 2)
    assert pages_kb.reconcile().missed == 0


def test_a_racy_row_read_again_with_the_same_bytes_gets_only_its_stat(
    pages_kb: Knowledge, pages_keeper: IndexKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row stored within the racy window has no signature, and the next reconcile reads its
    file again: with the same bytes, only the stat is stored (one UPDATE), not the whole row
    (its words, its text, its cover rows) as on the plain path (``Tuning.stat_only`` off)."""
    monkeypatch.setattr(record, "RACY_NS", 0)
    pages_kb.reconcile()
    index = pages_keeper._open()

    def sig(rel: str) -> object:
        with index.reader() as conn:
            return conn.execute("SELECT sig FROM files WHERE path = ?", (rel,)).fetchone()[0]

    def changes_of_the_second_reconcile(name: str) -> int:
        (pages_kb.root / f"notes/{name}.md").write_text(f"---\nstatus: new\n---\n{name} words\n")
        monkeypatch.setattr(record, "RACY_NS", 1 << 62)  # every stat too recent to trust
        pages_kb.reconcile()
        assert sig(f"notes/{name}.md") is None
        pages_kb.reconcile()  # read again while still too recent: no signature yet
        assert sig(f"notes/{name}.md") is None
        monkeypatch.setattr(record, "RACY_NS", 0)
        before = index._writer.total_changes
        assert pages_kb.reconcile().updated == 1
        assert sig(f"notes/{name}.md") is not None
        assert paths(pages_kb.search(f"{name}")) == [f"notes/{name}.md"]
        return int(index._writer.total_changes - before)

    stat_only = changes_of_the_second_reconcile("first")
    index.tuning = index.tuning.but(stat_only=False)  # the plain path from here on
    whole_row = changes_of_the_second_reconcile("second")
    assert stat_only + 3 <= whole_row


@pytest.mark.usefixtures("settled")
def test_same_size_edit_with_its_old_mtime_is_seen(pages_kb: Knowledge) -> None:
    pages_kb.reconcile()
    page = pages_kb.root / "episodes/b.md"
    before = page.stat()
    time.sleep(0.05)  # past the kernel's timestamp tick, so the rewrite gets a new ctime
    page.write_bytes(page.read_bytes().replace(b"ep-2", b"ep-9"))
    os.utime(page, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert page.stat().st_size == before.st_size
    assert pages_kb.reconcile().updated == 1
    ids = [f.episode_id for f in pages_kb.memory_report().episodic_files]
    assert ids == ["ep-1", "ep-9"]


@pytest.mark.usefixtures("settled")
def test_a_write_forgets_the_digest_of_its_folder(pages_kb: Knowledge) -> None:
    pages_kb.reconcile()
    pages_kb.write("notes/n5.md", "new\n")
    stored = digests(pages_kb)
    assert stored[b"notes"] is None and stored[b"episodes"] is not None
    pages_kb.reconcile()
    assert digests(pages_kb)[b"notes"] is not None


def test_a_folder_with_a_file_too_recent_to_trust_keeps_no_digest(pages_kb: Knowledge) -> None:
    pages_kb.reconcile()
    assert digests(pages_kb)[b"notes"] is None  # the fixture's files were written just now
    assert pages_kb.reconcile().updated > 0  # so they are read again until they settle


@pytest.mark.usefixtures("settled")
def test_a_vanished_folder_loses_its_rows_and_its_digest(pages_kb: Knowledge) -> None:
    pages_kb.reconcile()
    shutil.rmtree(pages_kb.root / "notes")
    stats = pages_kb.reconcile()
    assert (stats.updated, stats.removed) == (0, 3)
    assert b"notes" not in digests(pages_kb)
    assert set(paths(pages_kb.search("fox"))) == {"other/n4.md", "episodes/b.md"}


@pytest.mark.parametrize("joined_in_sql", [True, False])
def test_printed_report_from_stored_entries_equals_the_scan(
    make_root: Callable[..., Path], joined_in_sql: bool
) -> None:
    """Entry text is stored per file: odd ids, non-UTF-8 names and kinds print as the scan does,
    whether SQLite joins the whole lists (``Tuning.report_in_sql``) or Python joins one text per
    row."""
    root = make_root(
        {
            "episodes/a.md": (
                '---\nepisode_id: "q\\"uote \\t tab \\u2028 \\u00e9 \\U0001F600"\n---\n'
            ),
            "episodes/b.md": "---\nmemory_kind: Episodic\nepisode_id: 42\n---\n",
            "episodes/c.md": "no frontmatter\n",
            "notes/d.md": "---\nmemory_kind: episodic\nid: x\n---\n",
            "notes/m.md": "---\nmerged-from: [{type: run, id: '42'}]\n---\n",
        }
    )
    os.close(os.open(os.fsencode(root / "episodes") + b"/\xff.md", os.O_CREAT | os.O_WRONLY))
    with Knowledge(root, tuning=Tuning(report_in_sql=joined_in_sql)) as kb:
        kb.reindex()
        cases = [(None, None, 0), (None, 2, 1), ("notes", None, 0), (None, None, 2)]
        for prefix, limit, offset in cases:
            printed = dumps(kb.memory_report_document(prefix, limit, offset).value, "surrogatepass")
            scan = kb.memory_report(prefix, limit, offset, use_index=False).to_json()
            assert printed.decode("utf-8", "surrogatepass") == json.dumps(
                scan, indent=2, ensure_ascii=False
            )
        document = kb.memory_report_document()
        assert document.unmerged_count == 4
        kb.write("episodes/c.md", "---\nepisode_id: c1\n---\n")
        kb.write("notes/m2.md", "---\nmerged-from: [{type: run, id: c1}]\n---\n")
        for name in ("episodes/a.md", "episodes/b.md", "notes/d.md"):
            kb.write(name, "---\nmemory_kind: semantic\n---\n")
        os.unlink(os.fsencode(root / "episodes") + b"/\xff.md")
        value = kb.memory_report_document().value  # some files, no unmerged episode
        assert dumps(value).decode() == json.dumps(
            kb.memory_report(use_index=False).to_json(), indent=2, ensure_ascii=False
        )
        assert value["unmerged"] == RawJSON("[]")
        value = kb.memory_report_document("elsewhere/").value  # no episode at all
        assert value["episodic_files"] == value["unmerged"] == RawJSON("[]")


FORKED_REPORT = r"""
import json, os, sys
from kiwifs.index import walk
from kiwifs.knowledge import Knowledge
from kiwifs.base.printed_json import dumps

walk.PARALLEL_THRESHOLD = 0
walk.worker_count = lambda cap=None: 2  # whatever this machine's CPUs
root = sys.argv[1]
with Knowledge.open(root) as kb:
    kb.reindex()
    del forks[:]
    steady = dumps(kb.memory_report_document().value).decode()
    steady_forks = len(forks)
    with open(os.path.join(root, "concepts/c.md"), "w") as fh:
        fh.write("---\nmerged-from:\n  - {type: run, id: e-3}\n---\n")
    with open(os.path.join(root, "episodes/new.md"), "w") as fh:
        fh.write("---\nepisode_id: e-9\n---\n")
    moved = dumps(kb.memory_report_document().value).decode()
    scan = json.dumps(kb.memory_report(use_index=False).to_json(), indent=2, ensure_ascii=False)
print(json.dumps({"steady": steady, "moved": moved, "scan": scan, "forks": len(forks),
                  "steady_forks": steady_forks}))
"""


def test_an_answer_found_while_the_workers_walk_is_redone_if_the_walk_moved(
    make_root: Callable[..., Path], run_counting_forks: Callable[..., Any]
) -> None:
    files = {f"episodes/e{i}.md": f"---\nepisode_id: e-{i}\n---\n" for i in range(6)}
    root = make_root({**files, "concepts/c.md": "no frontmatter\n"})
    result = run_counting_forks(FORKED_REPORT, str(root))
    assert result["steady_forks"] == 2 and result["forks"] == 4
    assert '"e-3"' in result["steady"].split('"unmerged"')[1]
    assert result["moved"] == result["scan"]
    unmerged = json.loads(result["moved"])["unmerged"]
    assert [f["episode_id"] for f in unmerged] == ["e-0", "e-1", "e-2", "e-4", "e-5", "e-9"]


# -- the watcher --------------------------------------------------------------------------------


def test_watcher_sees_out_of_band_edits_and_stops(pages_kb: Knowledge) -> None:
    Serving(pages_kb).start_watching()
    assert wait_for(pages_kb.ready)
    (pages_kb.root / "episodes/c.md").write_text("---\nepisode_id: ep-9\n---\nwombat\n")
    assert wait_for(lambda: paths(pages_kb.search("wombat")) == ["episodes/c.md"])
    assert wait_for(lambda: pages_kb.memory_report().episodic_count == 3)
    (pages_kb.root / "episodes/c.md").unlink()
    assert wait_for(lambda: pages_kb.memory_report().episodic_count == 2)
    Serving(pages_kb).stop_watching()
    assert not pages_kb.ready()


# -- CLI ----------------------------------------------------------------------------------------


def test_cli_search_reindex_and_no_index(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    runner = CliRunner()
    out = runner.invoke(cli, ["reindex", "--root", str(root)])
    assert out.exit_code == 0, out.output
    assert f"indexed {len(PAGES)} files" in out.output
    out = runner.invoke(cli, ["search", "fox", "--root", str(root), "--path-prefix", "notes"])
    assert out.exit_code == 0
    assert "1. notes/n1.md (score:" in out.output
    out = runner.invoke(cli, ["search", "fox", "--root", str(root), "--json", "--limit", "1"])
    assert '"limit": 1' in out.output
    out = runner.invoke(cli, ["search", '"open', "--root", str(root)])
    assert out.exit_code == 0, out.output  # an unbalanced quote is read as plain words
    fast = runner.invoke(cli, ["memory", "report", "--json", "--root", str(root)])
    slow = runner.invoke(cli, ["memory", "report", "--json", "--no-index", "--root", str(root)])
    assert fast.output == slow.output


def racy_rows(kb: Knowledge) -> int:
    with sqlite3.connect(kb.root / INDEX) as conn:
        return int(conn.execute("SELECT count(*) FROM files WHERE sig IS NULL").fetchone()[0])


def test_settled_files_are_not_read_again(
    pages_kb: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a file is older than the racy window, only a changed signature makes it re-read."""
    pages_kb.reconcile()
    assert racy_rows(pages_kb) > 0  # the fixture's files were written just now
    # a 0.1 s window, waited out for real (the 2 s one would cost the test 2 s)
    monkeypatch.setattr(record, "RACY_NS", 100_000_000)
    time.sleep(0.15)
    pages_kb.reconcile()  # the racy rows get their signatures now
    assert racy_rows(pages_kb) == 0
    assert pages_kb.reconcile().updated == 0
    target = pages_kb.root / "episodes/b.md"
    data = target.read_bytes()
    target.write_bytes(data.replace(b"quick", b"quack"))  # same size
    stats = pages_kb.reconcile()
    assert (stats.updated, stats.removed) == (1, 0)
    assert paths(pages_kb.search("quack")) == ["episodes/b.md"]


def test_watcher_refresh_skips_echoes_but_never_a_real_change(
    pages_kb: Knowledge, pages_keeper: IndexKeeper
) -> None:
    """The watcher's cheap path trusts only content it indexed itself, and only while current."""
    pages_kb.reindex()
    index = pages_keeper._open()
    path = pages_kb.root / "episodes/a.md"
    a = "---\nepisode_id: ep-A\n---\nalpha\n"
    b = "---\nepisode_id: ep-B\n---\nbravo\n"
    path.write_text(a)
    assert index.refresh(["episodes/a.md"]) == 1
    assert index.refresh_if_changed(["episodes/a.md"]) == 0  # our own echo: skipped
    path.write_text(b)  # same size, out of band
    assert index.refresh_if_changed(["episodes/a.md"]) == 1
    assert [h.path for h in pages_kb.search("bravo").results] == ["episodes/a.md"]
    path.write_text(a)
    index.reconcile()  # the index now holds A again via the reconcile, not via refresh
    path.write_text(b)
    index.reconcile()  # ... and B
    path.write_text(a)  # back to the bytes the echo memory once saw
    assert index.refresh_if_changed(["episodes/a.md"]) == 1
    assert [h.path for h in pages_kb.search("alpha").results] == ["episodes/a.md"]
    assert pages_kb.search("bravo").results == []


@given(st.lists(st.text(max_size=12), max_size=4))
def test_stored_keys_read_back_what_a_row_stored(keys: list[str]) -> None:
    """A row's merged-from keys read back as the JSON it was written with parses: the unparsed
    ``[]`` of a row citing nothing included, and any other spelling of an empty list."""
    stored = json.dumps(keys)  # as index/rows.py writes the row
    assert record.stored_keys(stored) == tuple(json.loads(stored)) == tuple(keys)
    for empty in ("[]", "[ ]", " []"):
        assert record.stored_keys(empty) == tuple(json.loads(empty)) == ()
