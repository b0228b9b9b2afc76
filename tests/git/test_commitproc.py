"""Commits made in a child process (``kiwifs serve``): the same commits, threads left free."""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitrepo import commit_count, git, git_line
from kiwifs.errors import StorageError
from kiwifs.git import child
from kiwifs.git.repo import Git, blob_id
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from kiwifs.writes.pipeline import JOURNAL, STATE_DIR


@pytest.fixture
def child_git(root: Path) -> Git:
    """The repository ``child_commit_kb`` is opened with."""
    return Git(root)


@pytest.fixture
def child_commit_kb(root: Path, child_git: Git) -> Iterator[Knowledge]:
    """The library on ``root``, its commits made by the commit child process."""
    with Knowledge.open(root, git=child_git) as k:
        Serving(k).start_commit_process()
        yield k


def child_pid(git: Git) -> int:
    assert git._process is not None
    proc = git._process._proc
    assert proc is not None
    return proc.pid


def test_writes_are_committed_by_the_child_with_author_and_provenance(
    child_commit_kb: Knowledge, child_git: Git, root: Path
) -> None:
    before = commit_count(root)
    child_commit_kb.write("notes/a.md", "# A\n", actor="alice", provenance="run:1")
    assert child_pid(child_git) != os.getpid()
    assert commit_count(root) == before + 1
    assert git_line(root, "log", "-1", "--format=%an") == "alice"
    assert "Provenance: run:1" in git(root, "log", "-1", "--format=%B")
    assert [v.author for v in child_commit_kb.versions("notes/a.md")] == ["alice"]
    assert (root / STATE_DIR / JOURNAL).read_text() == ""


def test_concurrent_writers_share_commits_made_by_the_child(
    child_commit_kb: Knowledge, root: Path
) -> None:
    before = commit_count(root)
    paths = [f"many/w{i}.md" for i in range(40)]
    threads = [
        threading.Thread(
            target=child_commit_kb.write, args=(p, f"# {p}\n"), kwargs={"actor": "bob"}
        )
        for p in paths
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = set(git(root, "log", "--format=", "--name-only").split())
    assert set(paths) <= committed
    assert 1 <= commit_count(root) - before <= len(paths)
    child_commit_kb.close()
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_child_killed_between_commits_is_replaced(
    child_commit_kb: Knowledge, child_git: Git, root: Path
) -> None:
    child_commit_kb.write("a.md", "a\n", actor="alice")
    first = child_pid(child_git)
    os.kill(first, signal.SIGKILL)  # the next commit finds it dead, or its pipe broken
    child_commit_kb.write("b.md", "b\n", actor="alice")
    assert child_pid(child_git) != first
    assert {"a.md", "b.md"} <= set(git(root, "ls-tree", "--name-only", "HEAD").split())


def test_a_failed_commit_in_the_child_is_a_storage_error_and_git_recovers(
    child_commit_kb: Knowledge, root: Path
) -> None:
    child_commit_kb.write("a.md", "a\n", actor="alice")
    lock = root / ".git" / "refs" / "heads" / "main.lock"  # a user's git at work (no marker)
    lock.write_text("")
    with pytest.raises(StorageError, match="git commit failed"):
        child_commit_kb.write("b.md", "b\n", actor="alice")
    assert (root / "b.md").exists()  # on disk and journaled: committed once git works
    lock.unlink()
    child_commit_kb.write("c.md", "c\n", actor="alice")
    assert {"a.md", "b.md", "c.md"} <= set(git(root, "ls-tree", "--name-only", "HEAD").split())


def test_the_child_commits_nothing_once_its_server_is_gone(root: Path) -> None:
    """A request still queued when the server died: no commit (the journal has it)."""
    before = commit_count(root)
    (root / "late.md").write_text("late\n")
    requests = io.BytesIO()
    child._send(requests, (["late.md"], "alice", "alice: late.md", None, None))
    requests.seek(0)
    answers = io.BytesIO()
    not_our_parent = os.getpid()  # the child's parent is compared with the server's pid
    child.serve(root, not_our_parent, requests, answers)
    assert answers.getvalue() == b""
    assert commit_count(root) == before


def test_the_child_answers_each_request_then_stops_at_the_end_of_its_pipe(root: Path) -> None:
    (root / "x.md").write_text("x\n")
    requests = io.BytesIO()
    child._send(requests, (["x.md"], "alice", "alice: x.md", "Provenance: t", None))
    child._send(requests, (["x.md"], "alice", "alice: x.md", None, None))  # no change
    requests.seek(0)
    answers = io.BytesIO()
    child.serve(root, os.getppid(), requests, answers)
    answers.seek(0)
    ok, made = child._receive(answers)
    assert ok and made.id == git_line(root, "rev-parse", "HEAD")
    assert made.parent == git_line(root, "rev-parse", "HEAD~1")
    assert made.changes == (("x.md", blob_id(b"x\n")),)  # the timeline's replay reads these
    assert child._receive(answers) == (True, None)  # nothing changed: no commit
    with pytest.raises(EOFError):
        child._receive(answers)


def test_the_plain_path_keeps_commits_in_process(root: Path) -> None:
    git = Git(root)
    with Knowledge.open(root, tuning=Tuning(commit_process=False), git=git) as kb:
        Serving(kb).start_commit_process()
        assert git._process is None
        kb.write("a.md", "a\n", actor="alice")
    assert git_line(root, "log", "-1", "--format=%an") == "alice"


def test_the_child_writes_trees_as_the_server_would(root: Path) -> None:
    """A server made with ``kept_trees`` off hands that to its commit process: libgit2's tree
    builder makes the same tree there."""
    trees = []
    for kept in (True, False):
        git = Git(root, kept)
        with Knowledge.open(root, tuning=Tuning(kept_trees=kept), git=git) as kb:
            Serving(kb).start_commit_process()
            assert git._process is not None
            assert git._process.kept_trees is kept
            kb.write(f"notes/{kept}.md", "x\n", actor="alice")
            kb.delete(f"notes/{kept}.md", actor="alice")
        trees.append(git_line(root, "rev-parse", "HEAD^{tree}"))
    assert trees[0] == trees[1]
