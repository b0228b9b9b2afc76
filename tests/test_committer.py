"""Asynchronous, batched commits: writes return before their commit, history never lags."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitrepo import commit_count, git
from kiwifs.committer import PendingCommit, batch_message
from kiwifs.knowledge import Knowledge

JOURNAL = Path(".kiwi/state/uncommitted.log")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "kb"
    Knowledge.init(path, "blank")
    return path


@pytest.fixture
def kb(root: Path) -> Iterator[Knowledge]:
    with Knowledge.open(root) as k:
        k.enable_async_commit(window=30.0, max_paths=1000)  # only flushes commit
        yield k


def test_write_returns_before_its_commit_and_history_flushes(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    kb.write("notes/a.md", "# A\n", actor="alice")
    kb.write("notes/b.md", "# B\n", actor="alice")
    assert commit_count(root) == before  # still batching
    assert (root / JOURNAL).read_text().split() == ["notes/a.md", "notes/b.md"]
    versions = kb.versions("notes/a.md")  # a history read waits for pending commits
    assert [v.author for v in versions] == ["alice"]
    assert commit_count(root) == before + 1
    assert (
        git(root, "log", "-1", "--format=%B").strip() == "alice: 2 files\n\nnotes/a.md\nnotes/b.md"
    )
    assert (root / JOURNAL).read_text() == ""


def test_each_commit_has_one_author(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    kb.write("a.md", "a\n", actor="alice")
    kb.write("b.md", "b\n", actor="bob")
    kb.write("c.md", "c\n", actor="bob")
    kb.pipeline.flush()
    authors = git(root, "log", f"-{commit_count(root) - before}", "--format=%an").split()
    assert authors == ["bob", "alice"]


def test_close_commits_what_is_pending(root: Path) -> None:
    kb = Knowledge.open(root)
    kb.enable_async_commit(window=30.0)
    kb.write("late.md", "late\n", actor="carol", provenance="run:r-9")
    kb.close()
    assert git(root, "show", "HEAD:late.md") == (root / "late.md").read_text()
    message = git(root, "log", "-1", "--format=%B")
    assert message.startswith("carol: late.md")
    assert "Provenance: run:r-9" in message
    kb.write("after.md", "x\n", actor="carol")  # closed: back to synchronous commits
    assert git(root, "show", "HEAD:after.md") == "x\n"


def test_a_crash_before_the_commit_is_recovered_from_the_journal(kb: Knowledge, root: Path) -> None:
    kb.write("journaled.md", "on disk\n", actor="dave")
    assert "journaled.md" in (root / JOURNAL).read_text()
    # another process opening the root after a crash commits what the journal names
    with Knowledge.open(root) as other:
        assert [v.message for v in other.versions("journaled.md")] == ["kiwifs: recommit 1 file(s)"]
    kb.pipeline.flush()  # the original committer then finds nothing left to commit
    assert git(root, "status", "--porcelain", "--", "journaled.md") == ""


def test_batch_message_keeps_a_single_operation_message() -> None:
    one = [PendingCommit(("x.md",), "eve", "delete: x.md")]
    assert batch_message(one) == ("delete: x.md", None)
    two = [
        PendingCommit(("a.md",), "eve", "eve: a.md", "Provenance: run:1"),
        PendingCommit(("a.md", "b.md"), "eve", "eve: bulk", "Provenance: run:1"),
    ]
    assert batch_message(two) == ("eve: 2 files\n\na.md\nb.md", "Provenance: run:1")
