"""The changes a commit kiwifs made noted as it was made: equal to what git's trees say, or not
noted at all (the timeline then reads them from git)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from commitsteps import Step, settle_batch, steps_of
from kiwifs.git import owncommits
from kiwifs.git.replay import BlobChange, GitHistory
from kiwifs.git.repo import Git, blob_id
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving

NAMES = ["a.md", "b.md", "notes", ".hidden", "x", "sub.md"]
# what a commit is asked to make of a path: bytes written, deleted (None), or read from the
# disk, where the test leaves a file, an executable file, a symbolic link or nothing
steps = steps_of(NAMES, ["write", "delete", "disk-file", "disk-exec", "disk-link", "disk-gone"])
pytestmark = pytest.mark.usefixtures("fresh_records")


def read_back(root: Path, commit: str, parent: str) -> list[BlobChange]:
    """What git's trees say ``commit`` changed (libgit2's diff of the whole trees, nothing
    taken from the noted changes: the plain paths of ``Tuning.timeline_known`` and
    ``timeline_by_folder``)."""
    history = GitHistory(root, known=False, by_folder=False)
    try:
        return history.changes(commit, parent)
    finally:
        history.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=steps, second=steps)
def test_noted_changes_equal_gits_diff(
    tmp_path_factory: pytest.TempPathFactory, first: list[Step], second: list[Step]
) -> None:
    root = tmp_path_factory.mktemp("r")
    git = Git(root)
    git.init()
    git.commit([".gitattributes"], "t", "start")
    for batch in (first, second):
        taken, on_disk = settle_batch(root, batch)
        parent = git.head()
        made = git.commit([*taken, *on_disk], "t", "m", None, taken) if taken or on_disk else None
        if made is None or parent is None:
            continue
        noted = owncommits.lookup(made, parent)
        if noted is not None:
            assert [BlobChange(p, b) for p, b in noted] == read_back(root, made, parent)


def test_plain_writes_and_deletions_are_noted(tmp_path: Path) -> None:
    git = Git(tmp_path)
    git.init()
    git.commit([".gitattributes"], "t", "start")
    first = git.head()
    second = git.commit(
        ["n/a.md", "n/b.md", "n/c.txt"],
        "t",
        "m",
        None,
        {"n/a.md": b"a\n", "n/b.md": b"b\n", "n/c.txt": b"c\n"},
    )
    assert second is not None and first is not None
    assert owncommits.lookup(second, first) == (
        ("n/a.md", blob_id(b"a\n")),
        ("n/b.md", blob_id(b"b\n")),
    )
    third = git.commit(["n/a.md", "n/b.md"], "t", "m", None, {"n/a.md": None, "n/b.md": b"b\n"})
    assert third is not None
    assert owncommits.lookup(third, second) == (("n/a.md", None),)  # b.md did not change
    assert owncommits.lookup(third, first) is None  # not its parent


def test_a_link_is_not_noted(tmp_path: Path) -> None:
    git = Git(tmp_path)
    git.init()
    git.commit([".gitattributes"], "t", "start")
    first = git.head()
    os.symlink("x.md", tmp_path / "l.md")
    made = git.commit(["l.md"], "t", "m")
    assert made is not None and first is not None
    assert owncommits.lookup(made, first) is None


def test_the_commit_process_hands_its_changes_back(root: Path) -> None:
    repo = Git(root)
    with Knowledge.open(root, git=repo) as kb:
        Serving(kb).start_commit_process()
        parent = repo.head()
        kb.write("notes/a.md", "# A\n", actor="alice")
        head = repo.head()
        assert head is not None and head != parent
        noted = owncommits.lookup(head, parent)
        assert noted is not None and [p for p, _ in noted] == ["notes/a.md"]


def test_old_records_are_forgotten_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(owncommits, "MAX_PATHS", 4)
    git = Git(tmp_path)
    git.init()
    git.commit([".gitattributes"], "t", "start")
    made: list[tuple[str, str]] = []
    for i in range(4):
        parent = git.head()
        head = git.commit([f"f{i}.md"], "t", "m", None, {f"f{i}.md": b"%d\n" % i})
        assert head is not None and parent is not None
        made.append((head, parent))
    assert [owncommits.lookup(h, p) is not None for h, p in made] == [False, False, True, True]
