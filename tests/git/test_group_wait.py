"""The group commit's waits: for the writers the last commit released, never for a lone writer.

The waits are made an hour long here, so that a commit held by them is unmistakable: a wait
that should not happen turns into a failure (a write's wait for its commit gives up after
``HANG_GUARD`` seconds without progress), one that should happen makes a commit certain to
be shared. Real threads and a real repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_group_commit import commits_since, git_lock_held

from gitrepo import commit_count, git
from kiwifs.git.committer import Committer
from kiwifs.git.pendingcommit import PendingCommit
from kiwifs.git.repo import Git
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning
from waiting import wait_for

HOUR = 3600.0
HANG_GUARD = 120.0  # seconds without progress: the wait a lone writer must never meet


LONG_WAITS = Tuning(group_wait=HOUR, group_return=HOUR)


@pytest.fixture
def committer(root: Path) -> Iterator[Committer]:
    repo = Git(root)
    made = Committer(repo, lambda: None, window=0.0, tuning=LONG_WAITS)
    yield made
    made.close(HANG_GUARD)
    repo.close()


def pending_write(path: str) -> PendingCommit:
    return PendingCommit((path,), "alice", f"write {path}", None, {path: f"# {path}\n".encode()})


def test_a_lone_writer_is_never_held(root: Path) -> None:
    """One writer, one write after the other: each commit released only that writer, which is
    back (announced and submitted) when its next commit is taken, so none waits the hour."""
    before = commit_count(root)
    with Knowledge.open(root, tuning=LONG_WAITS) as kb:
        for i in range(3):
            kb.write(f"notes/alone-{i}.md", f"# {i}\n", actor="alice")
    assert commit_count(root) == before + 3


def test_a_commit_waits_for_the_writers_the_last_one_released(
    committer: Committer, root: Path
) -> None:
    """A commit releases the writer of ``a``; ``b`` and ``c`` queued meanwhile wait for that
    writer's next operation, which shares their commit instead of following it alone."""
    before = commit_count(root)
    with git_lock_held(root):
        first = committer.submit(pending_write("notes/a.md"))
        assert wait_for(lambda: committer.pending == 1 and not committer._queue, HANG_GUARD)
        queued = [committer.submit(pending_write(f"notes/{p}.md")) for p in "bc"]
    committer.wait(first, HANG_GUARD)
    assert git(root, "log", "-1", "--name-only", "--format=").split() == ["notes/a.md"]
    committer.announce()  # the released writer's next operation
    last = committer.submit(pending_write("notes/d.md"), announced=True)
    for ticket in [*queued, last]:
        committer.wait(ticket, HANG_GUARD)
    assert [sorted(paths) for _, paths in commits_since(root, before)] == [
        ["notes/a.md"],
        ["notes/b.md", "notes/c.md", "notes/d.md"],
    ]


def test_writers_waiting_for_the_lock_are_waited_for(committer: Committer, root: Path) -> None:
    """An operation announced (its writer waiting for the write lock) holds the commit of what
    is queued until it is submitted; one withdrawn (it wrote nothing) holds it no longer."""
    before = commit_count(root)
    committer.announce()
    committer.announce()
    queued = committer.submit(pending_write("notes/e.md"))
    committer.withdraw()  # the second writer wrote nothing
    last = committer.submit(pending_write("notes/f.md"), announced=True)
    committer.wait(queued, HANG_GUARD)
    committer.wait(last, HANG_GUARD)
    assert [sorted(paths) for _, paths in commits_since(root, before)] == [
        ["notes/e.md", "notes/f.md"]
    ]
