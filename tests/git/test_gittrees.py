"""Trees written from kept entries (kiwifs.git.trees) equal libgit2's tree builder's, commit after
commit: same tree ids, same noted changes, a repository git fsck finds clean."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commitsteps import Step, settle_batch, steps_of
from gitrepo import git
from kiwifs.errors import StorageError
from kiwifs.git import owncommits
from kiwifs.git.repo import Git
from kiwifs.git.trees import Entries, TreeCache

# names whose order is git's own business: "a" as a folder sorts as "a/", after "a-b" and
# "a.md" but before "a0"; upper case, non-ASCII and long names too
NAMES = ["a", "a.md", "a-b", "a0", "ab", "A", "é.md", "x" * 40]
steps = steps_of(NAMES, ["write", "write", "delete", "disk-exec", "disk-link"])
pytestmark = pytest.mark.usefixtures("fresh_records")


def started(root: Path, kept_trees: bool = True) -> Git:
    """A repository with one commit; ``kept_trees=False``: libgit2's tree builder (the plain
    path, ``Tuning.kept_trees`` off)."""
    repo = Git(root, kept_trees)
    repo.init()
    repo.commit([".gitattributes"], "t", "start")
    return repo


def tree_of(repo: Git) -> str:
    head = repo.repo.head.peel(pygit2.Commit)
    return str(head.tree_id)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(steps, min_size=1, max_size=4))
def test_trees_equal_the_tree_builders(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[Step]]
) -> None:
    roots = {mode: tmp_path_factory.mktemp(mode or "entries") for mode in ("", "builder")}
    repos = {mode: started(root, kept_trees=not mode) for mode, root in roots.items()}
    for number, batch in enumerate(batches):
        noted = {}
        for mode, repo in repos.items():
            taken, on_disk = settle_batch(roots[mode], batch)
            parent = repo.head()
            made = repo.commit([*taken, *on_disk], "t", "m", None, taken)
            noted[mode] = owncommits.lookup(made, parent) if made and parent else made
        assert tree_of(repos[""]) == tree_of(repos["builder"])
        assert (noted[""] is None) == (noted["builder"] is None)
        if number == 1:  # a commit by another process: the kept entries are not HEAD's
            other = Git(roots[""])
            other.commit([".gitattributes"], "t", "m", None, {".gitattributes": b"other\n"})
            other.close()
            repos["builder"].commit(
                [".gitattributes"], "t", "m", None, {".gitattributes": b"other\n"}
            )
    git(roots[""], "fsck", "--strict")


def test_a_month_of_files_in_one_folder(tmp_path: Path) -> None:
    """Many commits into one big folder, from kept entries: every tree is git's."""
    repo = started(tmp_path)
    for i in range(300):
        rel = f"episodes/2026/11/{(i * 7919) % 1000:04d}-run.md"
        repo.commit([rel], "t", "m", None, {rel: f"{i}\n".encode()})
    repo.kept_trees = False  # the last commit by libgit2's tree builder
    rel = "episodes/2026/11/zzzz.md"
    made = repo.commit([rel], "t", "m", None, {rel: b"z\n"})
    assert made is not None
    listed = git(tmp_path, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert listed == sorted(listed, key=os.fsencode)
    assert (
        len([p for p in listed if p.startswith("episodes/")])
        == len({(i * 7919) % 1000 for i in range(300)}) + 1
    )
    git(tmp_path, "fsck", "--strict")


@pytest.mark.parametrize("name", ["git~1", "GIT~1"])
def test_names_git_refuses_are_refused(tmp_path: Path, name: str) -> None:
    repo = started(tmp_path)
    head = repo.head()
    with pytest.raises(StorageError):
        repo.commit([f"{name}/a.md"], "t", "m", None, {f"{name}/a.md": b"a\n"})
    with pytest.raises(StorageError):
        repo.commit([name], "t", "m", None, {name: b"a\n"})
    assert repo.head() == head


def test_entries_parse_and_write_back_git_s_bytes(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path))
    blob = repo.create_blob(b"x")
    builder = repo.TreeBuilder()
    sub = repo.TreeBuilder().write()
    for name in ("b.md", "a-b", "a0", "a.md"):
        builder.insert(name, blob, pygit2.GIT_FILEMODE_BLOB)
    builder.insert("a", sub, pygit2.GIT_FILEMODE_TREE)
    raw = repo[builder.write()].read_raw()
    entries = Entries.parse(raw)
    assert entries.data() == raw
    assert entries.keys == [b"a-b", b"a.md", b"a/", b"a0", b"b.md"]
    assert entries.get(b"a") == (sub.raw, 0o040000)
    assert entries.get(b"a.md") == (blob.raw, 0o100644)
    assert entries.get(b"zz") is None
    entries.put(b"a", blob.raw, 0o100755)  # a file where the folder was: one entry still
    assert entries.keys == [b"a", b"a-b", b"a.md", b"a0", b"b.md"]
    entries.remove(b"a-b")
    entries.remove(b"nothing")
    assert len(entries) == 4


def test_entries_out_of_order_are_put_in_order() -> None:
    oid = bytes(20)
    raw = b"100644 b\0" + oid + b"100644 a\0" + oid
    entries = Entries.parse(raw)
    assert entries.keys == [b"a", b"b"]
    for damaged in (
        b"100644 a\0" + oid[:5],  # an id cut short
        b"100644 a\0" + oid + b"junk" + b"100644 b\0" + oid,  # bytes between two entries
        b"100644 \0" + oid,  # no name
    ):
        with pytest.raises(StorageError):
            Entries.parse(damaged)


def test_the_cache_keeps_the_last_trees_within_its_limit(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path))
    blob = repo.create_blob(b"x").raw
    cache = TreeCache(limit=5)
    made, written = [], []
    for n in range(4):
        entries = Entries()
        for i in range(n + 1):
            entries.put(f"f{i}".encode(), blob, 0o100644)
        made.append(entries)
        written.append(cache.write(repo, entries))
    # trees of 1, 2, 3 and 4 entries against a limit of 5: only the last one is kept
    assert cache.take(repo, written[3]) is made[3]
    assert cache.take(repo, written[3]) is not made[3]  # taken: read again from git
    again = cache.take(repo, written[2])
    assert again is not made[2] and again.data() == repo[written[2]].read_raw()
    assert cache.take(repo, None).data() == b""
