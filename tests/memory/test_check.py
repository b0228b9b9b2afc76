"""``memory check`` and ``memory lineage`` in the core: every kind of problem on a real root, the
oldest unmerged episode and where its age comes from, coverage, and the index answering exactly
as a plain scan of the files does."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from filetree import write_files
from gitrepo import git
from kiwifs.errors import NotFound, UsageError
from kiwifs.index.record import created_time
from kiwifs.knowledge import Knowledge
from kiwifs.memory.check import MemoryCheck, top_folder


def fm(*lines: str, body: str = "text\n") -> str:
    return "\n".join(["---", *lines, "---", body])


FILES = {
    "episodes/2026/a.md": fm("episode_id: a", 'created: "2026-03-01T10:00:00Z"'),
    "episodes/2026/b.md": fm("episode_id: b", 'created: "2026-03-01T23:30:00-02:00"'),
    "episodes/2026/c.md": fm("episode_id: dup", "created: 2026-03-02"),
    "episodes/2025/d.md": fm("episode_id: dup", 'created: "2025-12-31T08:00:00Z"'),
    "episodes/loose.md": fm("episode_id: loose"),
    "inbox/note.md": fm("memory_kind: episodic", "id: inboxed", 'created: "2026-01-05T00:00:00Z"'),
    "concepts/one.md": fm(
        "memory_kind: semantic",
        "merged-from:",
        "  - {type: episode, id: a, note: first}",
        "  - {type: run, path: ./episodes/2026/b.md}",
        "  - {type: episode, id: zz}",
        "  - {type: episode, path: episodes/gone.md}",
        "  - {id: a}",
        "  - {type: note, id: a}",
        "  - ~",
    ),
    "concepts/two.md": fm(
        "memory_kind: semantic",
        "merged-from:",
        "  - {type: episode, path: episodes/2026/a.md, date: 2026-04-01}",
        "  - {type: session, id: inboxed}",
    ),
    "guides/readme.md": "# plain page\n",
}


@pytest.fixture
def files_root(root: Path) -> Path:
    """The blank root with ``FILES``, committed on 2026-02-01."""
    write_files(root, FILES)
    git(root, "add", "-A")
    stamp = "2026-02-01T00:00:00Z"
    env = {**os.environ, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "fixture"], env=env, check=True)
    return root


def both(kb: Knowledge, **kwargs: Any) -> MemoryCheck:
    """The check from the index, after proving it equal to the plain scan."""
    indexed = kb.memory_check(**kwargs)
    scanned = kb.memory_check(use_index=False, **kwargs)
    assert dataclasses.replace(indexed, now=0) == dataclasses.replace(scanned, now=0)
    return indexed


def test_every_problem_is_found(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        kb.reindex()
        data = both(kb).to_json()
    assert data["episodes_prefix"] == "episodes/"
    assert (data["episodic_count"], data["unmerged_count"]) == (6, 3)
    assert data["problems"] == len(data["dangling"]) + 1 + 1
    assert data["dangling"] == [
        {
            "page": "concepts/one.md",
            "entry": {"type": "episode", "id": "zz"},
            "why": ("no episode has id 'zz'"),
        },
        {
            "page": "concepts/one.md",
            "entry": {"type": "episode", "path": "episodes/gone.md"},
            "why": "no file at episodes/gone.md",
        },
        {
            "page": "concepts/one.md",
            "entry": {"id": "a"},
            "why": "the entry has no type, so it cites nothing",
        },
        {
            "page": "concepts/one.md",
            "entry": {"type": "note", "id": "a"},
            "why": "type 'note' does not cite episodes by id (only by path)",
        },
    ]
    assert data["duplicate_ids"] == [
        {"id": "dup", "paths": ["episodes/2025/d.md", "episodes/2026/c.md"]}
    ]
    assert data["double_merges"] == [
        {
            "path": "episodes/2026/a.md",
            "episode_id": "a",
            "pages": ["concepts/one.md", "concepts/two.md"],
        }
    ]
    assert data["coverage"] == {
        "folders": [
            {"folder": "episodes/", "episodic": 1, "merged": 0, "unmerged": 1},
            {"folder": "episodes/2025/", "episodic": 1, "merged": 0, "unmerged": 1},
            {"folder": "episodes/2026/", "episodic": 3, "merged": 2, "unmerged": 1},
            {"folder": "inbox/", "episodic": 1, "merged": 1, "unmerged": 0},
        ],
        "days": [
            {"day": "2025-12-31", "episodic": 1, "merged": 0, "unmerged": 1},
            {"day": "2026-01-05", "episodic": 1, "merged": 1, "unmerged": 0},
            {"day": "2026-03-01", "episodic": 1, "merged": 1, "unmerged": 0},
            {"day": "2026-03-02", "episodic": 2, "merged": 1, "unmerged": 1},
            {"day": None, "episodic": 1, "merged": 0, "unmerged": 1},
        ],
    }


def test_unmerged_agrees_with_the_report(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        report = kb.memory_report()
        check = both(kb)
    assert check.unmerged_count == report.unmerged_count
    assert check.episodic_count == report.episodic_count


def test_the_oldest_unmerged_episode_and_where_its_age_comes_from(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        oldest = both(kb).oldest
        assert oldest is not None
        assert (oldest.path, oldest.age_from) == ("episodes/2025/d.md", "created")
        assert oldest.to_json(oldest.since + 90061)["age_seconds"] == 90061
        assert oldest.to_json(0)["since"] == "2025-12-31T08:00:00Z"
        # without created, the first commit that added the file dates it
        for rel in ("episodes/2025/d.md", "episodes/2026/c.md"):
            (files_root / rel).write_text(fm("episode_id: dup"))
        oldest = both(kb).oldest
        assert oldest is not None and oldest.age_from == "first commit"
        assert oldest.since == created_time("2026-02-01T00:00:00Z")
        assert oldest.path == "episodes/2025/d.md"  # ties: walk order
        # a file git never saw: its modification time
        (files_root / "episodes/0-new.md").write_text(fm("episode_id: new"))
        os.utime(files_root / "episodes/0-new.md", (1_000_000_000, 1_000_000_000))
        oldest = both(kb).oldest
        assert oldest is not None
        assert (oldest.path, oldest.age_from, oldest.since) == (
            "episodes/0-new.md",
            "modified",
            1_000_000_000.0,
        )


def test_a_clean_root_has_no_problems_and_no_oldest(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    Knowledge.init(folder, "blank")
    with Knowledge.open(folder) as kb:
        data = both(kb).to_json()
    assert data == {
        "episodes_prefix": "episodes/",
        "episodic_count": 0,
        "unmerged_count": 0,
        "problems": 0,
        "dangling": [],
        "duplicate_ids": [],
        "double_merges": [],
        "oldest_unmerged": None,
        "coverage": {"folders": [], "days": []},
    }


def test_index_and_scan_agree_after_edits_behind_kiwifs_back(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        kb.reindex()
        (files_root / "concepts/two.md").unlink()
        (files_root / "episodes/2026/e.md").write_text(fm("episode_id: zz"))
        (files_root / "concepts/three.md").write_text(
            fm("merged-from:", "  - {type: episode, id: loose}", "  - {type: ingest, id: loose}")
        )
        check = both(kb)
    assert check.dangling[0].why == "no file at episodes/gone.md"  # zz exists now
    assert check.double_merges == ()
    assert [f.key for f in check.folders] == [
        "episodes/",
        "episodes/2025/",
        "episodes/2026/",
        "inbox/",
    ]


def test_prefix(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        check = both(kb, prefix="inbox")
    assert check.prefix == "inbox/"
    assert [f.key for f in check.folders] == ["inbox/"]  # the others are episodic by prefix


def test_pure_helpers() -> None:
    assert created_time("2026-03-01T23:30:00-02:00") == created_time("2026-03-02T01:30:00Z")
    assert created_time("2026-03-02") == created_time("2026-03-02T00:00:00+00:00")
    assert [created_time(v) for v in ("soon", 42, None, True, ["x"])] == [None] * 5
    assert top_folder("episodes/a/b/c.md", "episodes/") == "episodes/a/"
    assert top_folder("episodes/c.md", "episodes/") == "episodes/"
    assert top_folder("inbox/x/c.md", "episodes/") == "inbox/"
    assert top_folder("c.md", "episodes/") == ""


# -- lineage --------------------------------------------------------------------------------------


def test_lineage_of_an_episode_by_path_or_id(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        by_path = kb.lineage(path_or_id="episodes/2026/a.md").to_json()
        by_id = kb.lineage(path_or_id="a").to_json()
    assert by_path == by_id
    assert by_path["episodic"] is True and by_path["episode_id"] == "a"
    assert by_path["merged_by"] == [
        {"page": "concepts/one.md", "by": "id", "type": "episode", "id": "a", "note": "first"},
        {
            "page": "concepts/two.md",
            "by": "path",
            "type": "episode",
            "path": "episodes/2026/a.md",
            "date": "2026-04-01",
        },
    ]


def test_lineage_of_a_page_flags_dangling_entries(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        data = kb.lineage(path_or_id="concepts/one.md").to_json()
    assert data["episodic"] is False and data["merged_by"] == []
    assert [(e.get("targets"), e.get("why")) for e in data["merged_from"]] == [
        (["episodes/2026/a.md"], None),
        (["episodes/2026/b.md"], None),
        ([], "no episode has id 'zz'"),
        ([], "no file at episodes/gone.md"),
        ([], "the entry has no type, so it cites nothing"),
        ([], "type 'note' does not cite episodes by id (only by path)"),
    ]


def test_lineage_shows_provenance(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        kb.write("concepts/four.md", "# four\n", actor="agent-7", provenance="run:run-9")
        data = kb.lineage(path_or_id="concepts/four.md").to_json()
    assert data["derived_from"][0]["type"] == "run"
    assert data["derived_from"][0]["id"] == "run-9"
    assert data["derived_from"][0]["actor"] == "agent-7"


def test_lineage_errors(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        with pytest.raises(UsageError, match="episode id 'dup' names 2 episodes"):
            kb.lineage(path_or_id="dup")
        with pytest.raises(NotFound, match="no episode with id 'nothing'"):
            kb.lineage(path_or_id="nothing")
        with pytest.raises(NotFound):
            kb.lineage("episodes/missing.md")
        with pytest.raises(UsageError):
            kb.lineage(path_or_id="  ")


def test_lineage_by_path_or_episode_id_takes_exactly_one(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        by_path = kb.lineage(path="episodes/2026/a.md").to_json()
        assert kb.lineage(episode_id="a").to_json() == by_path
        assert by_path == kb.lineage(path_or_id="a").to_json()
        for neither_or_both in ({}, {"path": "episodes/2026/a.md", "episode_id": "a"}):
            with pytest.raises(UsageError, match="give either path or episode_id"):
                kb.lineage(**neither_or_both)
        with pytest.raises(UsageError, match="give either path_or_id or path"):
            kb.lineage("episodes/2026/a.md", path_or_id="a")


def test_a_forgotten_episode_is_not_unmerged(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        kb.ensure_versioned()
        kb.forget("episodes/loose.md", reason="wrong")
        check = both(kb)
        report = kb.memory_report()
    assert check.unmerged_count == report.unmerged_count == 2
    assert "episodes/loose.md" not in {e.path for e in report.unmerged}
    assert [(f.key, f.unmerged) for f in check.folders][0] == ("episodes/", 0)
