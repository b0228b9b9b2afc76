"""The timeline's reader of history: the changes of a commit, read folder by folder where the
trees differ, equal to libgit2's diff of the whole trees (its former way)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitrepo import consistent
from kiwifs.git import replay
from kiwifs.git.replay import BlobChange, GitHistory

NAMES = ["a.md", "b.md", "notes", "x", ".hidden", "z.md", "sub.md"]
MODES = [
    pygit2.enums.FileMode.BLOB,
    pygit2.enums.FileMode.BLOB_EXECUTABLE,
    pygit2.enums.FileMode.LINK,
]
Files = dict[str, tuple[int, bytes]]

paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
entries = st.tuples(st.sampled_from(MODES), st.sampled_from([b"one\n", b"two\n", b"three\n"]))
trees = st.dictionaries(paths, entries, max_size=12)


def write_tree(repo: pygit2.Repository, files: Files) -> pygit2.Oid:
    folders: dict[str, dict[str, tuple[pygit2.Oid, int]]] = {"": {}}
    for path, (mode, data) in files.items():
        parent, _, name = path.rpartition("/")
        folders.setdefault(parent, {})[name] = (repo.create_blob(data), mode)
        while parent:  # make every folder on the way known to its parent
            grand, _, child = parent.rpartition("/")
            folders.setdefault(grand, {}).setdefault(child, (pygit2.Oid(hex="0" * 40), -1))
            parent = grand
    written: dict[str, pygit2.Oid] = {}
    for folder in sorted(folders, key=lambda f: -f.count("/") if f else 1):
        builder = repo.TreeBuilder()
        for name, (oid, mode) in folders[folder].items():
            if mode == -1:
                child = f"{folder}/{name}" if folder else name
                builder.insert(name, written[child], pygit2.enums.FileMode.TREE)
            else:
                builder.insert(name, oid, mode)
        written[folder] = builder.write()
    return written[""]


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[pygit2.Repository]:
    yield pygit2.init_repository(str(tmp_path / "r"))


def commit(repo: pygit2.Repository, files: Files, parents: list[pygit2.Oid]) -> pygit2.Oid:
    sig = pygit2.Signature("t", "t@example.invalid", 1_700_000_000, 0)
    return repo.create_commit(None, sig, sig, "m", write_tree(repo, files), parents)


def both_ways(
    repo: pygit2.Repository, old: Files, new: Files
) -> tuple[list[BlobChange], list[BlobChange]]:
    """The changes read folder by folder, and by one diff of the whole trees (the plain path,
    ``Tuning.timeline_by_folder`` off)."""
    first = commit(repo, old, [])
    second = commit(repo, new, [first])
    pruned = GitHistory(Path(repo.workdir)).changes(str(second), str(first))
    whole = GitHistory(Path(repo.workdir), by_folder=False).changes(str(second), str(first))
    return pruned, whole


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(old=trees, new=trees, big=st.sampled_from([1024, 1, 3]))
def test_changes_equal_libgit2s_diff_of_the_whole_trees(
    repo: pygit2.Repository,
    monkeypatch: pytest.MonkeyPatch,
    old: Files,
    new: Files,
    big: int,
) -> None:
    monkeypatch.setattr(replay, "BIG_TREE", big)  # 1, 3: libgit2 compares inner folders
    pruned, whole = both_ways(repo, consistent(old), consistent(new))
    assert pruned == whole


def test_a_change_deep_in_a_big_root_reads_only_its_path(repo: pygit2.Repository) -> None:
    files: Files = {f"bulk/f{i:04d}.md": (pygit2.enums.FileMode.BLOB, b"x\n") for i in range(3000)}
    files["episodes/2026-12-01/e1.md"] = (pygit2.enums.FileMode.BLOB, b"one\n")
    after = dict(files)
    after["episodes/2026-12-01/e2.md"] = (pygit2.enums.FileMode.BLOB, b"two\n")
    del after["bulk/f0007.md"]
    pruned, whole = both_ways(repo, files, after)
    blob = str(pygit2.hash(b"two\n"))
    assert (
        pruned
        == whole
        == [
            BlobChange("bulk/f0007.md", None),
            BlobChange("episodes/2026-12-01/e2.md", blob),
        ]
    )
