"""``Knowledge.merge`` on a real git root."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from gitrepo import commit_count, git_line
from kiwifs.errors import Conflict, InvalidFrontmatter, InvalidPath, UsageError
from kiwifs.frontmatter.reader import read_frontmatter, split
from kiwifs.git.repo import blob_id
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import MergeEntry

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def write(root: Path, rel: str, data: bytes | str) -> Path:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)
    return target


def entries_of(root: Path, rel: str) -> list[dict[str, str]]:
    return read_frontmatter((root / rel).read_bytes()).data["merged-from"]


def test_merge_then_report_no_longer_lists_the_episode(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    assert [e.path for e in knowledge_kb.memory_report().unmerged] == [
        "episodes/example-episode.md"
    ]
    result = knowledge_kb.merge(
        "concepts/summary.md", [MergeEntry(id="example-001")], actor="consolidator"
    )
    assert result.created
    assert knowledge_kb.memory_report().unmerged == ()
    assert knowledge_kb.memory_report().merged_from_refs == 1
    assert result.etag == blob_id((knowledge_root / "concepts/summary.md").read_bytes())


def test_merge_is_idempotent(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    entries = [MergeEntry(id="e1", note="first"), MergeEntry(path="episodes/b.md")]
    first = knowledge_kb.merge("concepts/x.md", entries)
    assert len(first.added) == 2
    before = (knowledge_root / "concepts/x.md").read_bytes()
    head, count = git_line(knowledge_root, "rev-parse", "HEAD"), commit_count(knowledge_root)
    again = knowledge_kb.merge("concepts/x.md", entries)
    assert again.added == ()
    assert not again.created
    assert again.etag == first.etag
    assert (knowledge_root / "concepts/x.md").read_bytes() == before
    assert (git_line(knowledge_root, "rev-parse", "HEAD"), commit_count(knowledge_root)) == (
        head,
        count,
    )


@pytest.mark.parametrize(
    ("existing", "entry"),
    [
        (MergeEntry(id="ep-1"), MergeEntry(type="Episode", id=" ep-1 ")),
        (MergeEntry(path="episodes/a.md"), MergeEntry(path="./episodes//a.md")),
        (MergeEntry(path="episodes/a.md"), MergeEntry(path="/episodes/a.md", note="other note")),
        (MergeEntry(id="ep-1"), MergeEntry(id="ep-1", date="2020-01-01T00:00:00Z")),
        (MergeEntry(type="run", id="r1"), MergeEntry(type="RUN", id="r1")),
    ],
    ids=["type-case-and-id-padding", "path-normalised", "note-ignored", "date-ignored", "RUN"],
)
def test_idempotent_by_key(
    knowledge_kb: Knowledge, knowledge_root: Path, existing: MergeEntry, entry: MergeEntry
) -> None:
    knowledge_kb.merge("concepts/x.md", [existing])
    before = (knowledge_root / "concepts/x.md").read_bytes()
    assert knowledge_kb.merge("concepts/x.md", [entry]).added == ()
    assert (knowledge_root / "concepts/x.md").read_bytes() == before


def test_duplicates_within_one_batch_are_added_once(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    result = knowledge_kb.merge(
        "concepts/x.md", [MergeEntry(id="a"), MergeEntry(id="a "), MergeEntry(id="b")]
    )
    assert [e.id for e in result.added] == ["a", "b"]
    assert [e["id"] for e in entries_of(knowledge_root, "concepts/x.md")] == ["a", "b"]


def test_hand_written_entries_count_as_existing(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    write(
        knowledge_root,
        "concepts/x.md",
        "---\nmerged-from:\n"
        "  - {type: run, id: 42}\n"
        "  - {type: note, path: ./episodes/a.md}\n"
        "---\n",
    )
    result = knowledge_kb.merge(
        "concepts/x.md",
        [MergeEntry(type="run", id="42"), MergeEntry(type="note", path="episodes/a.md")],
    )
    assert result.added == ()


def test_missing_page_is_created_semantic_with_empty_body(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    result = knowledge_kb.merge("concepts/new/page.md", [MergeEntry(id="e1")])
    assert result.created
    data = (knowledge_root / "concepts/new/page.md").read_bytes()
    fm = read_frontmatter(data).data
    assert fm["memory_kind"] == "semantic"
    assert list(fm) == ["memory_kind", "merged-from"]
    assert split(data)[1] == b""
    assert data.startswith(b"---\nmemory_kind: semantic\nmerged-from:\n  - type: episode\n")


def test_entry_fields_and_order(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    entry = MergeEntry(
        type="run", id="r1", path="episodes/r1.md", date="2026-01-02T03:04:05Z", note="n"
    )
    knowledge_kb.merge("concepts/x.md", [entry], actor="alice")
    (stored,) = entries_of(knowledge_root, "concepts/x.md")
    assert stored == {
        "type": "run",
        "id": "r1",
        "path": "episodes/r1.md",
        "date": "2026-01-02T03:04:05Z",
        "actor": "alice",
        "note": "n",
    }
    assert list(stored) == ["type", "id", "path", "date", "actor", "note"]


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("episodes/a.md", "episodes/a.md"),
        ("./episodes/a.md", "episodes/a.md"),
        ("/episodes/a.md", "episodes/a.md"),
        ("episodes//a.md", "episodes/a.md"),
        (" episodes\\a.md ", "episodes/a.md"),
    ],
    ids=["plain", "dot-slash", "leading-slash", "double-slash", "padded-backslash"],
)
def test_path_entries_are_normalised_and_write_no_id(
    knowledge_kb: Knowledge, knowledge_root: Path, given: str, stored: str
) -> None:
    knowledge_kb.merge("concepts/x.md", [MergeEntry(path=given)])
    (entry,) = entries_of(knowledge_root, "concepts/x.md")
    assert entry["path"] == stored
    assert "id" not in entry
    assert "id:" not in (knowledge_root / "concepts/x.md").read_text()
    assert knowledge_kb.memory_report().merged_from_refs == 1


@pytest.mark.parametrize(
    "entries",
    [
        [MergeEntry(path="../outside.md")],
        [MergeEntry(path="episodes/../../x.md")],
        [MergeEntry(id="ok"), MergeEntry(path="a/../b.md")],
        [MergeEntry(path="./")],
        [MergeEntry(type="", id="e1")],
        [MergeEntry(type="  ", id="e1")],
        [MergeEntry()],
        [MergeEntry(id="  ", path=" ")],
        [],
    ],
    ids=[
        "dotdot",
        "dotdot-deep",
        "dotdot-in-second-entry",
        "path-normalises-to-nothing",
        "no-type",
        "blank-type",
        "no-id-no-path",
        "blank-id-and-path",
        "no-entries",
    ],
)
def test_bad_entries_are_refused_and_nothing_is_written(
    knowledge_kb: Knowledge, knowledge_root: Path, entries: list[MergeEntry]
) -> None:
    page = write(knowledge_root, "concepts/x.md", "---\ntitle: x\n---\nbody\n")
    before, count = page.read_bytes(), commit_count(knowledge_root)
    with pytest.raises(UsageError):
        knowledge_kb.merge("concepts/x.md", entries)
    assert page.read_bytes() == before
    assert commit_count(knowledge_root) == count
    with pytest.raises(UsageError):
        knowledge_kb.merge("concepts/never.md", entries)
    assert not (knowledge_root / "concepts/never.md").exists()


@pytest.mark.parametrize(
    "page",
    ["../x.md", ".hidden/x.md", "", "a/../b.md"],
    ids=["dotdot", "hidden", "empty", "inner-dotdot"],
)
def test_bad_page_paths_are_refused(knowledge_kb: Knowledge, page: str) -> None:
    with pytest.raises(InvalidPath):
        knowledge_kb.merge(page, [MergeEntry(id="e1")])


def test_date_defaults_to_now_utc_and_actor_to_the_caller(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    knowledge_kb.merge(
        "concepts/x.md",
        [MergeEntry(id="e1"), MergeEntry(id="e2", date="2001-02-03T04:05:06Z")],
        actor="bob",
    )
    after = dt.datetime.now(dt.UTC)
    first, second = entries_of(knowledge_root, "concepts/x.md")
    assert STAMP.match(first["date"])
    stamp = dt.datetime.strptime(first["date"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert before <= stamp <= after
    assert second["date"] == "2001-02-03T04:05:06Z"
    assert first["actor"] == second["actor"] == "bob"
    assert '"' + first["date"] + '"' in (knowledge_root / "concepts/x.md").read_text()


@pytest.mark.parametrize(
    ("actor", "author"),
    [("consolidator-7", "consolidator-7"), (None, "kiwifs"), ("", "kiwifs"), (" a\x00b ", "ab")],
    ids=["named", "default", "empty-is-default", "sanitised"],
)
def test_merge_commits_with_the_actor_as_author(
    knowledge_kb: Knowledge, knowledge_root: Path, actor: str | None, author: str
) -> None:
    count = commit_count(knowledge_root)
    knowledge_kb.merge("concepts/x.md", [MergeEntry(id="e1")], actor=actor)
    assert commit_count(knowledge_root) == count + 1
    assert git_line(knowledge_root, "log", "-1", "--format=%an") == author
    assert git_line(knowledge_root, "log", "-1", "--format=%cn") == author
    knowledge_kb.close()  # the git index file is written off the write path; closing writes it
    assert git_line(knowledge_root, "status", "--porcelain", "--", "concepts/x.md") == ""
    assert (
        git_line(knowledge_root, "show", "HEAD:concepts/x.md")
        == (knowledge_root / "concepts/x.md").read_text().strip()
    )


@pytest.mark.parametrize(
    "content",
    [
        b"---\ntitle: x\nbody without end\n",
        b"---\ntitle: [x\n---\nbody\n",
        b"---\n- a\n- b\n---\nbody\n",
        b"---\njust text\n---\nbody\n",
    ],
    ids=["unterminated", "invalid-yaml", "list", "scalar"],
)
def test_broken_frontmatter_page_is_refused_and_left_alone(
    knowledge_kb: Knowledge, knowledge_root: Path, content: bytes
) -> None:
    page = write(knowledge_root, "concepts/broken.md", content)
    count = commit_count(knowledge_root)
    with pytest.raises(InvalidFrontmatter):
        knowledge_kb.merge("concepts/broken.md", [MergeEntry(id="e1")])
    assert page.read_bytes() == content
    assert commit_count(knowledge_root) == count


@pytest.mark.parametrize(
    "content",
    [
        b"---\r\ntitle: Auth\r\n---\r\n# Auth\r\n\r\nbody\r\n",
        b"---\ntitle: Auth # comment\ntags: [a]\n---\n\n\n# leading blank lines\n",
        b"# no frontmatter\nat all\n",
        b"---\n# only a comment\n---\nx",
    ],
    ids=["crlf", "comments-and-blank-lines", "no-frontmatter", "comment-only"],
)
def test_merge_keeps_body_and_other_keys(
    knowledge_kb: Knowledge, knowledge_root: Path, content: bytes
) -> None:
    page = write(knowledge_root, "concepts/p.md", content)
    old_fm = read_frontmatter(content).data
    knowledge_kb.merge("concepts/p.md", [MergeEntry(id="e1")])
    data = page.read_bytes()
    assert split(data)[1] == split(content)[1]
    new_fm = read_frontmatter(data).data
    assert new_fm.pop("merged-from")[0]["id"] == "e1"
    assert new_fm == old_fm


def test_if_match_mismatch_is_a_conflict(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    page = write(knowledge_root, "concepts/p.md", "---\ntitle: t\n---\n")
    with pytest.raises(Conflict):
        knowledge_kb.merge("concepts/p.md", [MergeEntry(id="e1")], if_match='"0000"')
    assert page.read_text() == "---\ntitle: t\n---\n"
    etag = blob_id(page.read_bytes())
    assert knowledge_kb.merge("concepts/p.md", [MergeEntry(id="e1")], if_match=f'"{etag}"').added


def test_inventory_inject_accepts_path_only(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    write(knowledge_root, "concepts/x.md", "---\n---\n# X\n")
    knowledge_kb.merge("concepts/x.md", [MergeEntry(type="episode", path="episodes/2026/a.md")])
    text = (knowledge_root / "concepts/x.md").read_text()
    assert "episodes/2026/a.md" in text
    assert text.endswith("---\n# X\n")


def test_inventory_inject_idempotent(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    write(knowledge_root, "concepts/auth.md", "---\ntitle: Auth\n---\n# Auth\n")
    knowledge_kb.merge("concepts/auth.md", [MergeEntry(type="episode", id="ep-1", note="first")])
    assert "merged-from" in (knowledge_root / "concepts/auth.md").read_text()
    knowledge_kb.merge("concepts/auth.md", [MergeEntry(type="episode", id="ep-1", note="first")])
    assert (knowledge_root / "concepts/auth.md").read_text().count("ep-1") == 1


def test_merge_without_git_still_writes(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    kb = Knowledge.open(tmp_path / "plain")
    result = kb.merge("p.md", [MergeEntry(id="e1")])
    assert result.created
    assert entries_of(tmp_path / "plain", "p.md")[0]["id"] == "e1"
