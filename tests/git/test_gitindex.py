"""The git index file's reconcile: HEAD's entry of each differing path taken from the diff
equals a lookup in HEAD's tree, and a burst of commits is reconciled to a clean ``git status``."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitrepo import consistent, git
from kiwifs.git import indexfile
from kiwifs.git.repo import Git
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning

BLOB, EXEC, LINK = (
    pygit2.enums.FileMode.BLOB,
    pygit2.enums.FileMode.BLOB_EXECUTABLE,
    pygit2.enums.FileMode.LINK,
)
SUBMODULE = pygit2.enums.FileMode.COMMIT
NAMES = ["a.md", "b.md", "n", "x.txt"]
paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
states = st.dictionaries(
    paths,
    st.tuples(st.sampled_from([BLOB, EXEC, LINK, SUBMODULE]), st.sampled_from([b"1", b"2"])),
    max_size=8,
)


def oid_of(repo: pygit2.Repository, mode: int, data: bytes) -> pygit2.Oid:
    if mode == SUBMODULE:  # a sub-module's commit need not exist in this repository
        return pygit2.Oid(hex=(data.hex() * 40)[:40])
    return repo.create_blob(data)


def head_tree(repo: pygit2.Repository, files: dict[str, tuple[int, bytes]]) -> pygit2.Tree:
    index = pygit2.Index()
    for path, (mode, data) in files.items():
        index.add(pygit2.IndexEntry(path, oid_of(repo, mode, data), mode))
    tree: pygit2.Tree = repo[index.write_tree(repo)].peel(pygit2.Tree)
    return tree


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(head=states, staged=states)
def test_heads_from_the_diff_equal_lookups_in_the_tree(
    tmp_path_factory: pytest.TempPathFactory,
    head: dict[str, tuple[int, bytes]],
    staged: dict[str, tuple[int, bytes]],
) -> None:
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("r")))
    tree = head_tree(repo, consistent(head))
    index = repo.index
    index.read_tree(tree)
    for path, (mode, data) in consistent(staged).items():
        for existing in [e.path for e in index]:
            if existing.startswith(path + "/") or path.startswith(existing + "/"):
                index.remove(existing)
        index.add(pygit2.IndexEntry(path, oid_of(repo, mode, data), mode))
    differing = indexfile._differing(tree, index)
    expected = set()
    for delta in tree.diff_to_index(index).deltas:
        expected |= {delta.old_file.path, delta.new_file.path}
    assert list(differing) == sorted(expected)
    for path, entry in differing.items():
        assert entry == indexfile._tree_entry(tree, path)


def test_a_burst_of_commits_in_one_folder_is_reconciled(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = Git(root)
    with Knowledge.open(root, tuning=Tuning(group_commit=False), git=repo) as kb:  # one per write
        monkeypatch.setattr(repo._index_syncer, "poke", lambda: True)  # reconciled below
        for i in range(300):
            kb.write(f"burst/f{i:03d}.md", f"# {i}\n", actor="t")
        os.chmod(root / "burst" / "f007.md", 0o755)  # executable now: HEAD's mode is kept
        assert git(root, "status", "--short", "--", "burst/f000.md").strip() != ""
        assert repo._index_file.reconcile()
    assert git(root, "status", "--short").splitlines() == [" M burst/f007.md"]
    assert git(root, "diff", "--cached", "--name-only") == ""


def test_the_sync_thread_ends_when_nothing_is_owed_and_a_poke_starts_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server holding many spaces keeps no sync thread for a space not written to lately;
    a commit after that is still synced."""
    import threading

    monkeypatch.setattr(indexfile, "SYNC_DELAY", 0.01)
    synced = threading.Semaphore(0)

    def sync() -> bool:
        synced.release()
        return True

    syncer = indexfile.BackgroundSync(sync)
    try:
        for _ in range(2):
            before = set(threading.enumerate())
            assert syncer.poke()
            started = {t for t in threading.enumerate() if t.name == "kiwifs-git-index"} - before
            assert len(started) == 1
            assert synced.acquire(timeout=10)
            started.pop().join(timeout=10)  # it ends right after its sync
            assert not any(t.is_alive() for t in set(threading.enumerate()) - before)
    finally:
        syncer.stop()
