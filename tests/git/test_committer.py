"""Asynchronous, batched commits: writes return before their commit, history never lags."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitrepo import break_object_store_for, commit_count, git
from kiwifs.errors import StorageError
from kiwifs.git.log import Version
from kiwifs.git.messages import batch_message
from kiwifs.git.pendingcommit import PendingCommit
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving

JOURNAL = Path(".kiwi/state/uncommitted.log")


@pytest.fixture
def async_commit_kb(root: Path) -> Iterator[Knowledge]:
    """The library on ``root``, committing in the background (in batches)."""
    with Knowledge.open(root) as k:
        Serving(k).enable_async_commit(window=30.0, max_paths=1000)  # only flushes commit
        yield k


def test_write_returns_before_its_commit_and_history_flushes(
    async_commit_kb: Knowledge, root: Path
) -> None:
    before = commit_count(root)
    async_commit_kb.write("notes/a.md", "# A\n", actor="alice")
    async_commit_kb.write("notes/b.md", "# B\n", actor="alice")
    assert commit_count(root) == before  # still batching
    assert (root / JOURNAL).read_text().split() == ["notes/a.md", "notes/b.md"]
    versions = async_commit_kb.versions("notes/a.md")  # a history read waits for pending commits
    assert [v.author for v in versions] == ["alice"]
    assert commit_count(root) == before + 1
    assert (
        git(root, "log", "-1", "--format=%B").strip() == "alice: 2 files\n\nnotes/a.md\nnotes/b.md"
    )
    assert (root / JOURNAL).read_text() == ""


def test_each_commit_has_one_author(async_commit_kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    async_commit_kb.write("a.md", "a\n", actor="alice")
    async_commit_kb.write("b.md", "b\n", actor="bob")
    async_commit_kb.write("c.md", "c\n", actor="bob")
    Serving(async_commit_kb).commit_pending()
    authors = git(root, "log", f"-{commit_count(root) - before}", "--format=%an").split()
    assert authors == ["bob", "alice"]


def test_a_batch_commits_what_its_writes_wrote_not_what_is_on_disk_later(
    async_commit_kb: Knowledge, root: Path
) -> None:
    """By the time a batch is committed a later write may be rewriting its files (a bulk write
    half done): the commit holds each operation's own bytes, so it never shows part of one."""
    async_commit_kb.bulk_write([("b/one.md", "gen 1\n"), ("b/two.md", "gen 1\n")], actor="alice")
    async_commit_kb.delete("b/two.md", actor="alice")
    (root / "b/one.md").write_text("gen 2, being written\n")  # the next bulk, midway
    (root / "b/two.md").write_text("gen 2, being written\n")
    Serving(async_commit_kb).commit_pending()
    assert git(root, "show", "HEAD:b/one.md") == "gen 1\n"
    assert "b/two.md" not in git(root, "ls-tree", "-r", "--name-only", "HEAD")


def test_close_commits_what_is_pending(root: Path) -> None:
    kb = Knowledge.open(root)
    Serving(kb).enable_async_commit(window=30.0)
    kb.write("late.md", "late\n", actor="carol", provenance="run:r-9")
    kb.close()
    assert git(root, "show", "HEAD:late.md") == (root / "late.md").read_text()
    message = git(root, "log", "-1", "--format=%B")
    assert message.startswith("carol: late.md")
    assert "Provenance: run:r-9" in message
    kb.write("after.md", "x\n", actor="carol")  # closed: back to synchronous commits
    assert git(root, "show", "HEAD:after.md") == "x\n"


WRITE_THEN_DIE = """
import os, signal, sys
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
kb = Knowledge.open(sys.argv[1])
Serving(kb).enable_async_commit(window=30.0)
kb.write("journaled.md", "on disk\\n", actor="dave")
os.kill(os.getpid(), signal.SIGKILL)  # acknowledged, not committed yet
"""


def test_a_crash_before_the_commit_is_recovered_from_the_journal(root: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WRITE_THEN_DIE, str(root)], check=False)
    assert done.returncode == -signal.SIGKILL
    assert "journaled.md" in (root / JOURNAL).read_text()
    # the next process opening the root commits what the journal names
    with Knowledge.open(root) as other:
        assert [v.message for v in other.versions("journaled.md")] == ["kiwifs: recommit 1 file(s)"]
    assert git(root, "status", "--porcelain", "--", "journaled.md") == ""


