"""The repository's loose objects packed in the background, with nothing lost or changed."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from gitrepo import commit_count, git, git_line
from kiwifs.git.packing import LOCK, loose
from kiwifs.git.repack import PACKS_AT, main, packs
from kiwifs.git.repo import Git
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning
from waiting import wait_for

COMMITS = 200


def _commit(g: Git, rel: str, text: str) -> None:
    path = g.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    g.commit([rel], "alice", f"write {rel}")


def _history(root: Path) -> dict[str, str]:
    """Each file's versions as ``git log`` prints them, and every file's bytes at each commit."""
    files = git(root, "ls-files").split()
    seen = {rel: git(root, "log", "--format=%H %an %s", "--", rel) for rel in files}
    seen["all"] = git(root, "log", "-p", "--format=%H %s")
    return seen


def _loose(root: Path) -> int:
    return loose(root / ".git" / "objects", exact=True)[0]


def test_loose_objects_are_packed_and_history_reads_the_same(root: Path) -> None:
    g = Git(root, pack_at=0)  # commits never pack here
    for n in range(40):
        _commit(g, f"notes/{n % 7}/page-{n}.md", f"# page {n}\n\nversion {n}\n")
    before = _history(root)
    assert _loose(root) > 100
    assert not g.packer.check()  # pack_at 0: never

    packer = Git(root, pack_at=1).packer
    assert packer.check()
    packer.wait(60)
    assert _loose(root) == 0
    counted = dict(line.split(": ") for line in git(root, "count-objects", "-v").splitlines())
    assert counted["count"] == "0" and int(counted["in-pack"]) > 100
    assert (root / ".git" / "objects" / "info" / "commit-graph").is_file()
    assert _history(root) == before
    git(root, "fsck", "--strict")
    g.close()


def test_commits_made_while_packing_lose_nothing(root: Path) -> None:
    """Packing over and over while commits go on through one libgit2 handle: every commit
    reaches HEAD, each file's last bytes are in git, and the repository checks clean. (Without
    the commit's second attempt, about one run in two failed: an object folder deleted by the
    packing just as libgit2 moved an object into it.)"""
    g = Git(root, pack_at=0)
    done = threading.Event()
    packed = []

    def packer() -> None:
        while not done.is_set():
            packed.append(main([os.fspath(root)]))

    start = commit_count(root)
    thread = threading.Thread(target=packer)
    thread.start()
    try:
        for n in range(COMMITS):
            _commit(g, f"notes/{n % 5}/page-{n % 30}.md", f"# page {n}\n")
    finally:
        done.set()
        thread.join()
    assert packed and set(packed) == {0}
    assert commit_count(root) == start + COMMITS
    for n in range(COMMITS - 30, COMMITS):  # the last version of each page
        rel = f"notes/{n % 5}/page-{n % 30}.md"
        assert git(root, "show", f"HEAD:{rel}") == f"# page {n}\n"
        blob = g.repo[g.repo.head.peel().tree[rel].id]
        assert blob.data == f"# page {n}\n".encode()
    git(root, "fsck", "--strict")
    g.close()


def test_a_packing_under_way_is_not_started_again(root: Path) -> None:
    g = Git(root, pack_at=0)
    for n in range(5):
        _commit(g, f"page-{n}.md", f"{n}\n")
    loose_before = _loose(root)
    fd = os.open(root / ".git" / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held, as by a packing child of another process
        assert not Git(root, pack_at=1).packer.check()
        assert main([os.fspath(root)]) == 0  # the child: nothing to do
        assert _loose(root) == loose_before
    finally:
        os.close(fd)
    assert main([os.fspath(root)]) == 0
    assert _loose(root) == 0
    g.close()


def test_the_estimate_counts_a_folder_of_objects_as_git_does(root: Path) -> None:
    g = Git(root, pack_at=0)
    for n in range(60):
        _commit(g, f"page-{n}.md", f"{n}\n")
    objects = root / ".git" / "objects"
    count, size = loose(objects, exact=True)
    assert count == int(
        dict(x.split(": ") for x in git(root, "count-objects", "-v").splitlines())["count"]
    )
    assert size == sum(p.stat().st_size for p in objects.glob("[0-9a-f][0-9a-f]/*"))
    sampled = len(list((objects / "17").glob("*"))) if (objects / "17").is_dir() else 0
    assert loose(objects)[0] == sampled * 256
    g.close()


@pytest.mark.parametrize("at", [1, 0])
def test_a_write_packs_the_loose_objects_once_the_tuning_says(root: Path, at: int) -> None:
    with Knowledge.open(root, tuning=Tuning(pack_loose_objects=at)) as kb:
        kb.write("notes/a.md", "# A\n", actor="alice")
        if at:
            assert wait_for(lambda: _loose(root) == 0)
        else:
            assert _loose(root) > 0
        assert git_line(root, "show", "HEAD:notes/a.md") == "# A"


def test_packing_runs_no_program_the_repository_names(root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\n")
    script.chmod(0o755)
    hooks = root / ".git" / "hooks"
    for hook in ("pre-auto-gc", "post-checkout", "reference-transaction", "post-index-change"):
        (hooks / hook).write_bytes(script.read_bytes())
        (hooks / hook).chmod(0o755)
    with open(root / ".git" / "config", "a") as config:
        config.write(
            f"[core]\n\tfsmonitor = {script}\n\tpager = {script}\n\tsshCommand = {script}\n"
            f"[uploadpack]\n\tpackObjectsHook = {script}\n[gc]\n\tauto = 1\n"
        )
    g = Git(root, pack_at=0)
    for n in range(10):
        _commit(g, f"page-{n}.md", f"{n}\n")
    assert main([os.fspath(root)]) == 0
    assert _loose(root) == 0
    assert not marker.exists()
    g.close()


def test_once_packs_pile_up_a_packing_makes_them_one(root: Path) -> None:
    g = Git(root, pack_at=0)
    for n in range(PACKS_AT):
        _commit(g, f"notes/page-{n % 4}.md", f"version {n}\n")
        git(root, "repack", "-d", "-q")  # a pack per commit, as a packing after each
    before = _history(root)
    assert packs(root) == PACKS_AT
    assert main([os.fspath(root)]) == 0
    assert packs(root) == 1
    assert _loose(root) == 0
    assert _history(root) == before
    git(root, "fsck", "--strict")
    g.close()


def test_a_check_in_the_gap_after_a_packing_looks_again_by_itself(root: Path) -> None:
    """The loose objects of a burst of commits are packed after it, with no commit to ask."""
    g = Git(root, pack_at=0)
    packer = Git(root, pack_at=1).packer
    _commit(g, "a.md", "a\n")
    assert packer.check()
    packer.wait(60)
    assert _loose(root) == 0
    for n in range(5):
        _commit(g, f"page-{n}.md", f"{n}\n")
    assert not packer.check()  # within the gap a packing leaves (nine times its length)
    assert _loose(root) > 0
    assert wait_for(lambda: _loose(root) == 0, timeout=60)
    packer.close()
    g.close()


def test_a_packing_that_fails_is_logged_and_writes_go_on(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    packs_folder = root / ".git" / "objects" / "pack"
    shutil.rmtree(packs_folder)
    packs_folder.write_text("not a folder\n")  # git can write no pack here
    g = Git(root, pack_at=1)
    with caplog.at_level(logging.WARNING, logger="kiwifs.git.packing"):
        _commit(g, "a.md", "a\n")  # its check waits for a pause in commits, then packs
        assert wait_for(lambda: "packing git objects failed" in caplog.text)
    _commit(g, "b.md", "b\n")
    assert git(root, "show", "HEAD:a.md") == "a\n" and git(root, "show", "HEAD:b.md") == "b\n"
    assert _loose(root) > 0
    g.close()
