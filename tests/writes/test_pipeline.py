"""The write pipeline through :class:`Knowledge` on a ``kiwifs init``-ed root, with real git.

Every mutation is one commit authored by the actor; ``If-Match`` guards writes; bulk writes are
all or nothing; a crash between the disk write and the commit is repaired at the next open.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gitrepo import commit_count, git
from kiwifs.base.limits import CHANGES_LIMIT
from kiwifs.errors import Conflict, InvalidFrontmatter, InvalidPath, NotFound, UsageError
from kiwifs.frontmatter.reader import read_frontmatter
from kiwifs.git import indexfile
from kiwifs.git.repo import blob_id
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from kiwifs.writes.events import Event
from kiwifs.writes.pipeline import JOURNAL, STATE_DIR
from kiwifs.writes.preconditions import parse_if_match
from waiting import wait_for


@pytest.fixture(autouse=True)
def quick_index_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The git index file is synced after 50 ms of quiet instead of 1 s: :func:`assert_clean`
    waits for the sync, whose delay none of these tests is about (one sets its own)."""
    monkeypatch.setattr(indexfile, "SYNC_DELAY", 0.05)


def last_commit(root: Path) -> tuple[str, str, str]:
    """Author name, author email and full message of HEAD."""
    name, email, message = git(root, "log", "-1", "--format=%an%x00%ae%x00%B").split("\0")
    return name, email, message.rstrip("\n")


def changed_in_head(root: Path) -> list[str]:
    out = git(root, "show", "--name-only", "--no-renames", "--format=", "HEAD")
    return sorted(line for line in out.splitlines() if line)


def assert_clean(root: Path) -> None:
    """``git status`` is clean once the git index file has caught up (a fraction of a second).

    Commits are made from trees, not from the index, so the index is written off the write
    path; history is complete when the write returns, ``git status`` shortly after.
    """
    deadline = time.monotonic() + 10
    while True:
        out = git(root, "status", "--porcelain", "--", ".", ":(exclude).kiwi")
        if out == "" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert out == ""


# -- one commit per operation -------------------------------------------------------------------