def test_another_process_waits_for_pending_commits_instead_of_taking_them(root: Path) -> None:
    """While this process has writes not yet committed it keeps the cross-process lock, so a
    second opener neither commits them as its own nor writes between them and their commit."""
    with Knowledge.open(root) as kb:
        Serving(kb).enable_async_commit(window=0.3, max_paths=1000)
        kb.write("pending.md", "on disk\n", actor="dave")
        with Knowledge.open(root) as other:  # waits for the batch, then finds nothing to repair
            assert [v.message for v in other.versions("pending.md")] == ["dave: pending.md"]
            other.write("pending.md", "rewritten\n", actor="erin")
    assert git(root, "show", "HEAD:pending.md") == "rewritten\n"
    assert git(root, "status", "--porcelain") == ""


def test_batch_message_keeps_a_single_operation_message() -> None:
    one = [PendingCommit(("x.md",), "eve", "delete: x.md")]
    assert batch_message(one) == ("delete: x.md", None)
    two = [
        PendingCommit(("a.md",), "eve", "eve: a.md", "Provenance: run:1"),
        PendingCommit(("a.md", "b.md"), "eve", "eve: bulk", "Provenance: run:1"),
    ]
    message = "eve: 2 files\n\na.md\nbulk\n  a.md\n  b.md"
    assert batch_message(two) == (message, "Provenance: run:1")
    mixed = [
        PendingCommit(("a.md",), "eve", "eve: a.md"),
        PendingCommit(("b.md",), "eve", "delete: b.md"),
        PendingCommit(("c.md", "d.md"), "eve", "eve: rename c.md \u2192 d.md"),
    ]
    text = "eve: 4 files\n\na.md\ndelete: b.md\nrename c.md \u2192 d.md"
    assert batch_message(mixed) == (text, None)


def outcome(call: Callable[[], list[Version]]) -> BaseException | list[Version]:
    """What ``call`` returned or raised; a guard turns a hang (the bug) into a failure."""
    result: list[BaseException | list[Version]] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)  # a hang guard, not a speed limit: the answer comes in well under 1 s
    assert result, "the call never returned"
    return result[0]


def test_failing_commits_are_storage_errors_not_a_hang(
    async_commit_kb: Knowledge, root: Path
) -> None:
    data = b"# written while git is broken\n"
    fan, data = break_object_store_for(root, data)
    before = commit_count(root)
    async_commit_kb.write("doomed.md", data, actor="alice")  # on disk and journaled: it returns
    failed = outcome(
        lambda: async_commit_kb.versions("doomed.md")
    )  # the flush gives up, not forever
    assert isinstance(failed, StorageError) and "git commit failed" in failed.message
    status = async_commit_kb.commit_status()
    assert (status.failing, status.pending) == (True, 1)
    assert status.error is not None and ".git/objects" in status.error
    assert str(root) not in status.error  # the root's absolute path stays private
    with pytest.raises(StorageError, match="background git commits are failing"):
        async_commit_kb.write("refused.md", "x\n", actor="alice")
    assert not (root / "refused.md").exists()
    assert "doomed.md" in (root / JOURNAL).read_text()
    fan.unlink()  # the disk is repaired: the next flush retries at once and succeeds
    assert [v.author for v in async_commit_kb.versions("doomed.md")] == ["alice"]
    assert async_commit_kb.commit_status().to_json() == {"pending": 0, "failing": False}
    assert commit_count(root) == before + 1
    async_commit_kb.write("accepted.md", "x\n", actor="alice")
    assert len(async_commit_kb.versions("accepted.md")) == 1


def test_close_with_failing_commits_leaves_them_to_the_journal(root: Path) -> None:
    data = b"# never committed by this process\n"
    fan, data = break_object_store_for(root, data)
    kb = Knowledge.open(root)
    Serving(kb).enable_async_commit(window=30.0)
    kb.write("late.md", data, actor="carol")
    kb.close()  # returns (bounded) although the commit cannot be made
    assert "late.md" in (root / JOURNAL).read_text()
    fan.unlink()
    with Knowledge.open(root) as again:  # the next start commits what the journal names
        assert [v.message for v in again.versions("late.md")] == ["kiwifs: recommit 1 file(s)"]


def test_a_synchronous_commit_failure_is_a_storage_error(root: Path) -> None:
    data = b"# sync\n"
    _, data = break_object_store_for(root, data)
    with Knowledge.open(root) as kb, pytest.raises(StorageError, match="git commit failed"):
        kb.write("sync.md", data, actor="dave")
