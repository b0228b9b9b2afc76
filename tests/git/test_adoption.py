"""The first import of a root's files into git: made by a child process while a server answers,
the server's commits after it, and an import cut short taken up again at the next start."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from gitrepo import git, git_line
from kiwifs import Knowledge
from kiwifs.errors import StorageError
from kiwifs.git.adoption import MARKER, import_message
from kiwifs.git.repo import Git
from realserver import serving

LONG = 60.0  # a bound only a broken implementation reaches


def _files(root: Path, count: int) -> dict[str, str]:
    made = {}
    for i in range(count):
        rel = f"episodes/2026/{i % 7:02d}/run-{i}.md"
        text = f"---\nmemory_kind: episodic\nepisode_id: run-{i}\n---\nran {i}\n"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        made[rel] = text
    return made


def _committed(root: Path, rel: str) -> str:
    return git(root, "show", f"HEAD:{rel}")


def test_a_server_imports_in_a_child_and_commits_its_writes_after(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    files = _files(root, 1500)
    with serving(root) as (base, _):
        # answered at once, whether the import has ended or not
        put = httpx.put(
            f"{base}/api/kiwi/file",
            params={"path": "notes/new.md"},
            content=b"# New\n\nwritten during the import\n",
            headers={"X-Actor": "agent:test"},
            timeout=LONG,
        )
        assert put.status_code == 200, put.text
        deadline = time.monotonic() + LONG
        while (root / MARKER).exists() or "notes/new.md" not in git(root, "ls-files"):
            assert time.monotonic() < deadline, "the import or the write's commit never came"
            time.sleep(0.1)
    first = git_line(root, "log", "--format=%s", "--reverse").splitlines()[0]
    assert first.startswith("kiwifs: import ") and first.endswith(" existing files")
    assert _committed(root, "notes/new.md") == "# New\n\nwritten during the import\n"
    for rel in list(files)[::97]:
        assert _committed(root, rel) == files[rel]
    assert git(root, "status", "--porcelain") == ""  # every file in HEAD, the git index current


def test_commits_wait_for_the_import_and_fail_with_it(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("a\n")
    repo = Git(root)
    repo.init()
    repo.begin_import()
    assert repo.importing
    made: list[object] = []
    waiting = threading.Thread(target=lambda: made.append(repo.commit(["a.md"], "t", "m")))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and repo.head() is None  # held until the import ends
    repo.end_import(None)
    waiting.join(LONG)
    assert not waiting.is_alive() and made and repo.head() is not None

    repo.begin_import()
    repo.end_import("the disk is full")
    (root / "b.md").write_text("b\n")
    with pytest.raises(StorageError, match="the disk is full"):
        repo.commit(["b.md"], "t", "m")
    repo.close()


def test_an_import_cut_short_is_taken_up_at_the_next_start(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    files = _files(root, 20)
    (root / MARKER).parent.mkdir(parents=True)
    (root / MARKER).touch()  # begun, then the server was killed after one commit
    repo = Git(root)
    repo.init()
    repo.commit(["episodes/2026/00/run-0.md"], "agent:x", "a write journaled before the kill")
    repo.close()
    with Knowledge.open(root) as kb:
        kb.ensure_versioned()
    assert not (root / MARKER).exists()
    # the 19 files not committed yet, and the .gitattributes the repository was made with
    assert git_line(root, "log", "-1", "--format=%s") == import_message("kiwifs", 20)
    assert all(_committed(root, rel) == text for rel, text in files.items())


def test_a_repository_without_the_marker_is_left_as_it_is(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    _files(root, 3)
    Git(root).init()  # a user's own `git init`: kiwifs imports nothing behind their back
    with Knowledge.open(root) as kb:
        kb.ensure_versioned()
    assert Git(root).head() is None


def test_a_write_waiting_on_the_import_is_told_so(tmp_path: Path) -> None:
    """A commit wait that times out while the import runs names the import and what became of
    the write; the write is committed once the import ends."""
    from kiwifs.git.committer import Committer
    from kiwifs.git.pendingcommit import PendingCommit

    root = tmp_path / "kb"
    root.mkdir()
    repo = Git(root)
    repo.init()
    committer = Committer(repo, lambda: None, window=0.05)
    repo.begin_import()
    (root / "a.md").write_text("# A\n")  # a write answered: on disk (and journaled)
    committer.submit(PendingCommit(("a.md",), "alice", "alice: a.md"))
    with pytest.raises(StorageError, match="first import of the root's files"):
        committer.flush(timeout=0.3)
    repo.end_import(None)
    committer.flush()
    committer.close()
    repo.close()
    assert _committed(root, "a.md") == "# A\n"


@pytest.mark.parametrize("pack_at", [1, 0])
def test_the_import_packs_its_objects_as_the_tuning_says(tmp_path: Path, pack_at: int) -> None:
    from kiwifs.git.adoption import Adoption
    from kiwifs.git.packing import loose
    from waiting import wait_for

    root = tmp_path / "kb"
    root.mkdir()
    _files(root, 30)
    repo = Git(root, pack_at=pack_at)
    Adoption(repo, "kiwifs").start()
    assert wait_for(lambda: not repo.importing, LONG)
    # the 30 files and the .gitattributes the repository was made with
    assert git_line(root, "log", "-1", "--format=%s") == import_message("kiwifs", 31)
    objects = root / ".git" / "objects"
    if pack_at:  # the child's commit starts a packing (30 files: more than 8x the threshold)
        assert wait_for(lambda: loose(objects, exact=True)[0] == 0, LONG)
    else:
        assert loose(objects, exact=True)[0] > 30  # a blob a file, and trees and the commit
    repo.close()
