"""The SQLite index: lifecycle, search, frontmatter queries, out-of-band edits, the CLI commands."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kiwifs.cli import cli
from kiwifs.errors import InvalidQuery, UsageError
from kiwifs.index import SCHEMA_VERSION
from kiwifs.indexreport import prefix_range
from kiwifs.knowledge import Knowledge
from kiwifs.memory import build_report
from kiwifs.scan import scan_facts
from kiwifs.statwalk import stat_walk
from kiwifs.storage import walk

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
def kb(make_root: Callable[..., Path]) -> Iterator[Knowledge]:
    with Knowledge(make_root(PAGES)) as k:
        yield k


def paths(results: object) -> list[str]:
    return [r.path for r in results.results]  # type: ignore[attr-defined]


# -- lifecycle --------------------------------------------------------------------------------


def test_index_lives_in_state_and_is_wal(kb: Knowledge) -> None:
    kb.search("fox")
    db = kb.root / INDEX
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


def test_corruption_found_while_running_resets(kb: Knowledge) -> None:
    kb.search("fox")
    index = kb.indexing._open()
    with index._lock:
        index._writer.execute("DROP TABLE cover_ids")
        index._writer.commit()
    report = kb.memory_report()
    assert report.to_json() == kb.memory_report(use_index=False).to_json()


def test_root_without_writable_state_falls_back(make_root: Callable[..., Path]) -> None:
    root = make_root(PAGES)
    (root / ".kiwi").mkdir()
    (root / ".kiwi/state").write_text("a file where the state folder should be")
    with Knowledge(root) as kb:
        assert not kb.indexing.in_root()
        assert kb.memory_report().to_json() == kb.memory_report(use_index=False).to_json()
        assert len(kb.search("fox").results) == 3
        assert kb.meta(["$.status=verified"]).count == 1


def test_reindex_counts_files_and_reports_progress(kb: Knowledge) -> None:
    seen: list[tuple[int, int]] = []
    assert kb.reindex(lambda done, total: seen.append((done, total))) == len(PAGES)
    assert seen[-1] == (len(PAGES), len(PAGES))


# -- search -----------------------------------------------------------------------------------


def test_search_ranks_and_marks(kb: Knowledge) -> None:
    results = kb.search("fox")
    assert sorted(paths(results)) == ["episodes/b.md", "notes/n1.md", "other/n4.md"]
    assert all(h.score > 0 for h in results.results)
    scores = [h.score for h in results.results]
    assert scores == sorted(scores, reverse=True)
    hit = next(h for h in results.results if h.path == "episodes/b.md")
    assert hit.snippet == "The quick brown <mark>fox</mark>"
    body = results.to_json()
    assert list(body) == ["query", "limit", "offset", "results"]
    assert body["results"][0]["matches"] == [{"line": 0, "text": body["results"][0]["snippet"]}]


def test_snippet_is_cut_at_160_bytes(kb: Knowledge) -> None:
    kb.write("long.md", "intro\n" + "word " * 100 + "needle\n" + "needle " + "x" * 300 + "\n")
    hit = kb.search("needle").results[0]
    assert hit.snippet.endswith("\u2026")
    assert hit.snippet.startswith("word word")
    assert len(hit.snippet.replace("\u2026", "").encode()) <= 160


def test_words_are_anded_and_hyphens_are_safe(kb: Knowledge) -> None:
    assert paths(kb.search("quick fox")) == ["episodes/b.md"]
    assert paths(kb.search("run-249")) == ["notes/n1.md"]


def test_rewritten_file_no_longer_matches_old_words(kb: Knowledge) -> None:
    kb.write("episodes/b.md", "---\nepisode_id: ep-2\n---\nnothing canine here\n")
    assert "episodes/b.md" not in paths(kb.search("fox"))
    assert paths(kb.search("canine")) == ["episodes/b.md"]


def test_out_of_band_rewrite_and_delete_are_seen(kb: Knowledge) -> None:
    assert len(kb.search("fox").results) == 3
    (kb.root / "other/n4.md").write_text("zebra only\n")
    (kb.root / "notes/n1.md").unlink()
    (kb.root / "new.md").write_text("a fox appears\n")
    assert sorted(paths(kb.search("fox"))) == ["episodes/b.md", "new.md"]
    assert paths(kb.search("zebra")) == ["other/n4.md"]


def test_deleted_file_no_longer_matches(kb: Knowledge) -> None:
    kb.delete("episodes/b.md")
    assert "episodes/b.md" not in paths(kb.search("fox"))
    assert "episodes/b.md" not in paths(kb.search("quick"))


def test_path_prefix_limit_offset(kb: Knowledge) -> None:
    assert paths(kb.search("fox", path_prefix="notes/")) == ["notes/n1.md"]
    assert paths(kb.search("fox", path_prefix="/other")) == ["other/n4.md"]
    everything = paths(kb.search("fox"))
    assert paths(kb.search("fox", limit=1, offset=1)) == everything[1:2]
    assert kb.search("fox", limit=1000).limit == 200


def test_search_query_errors(kb: Knowledge) -> None:
    with pytest.raises(InvalidQuery, match="invalid search query"):
        kb.search('"unterminated')
    with pytest.raises(InvalidQuery):
        kb.search("fox AND")
    with pytest.raises(UsageError):
        kb.search("fox", limit=-1)
    assert kb.search("  ").results == []
    assert kb.search("* ?").results == []


def test_plain_text_colons_are_retried_quoted(kb: Knowledge) -> None:
    assert paths(kb.search("episode_id: ep-2")) == ["episodes/b.md"]
    assert "notes/n1.md" in paths(kb.search("fo*"))
    assert paths(kb.search("quick OR canine")) == ["episodes/b.md"]


def test_unparseable_file_is_indexed_as_text_with_its_warning(kb: Knowledge) -> None:
    (kb.root / "bad.md").write_text("---\nkey: [unclosed\n---\nplatypus body\n")
    assert paths(kb.search("platypus")) == ["bad.md"]
    warnings = kb.memory_report().warnings
    assert any("invalid frontmatter in bad.md" in w for w in warnings)
    assert kb.meta(paths=["bad.md"]).results[0].frontmatter == {}


# -- meta -------------------------------------------------------------------------------------


def meta_paths(kb: Knowledge, *where: str, **kw: object) -> list[str]:
    return paths(kb.meta(list(where), **kw))  # type: ignore[arg-type]


def test_meta_numbers_compare_as_numbers(kb: Knowledge) -> None:
    assert meta_paths(kb, "$.confidence>0.8") == ["notes/n1.md"]
    assert meta_paths(kb, "$.confidence<0.8") == ["notes/n2.md"]
    assert meta_paths(kb, "$.n>=5") == ["notes/n1.md", "notes/n2.md"]
    assert meta_paths(kb, "$.n=5") == ["notes/n1.md", "notes/n3.md"]  # number or the text "5"
    assert meta_paths(kb, "$.n!=5") == ["notes/n2.md"]


def test_meta_booleans_and_null(kb: Knowledge) -> None:
    assert meta_paths(kb, "$.flag=true") == ["notes/n1.md"]
    assert meta_paths(kb, "$.flag=false") == ["notes/n2.md"]
    assert meta_paths(kb, "$.flag!=true") == ["notes/n2.md"]
    assert "notes/n1.md" in meta_paths(kb, "$.owner=null")
    assert "notes/n2.md" not in meta_paths(kb, "$.owner=null")
    assert meta_paths(kb, "$.owner!=null") == ["notes/n2.md"]


def test_meta_strings_like_and_lists(kb: Knowledge) -> None:
    assert meta_paths(kb, "$.status=verified") == ["notes/n1.md"]
    assert meta_paths(kb, "$.status like dra%") == ["notes/n2.md"]
    assert meta_paths(kb, "$.status NOT LIKE dra%") == ["notes/n1.md", "notes/n3.md"]
    assert meta_paths(kb, "$.derived-from[*].id=run-249") == ["notes/n1.md"]
    assert meta_paths(kb, "$.tags[*]=b") == ["notes/n3.md"]
    assert meta_paths(kb, "$.derived-from[*].actor=agent") == ["notes/n1.md"]


def test_meta_or_group_sort_order_paging(kb: Knowledge) -> None:
    result = kb.meta(or_=["$.status=verified", "$.status=draft"], sort="$.confidence")
    assert paths(result) == ["notes/n2.md", "notes/n1.md"]
    result = kb.meta(["$.n>0"], sort="$.n", order="DESC", limit=1, offset=1)
    assert paths(result) == ["notes/n1.md"]
    assert result.count == 2
    body = result.to_json()
    assert list(body) == ["count", "limit", "offset", "results"]
    assert body["results"][0]["frontmatter"]["derived-from"][0]["id"] == "run-249"
    assert paths(kb.meta(limit=2)) == ["episodes/a.md", "episodes/b.md"]
    assert paths(kb.meta(paths=["notes/n2.md", "/other/n4.md"])) == ["notes/n2.md", "other/n4.md"]


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
    kb: Knowledge, where: list[str], sort: str | None, message: str
) -> None:
    with pytest.raises(InvalidQuery, match=message):
        kb.meta(where, sort=sort)


def test_frontmatter_with_non_json_values_is_stored(kb: Knowledge) -> None:
    kb.write("odd.md", "---\nwhen: !!timestamp 2024-01-02\nset: !!set {a, b}\n1: one\n---\n")
    fm = kb.meta(paths=["odd.md"]).results[0].frontmatter
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
    with Knowledge(make_root(WALK_ORDER)) as kb:
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
        stored = kb.indexing.stored_facts_report(kb.episodes_prefix())
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


def test_stat_walk_finds_what_storage_walk_finds(make_root: Callable[..., Path]) -> None:
    root = make_root(
        {
            "a.md": "x",
            "b.MD": "not knowledge",
            ".hidden/c.md": "hidden",
            "d/.e.md": "hidden",
            "d/f.md": "x",
            "g.md/h.md": "folder named .md",
            "real/i.md": "x",
        }
    )
    os.symlink(root / "a.md", root / "link-in.md")
    os.symlink("/etc/hostname", root / "link-out.md")
    os.symlink(root / "missing.md", root / "link-broken.md")
    os.symlink(root / "real", root / "linked-dir")
    walked = stat_walk(root)
    expected = {e.rel.replace("/", "\0").encode(): e.error for e in walk(root)}
    assert set(walked.sigs) == set(expected)
    assert walked.errors == {k: v for k, v in expected.items() if v is not None}


# -- the watcher --------------------------------------------------------------------------------


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_watcher_sees_out_of_band_edits_and_stops(kb: Knowledge) -> None:
    kb.start_watching()
    assert wait_for(lambda: kb.indexing.watching)
    (kb.root / "episodes/c.md").write_text("---\nepisode_id: ep-9\n---\nwombat\n")
    assert wait_for(lambda: paths(kb.search("wombat")) == ["episodes/c.md"])
    assert wait_for(lambda: kb.memory_report().episodic_count == 3)
    (kb.root / "episodes/c.md").unlink()
    assert wait_for(lambda: kb.memory_report().episodic_count == 2)
    kb.stop_watching()
    assert not kb.indexing.watching


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
    assert out.exit_code == 2
    fast = runner.invoke(cli, ["memory", "report", "--json", "--root", str(root)])
    slow = runner.invoke(cli, ["memory", "report", "--json", "--no-index", "--root", str(root)])
    assert fast.output == slow.output


def test_settled_files_are_not_read_again(kb: Knowledge) -> None:
    """Once a file is older than the racy window, only a changed signature makes it re-read."""
    kb.reconcile()
    time.sleep(2.2)
    kb.reconcile()  # the racy rows get their signatures now
    assert kb.reconcile().updated == 0
    target = kb.root / "episodes/b.md"
    data = target.read_bytes()
    target.write_bytes(data.replace(b"quick", b"quack"))  # same size
    stats = kb.reconcile()
    assert (stats.updated, stats.removed) == (1, 0)
    assert paths(kb.search("quack")) == ["episodes/b.md"]


def test_watcher_refresh_skips_echoes_but_never_a_real_change(kb: Knowledge) -> None:
    """The watcher's cheap path trusts only content it indexed itself, and only while current."""
    kb.reindex()
    index = kb.indexing._open()
    path = kb.root / "episodes/a.md"
    a = "---\nepisode_id: ep-A\n---\nalpha\n"
    b = "---\nepisode_id: ep-B\n---\nbravo\n"
    path.write_text(a)
    assert index.refresh(["episodes/a.md"]) == 1
    assert index.refresh_if_changed(["episodes/a.md"]) == 0  # our own echo: skipped
    path.write_text(b)  # same size, out of band
    assert index.refresh_if_changed(["episodes/a.md"]) == 1
    assert [h.path for h in kb.search("bravo").results] == ["episodes/a.md"]
    path.write_text(a)
    index.reconcile()  # the index now holds A again via the reconcile, not via refresh
    path.write_text(b)
    index.reconcile()  # ... and B
    path.write_text(a)  # back to the bytes the echo memory once saw
    assert index.refresh_if_changed(["episodes/a.md"]) == 1
    assert [h.path for h in kb.search("alpha").results] == ["episodes/a.md"]
    assert kb.search("bravo").results == []
