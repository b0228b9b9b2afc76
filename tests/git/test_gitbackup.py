"""``[backup]``'s git side (:mod:`kiwifs.git.backup`), against a real bare repository: a push
lands the branch's commits, a remote with commits the root lacks is never overwritten (its
commits kept on a side ref), and git's failures are errors that hide a URL's credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitrepo import git, git_line
from kiwifs.errors import StorageError
from kiwifs.git.backup import DIVERGED_REF, push_branch, redact
from kiwifs.knowledge import Knowledge


def bare(tmp_path: Path, name: str = "remote.git") -> Path:
    path = tmp_path / name
    git(tmp_path, "init", "--quiet", "--bare", str(path))
    return path


def branch_of(root: Path) -> str:
    return git_line(root, "symbolic-ref", "--short", "HEAD")


def test_a_push_lands_the_branch_and_only_it(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    with Knowledge.open(root) as kb:
        kb.write("notes/a.md", "# A\n")
        kb.write("notes/b.md", "# B\n")
    git(root, "update-ref", "refs/kiwifs/other", "HEAD")
    head = git_line(root, "rev-parse", "HEAD")
    branch = branch_of(root)

    outcome = push_branch(root, str(remote))

    assert (outcome.state, outcome.branch, outcome.local) == ("pushed", branch, head)
    assert git_line(remote, "rev-parse", f"refs/heads/{branch}") == head
    assert git(remote, "for-each-ref", "--format=%(refname)").split() == [f"refs/heads/{branch}"]
    assert "notes/a.md" in git(remote, "ls-tree", "-r", "--name-only", branch)
    assert ".kiwi/state" not in git(remote, "ls-tree", "-r", "--name-only", branch)
    # nothing new: nothing to push, the remote is seen to hold it
    assert push_branch(root, str(remote)).state == "up-to-date"


def test_later_writes_are_pushed_as_a_fast_forward(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    push_branch(root, str(remote))
    with Knowledge.open(root) as kb:
        kb.write("notes/c.md", "# C\n")
    for fetch_first in (True, False):
        with Knowledge.open(root) as kb:
            kb.write("notes/c.md", f"# C {fetch_first}\n")
        outcome = push_branch(root, str(remote), fetch_first=fetch_first)
        assert outcome.state == "pushed"
        assert git_line(remote, "rev-parse", branch_of(root)) == git_line(root, "rev-parse", "HEAD")


def test_a_relative_remote_is_relative_to_the_root(root: Path, tmp_path: Path) -> None:
    bare(tmp_path)
    assert push_branch(root, "../remote.git").state == "pushed"


def test_a_diverged_remote_is_kept_and_never_overwritten(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    push_branch(root, str(remote))
    branch = branch_of(root)
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", "--branch", branch, str(remote), str(other))
    (other / "theirs.md").write_text("# Theirs\n")
    git(other, "add", "theirs.md")
    git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "theirs")
    git(other, "push", "--quiet", "origin", f"HEAD:{branch}")
    theirs = git_line(other, "rev-parse", "HEAD")
    with Knowledge.open(root) as kb:
        kb.write("notes/mine.md", "# Mine\n")
    mine = git_line(root, "rev-parse", "HEAD")

    outcome = push_branch(root, str(remote))

    assert (outcome.state, outcome.local, outcome.remote) == ("diverged", mine, theirs)
    assert git_line(remote, "rev-parse", branch) == theirs  # not overwritten
    assert git_line(root, "rev-parse", DIVERGED_REF) == theirs  # kept here too
    assert git_line(root, "rev-parse", "HEAD") == mine  # the served history untouched
    # without the fetch, git itself refuses the push: an error, the remote still untouched
    with pytest.raises(StorageError, match="backup: git push failed"):
        push_branch(root, str(remote), fetch_first=False)
    assert git_line(remote, "rev-parse", branch) == theirs


def test_a_remote_ahead_of_the_root_is_not_rewound(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    with Knowledge.open(root) as kb:
        kb.write("notes/a.md", "# A\n")
        push_branch(root, str(remote))
        kb.write("notes/a.md", "# A again\n")
        push_branch(root, str(remote))
    ahead = git_line(root, "rev-parse", "HEAD")
    git(root, "update-ref", f"refs/heads/{branch_of(root)}", "HEAD~1")  # as if restored

    outcome = push_branch(root, str(remote))

    assert outcome.state == "diverged"
    assert git_line(remote, "rev-parse", branch_of(root)) == ahead


def test_an_unborn_branch_has_nothing_to_push(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    git(tmp_path, "init", "--quiet", str(empty))
    remote = bare(tmp_path)
    assert push_branch(empty, str(remote)).state == "empty"
    assert git(remote, "for-each-ref") == ""


def test_failures_are_errors_that_hide_credentials(root: Path, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="backup: git ls-remote failed"):
        push_branch(root, str(tmp_path / "missing.git"))
    secret_url = "http://kiwi:s3cret-token@127.0.0.1:9/nothing.git"  # port 9: refused at once
    with pytest.raises(StorageError) as failed:
        push_branch(root, secret_url, fetch_first=False)
    assert "s3cret-token" not in failed.value.message
    assert redact(secret_url) == "http://***@127.0.0.1:9/nothing.git"
    assert redact("git@example.com:team/notes.git") == "git@example.com:team/notes.git"


def test_a_command_transport_is_refused(root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(StorageError):
        push_branch(root, f"ext::sh -c touch% {marker}", fetch_first=False)
    assert not marker.exists()