def test_write_is_one_commit_by_the_actor(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    before = commit_count(knowledge_root)
    result = knowledge_kb.write("notes/a.md", "# A\n", actor="alice")
    assert result.path == "notes/a.md"
    assert result.etag == blob_id(b"# A\n")
    assert (knowledge_root / "notes/a.md").read_bytes() == b"# A\n"
    assert commit_count(knowledge_root) == before + 1
    assert last_commit(knowledge_root) == ("alice", "kiwifs@internal", "alice: notes/a.md")
    assert changed_in_head(knowledge_root) == ["notes/a.md"]
    assert_clean(knowledge_root)


def test_write_with_provenance_adds_a_trailer_and_derived_from(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    result = knowledge_kb.write(
        "runs/run-249.md", "# Run 249\n", actor="agent:x", provenance="run:run-249"
    )
    name, _, message = last_commit(knowledge_root)
    assert name == "agent:x"
    assert message == "agent:x: runs/run-249.md\n\nProvenance: run:run-249"
    data = (knowledge_root / "runs/run-249.md").read_bytes()
    assert result.etag == blob_id(data)
    (entry,) = read_frontmatter(data).data["derived-from"]
    assert (entry["type"], entry["id"], entry["actor"]) == ("run", "run-249", "agent:x")


def test_retried_write_with_provenance_is_idempotent(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    first = knowledge_kb.write("r.md", "# R\n", actor="bot", provenance="run:7")
    content = (knowledge_root / "r.md").read_bytes()
    before = commit_count(knowledge_root)
    again = knowledge_kb.write("r.md", content, actor="bot", provenance="run:7")
    assert again.etag == first.etag
    assert (knowledge_root / "r.md").read_bytes() == content
    assert len(read_frontmatter(content).data["derived-from"]) == 1
    assert commit_count(knowledge_root) == before  # nothing changed, nothing committed
    assert_clean(knowledge_root)


def test_default_actor_is_kiwifs(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.write("d.md", "x")
    assert last_commit(knowledge_root)[0] == "kiwifs"


def test_malformed_provenance_writes_nothing(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    before = commit_count(knowledge_root)
    with pytest.raises(UsageError):
        knowledge_kb.write("p.md", "x", provenance="runid")
    assert not (knowledge_root / "p.md").exists()
    assert commit_count(knowledge_root) == before


def test_unparseable_frontmatter_with_provenance_is_refused_and_nothing_written(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    before = commit_count(knowledge_root)
    for content in (b"---\n- a\n---\nbody\n", b"---\ntitle: x\nno end\n"):
        with pytest.raises(InvalidFrontmatter):
            knowledge_kb.write("bad.md", content, provenance="run:1")
    assert not (knowledge_root / "bad.md").exists()
    assert commit_count(knowledge_root) == before
    journal = knowledge_root / STATE_DIR / JOURNAL
    assert not journal.exists() or journal.read_text() == ""


def test_append_is_one_commit(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.write("log.txt.md", "first", actor="a")
    before = commit_count(knowledge_root)
    result = knowledge_kb.append("log.txt.md", "second", actor="bob")
    assert (knowledge_root / "log.txt.md").read_bytes() == b"first\nsecond"
    assert result.etag == blob_id(b"first\nsecond")
    assert commit_count(knowledge_root) == before + 1
    assert last_commit(knowledge_root)[:1] == ("bob",)
    assert last_commit(knowledge_root)[2] == "bob: log.txt.md"


def test_append_with_separator_and_to_a_missing_file(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    knowledge_kb.append("new/dir/x.md", "one", actor="a", separator="--")
    assert (knowledge_root / "new/dir/x.md").read_bytes() == b"one"
    knowledge_kb.append("new/dir/x.md", "two", actor="a", separator="--")
    assert (knowledge_root / "new/dir/x.md").read_bytes() == b"one--two"
    knowledge_kb.append("new/dir/x.md", "", actor="a")
    assert (knowledge_root / "new/dir/x.md").read_bytes() == b"one--two\n"


def test_delete_is_one_commit(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.write("gone/x.md", "x", actor="a")
    before = commit_count(knowledge_root)
    assert knowledge_kb.delete("gone/x.md", actor="carol") == "gone/x.md"
    assert not (knowledge_root / "gone/x.md").exists()
    assert commit_count(knowledge_root) == before + 1
    assert last_commit(knowledge_root)[0] == "carol"
    assert last_commit(knowledge_root)[2] == "delete: gone/x.md"
    assert "gone/x.md" not in git(knowledge_root, "ls-files")
    assert_clean(knowledge_root)


def test_delete_missing_file_is_not_found(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    before = commit_count(knowledge_root)
    with pytest.raises(NotFound):
        knowledge_kb.delete("nope.md")
    assert commit_count(knowledge_root) == before


def test_bulk_is_one_commit(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    before = commit_count(knowledge_root)
    results = knowledge_kb.bulk_write(
        [("b/one.md", "1"), ("b/two.md", b"2")], actor="batch", provenance="run:run-777"
    )
    assert [r.path for r in results] == ["b/one.md", "b/two.md"]
    assert commit_count(knowledge_root) == before + 1
    name, _, message = last_commit(knowledge_root)
    assert name == "batch"
    assert message == "batch: bulk write \u2014 2 files\n\nProvenance: run:run-777"
    assert changed_in_head(knowledge_root) == ["b/one.md", "b/two.md"]
    for r in results:
        data = (knowledge_root / r.path).read_bytes()
        assert r.etag == blob_id(data)
        assert read_frontmatter(data).data["derived-from"][0]["id"] == "run-777"


def test_bulk_custom_message(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.bulk_write([("m.md", "x")], actor="a", message="import notes")
    assert last_commit(knowledge_root)[2] == "import notes"


@pytest.mark.parametrize(
    "files",
    [
        [("ok/one.md", "1"), ("../escape.md", "2")],
        [("ok/one.md", "1"), (".hidden.md", "2")],
        [("ok/one.md", "1"), ("ok/one.md", "2")],
        [("ok/one.md", "1"), ("ok/bad.md", "---\n- list\n---\n")],
    ],
)
def test_bulk_is_all_or_nothing(
    knowledge_kb: Knowledge, knowledge_root: Path, files: list[tuple[str, str]]
) -> None:
    before = commit_count(knowledge_root)
    with pytest.raises(UsageError if files[1][1] != "---\n- list\n---\n" else InvalidFrontmatter):
        knowledge_kb.bulk_write(files, actor="a", provenance="run:1")
    assert not (knowledge_root / "ok").exists()
    assert commit_count(knowledge_root) == before
    assert_clean(knowledge_root)


def test_bulk_failure_restores_files_it_overwrote(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    knowledge_kb.write("keep.md", "original", actor="a")
    knowledge_kb.write("folder/inside.md", "a folder where a file is asked for", actor="a")
    before = commit_count(knowledge_root)
    # keep.md is written first, then writing over the folder fails: keep.md is put back
    with pytest.raises(InvalidPath):
        knowledge_kb.bulk_write(
            [("keep.md", "changed"), ("new.md", "n"), ("folder", "y")], actor="a"
        )
    assert (knowledge_root / "keep.md").read_bytes() == b"original"
    assert not (knowledge_root / "new.md").exists()
    assert commit_count(knowledge_root) == before
    assert_clean(knowledge_root)


def test_bulk_empty_list_is_refused(knowledge_kb: Knowledge) -> None:
    with pytest.raises(UsageError):
        knowledge_kb.bulk_write([])


def test_rename_is_one_commit(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.write("old/name.md", "content", actor="a")
    before = commit_count(knowledge_root)
    result = knowledge_kb.rename("old/name.md", "new/name.md", actor="dave")
    assert result.path == "new/name.md"
    assert result.etag == blob_id(b"content")
    assert not (knowledge_root / "old/name.md").exists()
    assert (knowledge_root / "new/name.md").read_bytes() == b"content"
    assert commit_count(knowledge_root) == before + 1
    assert last_commit(knowledge_root)[0] == "dave"
    assert last_commit(knowledge_root)[2] == "dave: rename old/name.md \u2192 new/name.md"
    assert changed_in_head(knowledge_root) == ["new/name.md", "old/name.md"]
    assert_clean(knowledge_root)


def test_rename_errors(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.write("a.md", "a")
    knowledge_kb.write("b.md", "b")
    before = commit_count(knowledge_root)
    with pytest.raises(NotFound):
        knowledge_kb.rename("missing.md", "c.md")
    with pytest.raises(Conflict):
        knowledge_kb.rename("a.md", "b.md")
    with pytest.raises(InvalidPath):
        knowledge_kb.rename("a.md", "../c.md")
    assert knowledge_kb.rename("a.md", "/a.md").path == "a.md"  # same path: no-op
    assert commit_count(knowledge_root) == before
    assert (knowledge_root / "a.md").read_bytes() == b"a" and (
        knowledge_root / "b.md"
    ).read_bytes() == b"b"


def test_events_follow_each_operation(knowledge_kb: Knowledge) -> None:
    with knowledge_kb.subscribe() as sub:
        w = knowledge_kb.write("e.md", "x", actor="a")
        knowledge_kb.append("e.md", "y", actor="a")
        knowledge_kb.rename("e.md", "f.md", actor="a")
        knowledge_kb.delete("f.md", actor="a")
        knowledge_kb.bulk_write([("g.md", "g")], actor="a")
        got = []
        while (event := sub.get(0)) is not None:
            got.append(event)
    assert got[0] == Event("write", path="e.md", actor="a", etag=w.etag)
    assert [(e.op, e.path) for e in got] == [
        ("write", "e.md"),
        ("write", "e.md"),
        ("write", "f.md"),
        ("delete", "e.md"),
        ("delete", "f.md"),
        ("bulk", ""),
    ]
    assert got[-1].paths == ("g.md",)


def test_refused_paths_write_nothing(
    knowledge_kb: Knowledge, knowledge_root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (knowledge_root / "link").symlink_to(outside, target_is_directory=True)
    before = commit_count(knowledge_root)
    for bad in (
        "",
        "/",
        "../x.md",
        "a/../../x.md",
        "./x.md",
        "a/./x.md",
        "a//x.md",
        "//etc/passwd",
        ".git/config",
        ".kiwi/config.toml",
        "a/.hidden/x.md",
        "ctl\x01.md",
        "nul\x00.md",
        "new\nline.md",
        "x" * 256 + ".md",
        "link/escape.md",
    ):
        with pytest.raises(InvalidPath):
            knowledge_kb.write(bad, "x")
    assert list(outside.iterdir()) == []
    assert commit_count(knowledge_root) == before


# -- If-Match -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("*", None),
        ('"abc"', ["abc"]),
        ("abc", ["abc"]),
        ('W/"abc"', ["abc"]),
        ('"a", "b"', ["a", "b"]),
        ('"a", *', None),
    ],
)
def test_parse_if_match(value: str | None, expected: list[str] | None) -> None:
    assert parse_if_match(value) == expected


@pytest.mark.parametrize("value", ['""', "W/", '"a", ""'])
def test_malformed_if_match_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError):
        parse_if_match(value)


def test_if_match_accepts_the_current_etag_in_every_form(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    etag = knowledge_kb.write("m.md", "v0").etag
    forms = ["{}", '"{}"', 'W/"{}"', '"zzz", "{}"', ' W/"{}" ', "*"]
    for i, form in enumerate(forms):
        etag = knowledge_kb.write("m.md", f"v{i + 1}", if_match=form.format(etag)).etag
        assert (knowledge_root / "m.md").read_bytes() == f"v{i + 1}".encode()
    # "*" means no precondition at all, even for a file that does not exist
    knowledge_kb.write("star.md", "x", if_match="*")
    assert (knowledge_root / "star.md").exists()


def test_if_match_mismatch_is_a_conflict_and_leaves_the_file(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    old = knowledge_kb.write("c.md", "v1").etag
    knowledge_kb.write("c.md", "v2")
    before = commit_count(knowledge_root)
    with pytest.raises(Conflict) as err:
        knowledge_kb.write("c.md", "v3", if_match=f'"{old}"', provenance="run:1")
    assert "re-fetch" in err.value.message
    assert (knowledge_root / "c.md").read_bytes() == b"v2"
    assert commit_count(knowledge_root) == before
    with pytest.raises(Conflict):
        knowledge_kb.delete("c.md", if_match=old)
    assert (knowledge_root / "c.md").exists()
    assert commit_count(knowledge_root) == before


def test_if_match_on_a_missing_file_allows_create(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    knowledge_kb.write("fresh.md", "x", if_match='"0000000000000000000000000000000000000000"')
    assert (knowledge_root / "fresh.md").read_bytes() == b"x"


def test_delete_with_matching_if_match(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    etag = knowledge_kb.write("d.md", "x").etag
    knowledge_kb.delete("d.md", if_match=f'"{etag}"')
    assert not (knowledge_root / "d.md").exists()


# -- crash recovery -----------------------------------------------------------------------------


def test_open_commits_what_a_crash_left_on_disk(knowledge_root: Path) -> None:
    with Knowledge.open(knowledge_root) as kb:  # closed: no thread of it may touch .git/index later
        kb.write("kept.md", "committed", actor="a")
    before = commit_count(knowledge_root)
    # the process died after the journal entry and the disk write, before the commit
    (knowledge_root / "crashed").mkdir()
    (knowledge_root / "crashed/new.md").write_text("on disk, not in git")
    (knowledge_root / "kept.md").unlink()
    journal = knowledge_root / STATE_DIR / JOURNAL
    journal.write_text("crashed/new.md\nkept.md\n")
    assert git(knowledge_root, "status", "--porcelain", "--", "crashed", "kept.md") != ""

    Knowledge.open(knowledge_root).close()  # the open repairs

    assert commit_count(knowledge_root) == before + 1
    assert last_commit(knowledge_root)[0] == "kiwifs"
    assert changed_in_head(knowledge_root) == ["crashed/new.md", "kept.md"]
    assert git(knowledge_root, "show", "HEAD:crashed/new.md") == "on disk, not in git"
    assert "kept.md" not in git(knowledge_root, "ls-files")
    assert journal.read_text() == ""
    assert_clean(knowledge_root)
    # and a second open has nothing left to do
    Knowledge.open(knowledge_root).close()
    assert commit_count(knowledge_root) == before + 1


def test_recover_with_a_journal_of_already_committed_paths_adds_no_commit(
    knowledge_root: Path,
) -> None:
    Knowledge.open(knowledge_root).write("same.md", "x")
    before = commit_count(knowledge_root)
    (knowledge_root / STATE_DIR / JOURNAL).write_text("same.md\n")
    Knowledge.open(knowledge_root)
    assert commit_count(knowledge_root) == before


def test_journal_is_empty_after_each_write(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    knowledge_kb.write("j.md", "x")
    knowledge_kb.bulk_write([("j2.md", "y")])
    assert (knowledge_root / STATE_DIR / JOURNAL).read_text() == ""


def journal_descriptors(root: Path) -> int:
    """This process's open descriptors on the root's journal file."""
    journal = os.path.realpath(root / STATE_DIR / JOURNAL)
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == journal)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_the_journal_is_held_open_only_while_write_lock_is_ours(knowledge_root: Path) -> None:
    """One ``write()`` per operation: the journal stays open while this process holds
    write.lock (no other process may touch it then) and is closed when the lock goes."""
    with Knowledge.open(knowledge_root) as kb:
        kb.write("j.md", "x")
        Serving(
            kb
        ).commit_pending()  # drained: write.lock is let go (once a background user leaves it)
        assert wait_for(lambda: journal_descriptors(knowledge_root) == 0, timeout=10)
        Serving(kb).enable_async_commit(60.0, 1000)  # commits wait: the flock stays with the writes
        kb.write("a.md", "1")
        kb.write("b.md", "2")
        assert journal_descriptors(knowledge_root) == 1
        assert (knowledge_root / STATE_DIR / JOURNAL).read_text() == "a.md\nb.md\n"
        Serving(kb).commit_pending()
        kb.write("c.md", "3")  # after the flush: the flock was let go and taken again
        Serving(kb).commit_pending()
        assert wait_for(lambda: journal_descriptors(knowledge_root) == 0, timeout=10)
    assert journal_descriptors(knowledge_root) == 0
    assert changed_in_head(knowledge_root) == ["c.md"]
    assert (knowledge_root / STATE_DIR / JOURNAL).read_text() == ""


# -- history ------------------------------------------------------------------------------------


def test_versions_version_and_diff(knowledge_kb: Knowledge) -> None:
    knowledge_kb.write("h.md", "one\n", actor="a")
    knowledge_kb.write("h.md", "one\ntwo\n", actor="b")
    versions = knowledge_kb.versions("h.md")
    assert [v.author for v in versions] == ["b", "a"]
    assert [v.message for v in versions] == ["b: h.md", "a: h.md"]
    assert all(len(v.hash) == 40 and "T" in v.date for v in versions)
    newest, oldest = versions
    assert knowledge_kb.version("h.md", oldest.hash) == b"one\n"
    assert knowledge_kb.version("/h.md", newest.hash[:10]) == b"one\ntwo\n"
    diff = knowledge_kb.diff("h.md", oldest.hash, newest.hash)
    assert "+two" in diff and "--- a/h.md" in diff
    assert knowledge_kb.versions("never-written.md") == []


def test_history_errors(knowledge_kb: Knowledge) -> None:
    knowledge_kb.write("h.md", "one\n")
    with pytest.raises(NotFound):
        knowledge_kb.version("h.md", "0" * 40)
    with pytest.raises(NotFound):
        knowledge_kb.version("missing.md", "HEAD")
    with pytest.raises(NotFound):
        knowledge_kb.diff("h.md", "HEAD", "nosuchrev")
    with pytest.raises(UsageError):
        knowledge_kb.diff("h.md", "--output=/tmp/x", "HEAD")
    with pytest.raises(InvalidPath):
        knowledge_kb.versions("../h.md")


def test_changes(knowledge_kb: Knowledge, knowledge_root: Path) -> None:
    start = git(knowledge_root, "rev-parse", "HEAD").strip()
    knowledge_kb.write("c/one.md", "1", actor="alice")
    knowledge_kb.rename("c/one.md", "c/two.md", actor="bob")
    knowledge_kb.delete("c/two.md", actor="carol")
    knowledge_kb.bulk_write([("c/x.md", "x")], actor="dan")
    knowledge_kb.bulk_write([("c/y.md", "y"), ("c/z.md", "z")], actor="erin")
    changes = knowledge_kb.changes(start)
    assert [(c.action, c.path, c.actor) for c in changes] == [
        ("write", "", "erin"),  # several files: no one path
        ("write", "c/x.md", "dan"),
        ("delete", "c/two.md", "carol"),
        ("rename", "c/two.md", "bob"),
        ("write", "c/one.md", "alice"),
    ]
    assert changes[0].seq == git(knowledge_root, "rev-parse", "HEAD").strip()
    assert knowledge_kb.changes(start[:7], limit=1)[0].seq == changes[0].seq
    assert knowledge_kb.changes(changes[0].seq) == []


@pytest.mark.parametrize("since", ["xyz", "abc", "a" * 41])
def test_changes_refuses_bad_arguments(knowledge_kb: Knowledge, since: str) -> None:
    with pytest.raises(UsageError):
        knowledge_kb.changes(since, 50)


def test_changes_limit_is_defaulted_and_capped_as_kiwifs(knowledge_kb: Knowledge) -> None:
    """Missing, zero or negative means 50; above 500 means 500 (KiwiFS clients send 1000)."""
    for n in range(55):
        knowledge_kb.write(f"many/{n}.md", f"{n}")
    assert [len(knowledge_kb.changes(None, limit)) for limit in (None, 0, -1, 3)] == [50, 50, 50, 3]
    assert (
        len(knowledge_kb.changes(None, 1000)) == len(knowledge_kb.changes(None, 500)) > 50
    )  # not an error
    assert (CHANGES_LIMIT(1000), CHANGES_LIMIT(500), CHANGES_LIMIT(None)) == (500, 500, 50)


def test_changes_unknown_commit_is_a_usage_error(knowledge_kb: Knowledge) -> None:
    with pytest.raises(UsageError):
        knowledge_kb.changes("deadbeef")


def test_reading_below_a_file_is_not_found(knowledge_kb: Knowledge) -> None:
    knowledge_kb.write("plain.md", "x")
    with pytest.raises(NotFound):
        knowledge_kb.read("plain.md/child.md")
    with pytest.raises(NotFound):
        knowledge_kb.delete("plain.md/child.md")


@pytest.mark.parametrize(
    ("header", "refused"),
    [("*", True), ('"{etag}"', True), ("W/{etag}", True), ('"deadbeef"', False), ("", False)],
    ids=["star", "same-etag", "weak-same-etag", "other-etag", "blank"],
)
def test_if_none_match_guards_an_existing_file(
    knowledge_kb: Knowledge, knowledge_root: Path, header: str, refused: bool
) -> None:
    first = knowledge_kb.write("inm/a.md", "one\n", actor="a")
    condition = header.format(etag=first.etag)
    if refused:
        with pytest.raises(Conflict):
            knowledge_kb.write("inm/a.md", "two\n", actor="a", if_none_match=condition)
        assert (knowledge_root / "inm/a.md").read_text() == "one\n"
    else:
        knowledge_kb.write("inm/a.md", "two\n", actor="a", if_none_match=condition)
        assert (knowledge_root / "inm/a.md").read_text() == "two\n"


def test_if_none_match_star_creates_a_missing_file(
    knowledge_kb: Knowledge, knowledge_root: Path
) -> None:
    knowledge_kb.write("inm/new.md", "fresh\n", actor="a", if_none_match="*")
    assert (knowledge_root / "inm/new.md").read_text() == "fresh\n"


def test_index_file_catches_up_after_a_users_git_held_its_lock(
    knowledge_root: Path, knowledge_kb: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's ``git status`` refreshes the index under ``index.lock``; a sync that meets the
    lock is tried again, not left until the next commit."""
    monkeypatch.setattr(indexfile, "SYNC_DELAY", 0.2)  # the 1 s delay would cost the test 1.5 s
    lock = knowledge_root / ".git" / "index.lock"
    lock.write_bytes(b"")  # the user's git holds the lock while kiwifs commits and syncs
    knowledge_kb.write("locked.md", "# written while git held the lock\n", actor="tester")
    time.sleep(0.4)  # past the sync delay: the first sync meets the lock
    lock.unlink()
    assert_clean(knowledge_root)  # caught up with no further commit


def test_kiwifs_state_is_ignored_in_a_repository_a_user_made(tmp_path: Path) -> None:
    """A root that is a git repository without kiwifs's .gitignore (``git init`` by hand):
    the index database and journals kiwifs adds never show in ``git status``."""
    root = tmp_path / "kb"
    (root / "notes").mkdir(parents=True)
    (root / "notes/a.md").write_text("alpha\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "mine")
    with Knowledge.open(root) as kb:
        kb.write("notes/b.md", "beta\n")
        assert kb.search("beta").results
    assert (root / ".kiwi/state/index.db").is_file()
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert ".kiwi/state/" in (root / ".git/info/exclude").read_text().splitlines()
    with Knowledge.open(root):  # the entries are added once
        pass
    assert (root / ".git/info/exclude").read_text().count(".kiwi/state/") == 1


def test_adopting_a_root_commits_its_files_and_none_of_kiwifs_own(tmp_path: Path) -> None:
    """The first ``serve`` on a root that is no repository yet commits what is there, not the
    server lock or the state kiwifs made before it (as an older version did)."""
    root = tmp_path / "kb"
    (root / "notes").mkdir(parents=True)
    (root / "notes/a.md").write_text("alpha\n")
    (root / ".kiwi/state").mkdir(parents=True)
    (root / ".kiwi/state/write.lock").write_text("")
    (root / ".kiwi/server.lock").write_text("4242\n")
    (root / "notes/.kiwi-write-x").write_text("half\n")
    with Knowledge.open(root) as kb:
        kb.ensure_versioned()
        kb.write("notes/b.md", "beta\n")
    tracked = git(root, "ls-files").split()
    assert tracked == [".gitattributes", "notes/a.md", "notes/b.md"]
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
