"""A replica's git side (:mod:`kiwifs.git.follow`): a fast-forward writes exactly what the
fetched commits changed and moves the branch, and refuses a replica that has a commit of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kiwifs.errors import Conflict
from kiwifs.git import follow
from kiwifs.knowledge import Knowledge


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True)
    return done.stdout.decode().strip()


def tracked(root: Path) -> dict[str, bytes]:
    """Every file git tracks at HEAD, with its bytes on disk."""
    return {
        rel: (root / rel).read_bytes()
        for rel in git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    }


def fetched(replica: Path, primary: Path) -> str:
    git(replica, "fetch", "--quiet", str(primary), f"+HEAD:{follow.FETCHED_REF}")
    return git(replica, "rev-parse", follow.FETCHED_REF)


def test_a_fast_forward_writes_what_the_commits_changed(
    knowledge_root: Path, tmp_path: Path
) -> None:
    replica = tmp_path / "replica"
    git(tmp_path, "clone", "--quiet", str(knowledge_root), str(replica))
    with Knowledge.open(knowledge_root) as kb:
        kb.write("concepts/new.md", "# New\n")
        kb.write("index.md", "# Changed\n")
        kb.delete("log.md")
        kb.rename("episodes/example-episode.md", "episodes/2026/moved.md")
    target = fetched(replica, knowledge_root)
    changes = follow.fast_forward(replica, target)
    assert git(replica, "rev-parse", "HEAD") == target == git(knowledge_root, "rev-parse", "HEAD")
    assert tracked(replica) == tracked(knowledge_root)
    assert (
        not (replica / "log.md").exists() and not (replica / "episodes/example-episode.md").exists()
    )
    assert {(c.path, c.op) for c in changes} == {
        ("concepts/new.md", "write"),
        ("index.md", "write"),
        ("log.md", "delete"),
        ("episodes/example-episode.md", "delete"),
        ("episodes/2026/moved.md", "write"),
    }
    assert follow.fast_forward(replica, target) == []  # nothing new: nothing done


def test_a_replica_with_a_commit_of_its_own_is_refused_or_keeps_it_aside(
    knowledge_root: Path, tmp_path: Path
) -> None:
    replica = tmp_path / "replica"
    git(tmp_path, "clone", "--quiet", str(knowledge_root), str(replica))
    (replica / "mine.md").write_text("# mine\n")
    git(replica, "add", "mine.md")
    git(replica, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "mine")
    own = git(replica, "rev-parse", "HEAD")
    with Knowledge.open(knowledge_root) as kb:
        kb.write("theirs.md", "# theirs\n")
    target = fetched(replica, knowledge_root)
    with pytest.raises(Conflict, match="not an ancestor"):
        follow.fast_forward(replica, target)
    assert git(replica, "rev-parse", "HEAD") == own and not (replica / "theirs.md").exists()
    assert follow.diverged(replica) == []
    # a former primary rejoining: its own commit kept on a ref of its own, then it follows
    changes = follow.fast_forward(replica, target, keep_diverged=True)
    assert follow.diverged(replica) == [own]
    assert git(replica, "cat-file", "-p", f"{own}:mine.md") == "# mine"  # not lost
    assert git(replica, "rev-parse", "HEAD") == target
    assert tracked(replica) == tracked(knowledge_root) and not (replica / "mine.md").exists()
    assert ("mine.md", "delete") in {(c.path, c.op) for c in changes}


def test_an_empty_replica_takes_every_file(knowledge_root: Path, tmp_path: Path) -> None:
    replica = tmp_path / "replica"
    replica.mkdir()
    git(replica, "init", "--quiet", "-b", git(knowledge_root, "branch", "--show-current"))
    target = fetched(replica, knowledge_root)
    follow.fast_forward(replica, target)
    assert tracked(replica) == tracked(knowledge_root)
    assert git(replica, "rev-parse", "HEAD") == target
