"""Group commit, the default: concurrent writers share commits, each returns once committed.

To make the sharing certain rather than likely, a test holds ``.kiwi/state/git.lock`` (the
``flock`` every kiwifs commit takes, as another process's commit would): the first commit then
waits, the writes that come meanwhile queue up behind it, and once the lock is released they are
committed together. Real threads, a real repository and a real ``kiwifs serve``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx

import realserver
from gitrepo import break_object_store_for, commit_count, git
from kiwifs.errors import KiwiError, StorageError
from kiwifs.git.indexfile import LOCK_FILE
from kiwifs.knowledge import Knowledge
from waiting import wait_for

HANG_GUARD = 120.0  # seconds: turns a hang (the bug) into a failure; the waits take far less


@contextlib.contextmanager
def git_lock_held(root: Path) -> Iterator[None]:
    """Hold the commit lock, as another process committing would: kiwifs commits wait."""
    (root / LOCK_FILE).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def head_files(root: Path) -> set[str]:
    return set(git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines())


def commits_since(root: Path, before: int) -> list[tuple[str, list[str]]]:
    """(author, paths) of each commit made since there were ``before`` commits, oldest first."""
    out = git(root, "log", f"-{commit_count(root) - before}", "--format=%x00%an", "--name-only")
    commits = []
    for record in out.split("\0")[1:]:
        author, *paths = [line for line in record.splitlines() if line]
        commits.append((author, paths))
    return commits[::-1]


class Writers:
    """Threads writing one file each through the core, recording what each call did."""

    def __init__(self, kb: Knowledge, root: Path) -> None:
        self.kb, self.root = kb, root
        self.threads: list[threading.Thread] = []
        self.outcome: dict[str, BaseException | bool] = {}

    def start(self, path: str, content: bytes | str, actor: str, provenance: bool = True) -> None:
        def run() -> None:
            try:
                prov = f"run:{actor}" if provenance else None  # it adds a line to the file
                self.kb.write(path, content, actor=actor, provenance=prov)
            except KiwiError as exc:
                self.outcome[path] = exc
                return
            # acknowledged: already in HEAD (nothing here deletes)
            self.outcome[path] = path in head_files(self.root)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(HANG_GUARD)
        assert len(self.outcome) == len(self.threads), "a write never returned"


def pending(kb: Knowledge) -> int:
    return kb.commit_status().pending


def test_concurrent_writers_share_commits_and_return_committed(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    writers = Writers(kb, root)
    with git_lock_held(root):
        for i in range(6):
            writers.start(f"notes/n{i}.md", f"# note {i}\n", "alice")
        # the first commit waits, the rest queue up
        assert wait_for(lambda: pending(kb) == 6, HANG_GUARD)
        assert writers.outcome == {}  # no write returns before its commit
    writers.join()
    assert writers.outcome == {f"notes/n{i}.md": True for i in range(6)}
    commits = commits_since(root, before)
    assert len(commits) <= 2  # the one that was waiting, then everything queued behind it
    assert {p for _, paths in commits for p in paths} == {f"notes/n{i}.md" for i in range(6)}
    shared = git(root, "log", "-1", "--format=%B")
    assert shared.startswith("alice: ") and "Provenance: run:alice" in shared
    assert (root / ".kiwi/state/uncommitted.log").read_text() == ""  # emptied once idle


def test_concurrent_appends_share_commits(kb: Knowledge, root: Path) -> None:
    """An append passes the claims check under the lock, then waits for its commit outside it,
    like any write: while git is busy, every appender is queued for the next commit (one that
    waited for its commit under the lock held all the others off, one commit each)."""
    for i in range(4):
        kb.write(f"logs/l{i}.md", f"# log {i}\n", actor="alice")
    before = commit_count(root)
    done: list[str] = []

    def append(i: int) -> None:
        kb.append(f"logs/l{i}.md", f"line {i}\n", actor="alice")
        done.append(f"logs/l{i}.md")

    threads = [threading.Thread(target=append, args=(i,), daemon=True) for i in range(4)]
    with git_lock_held(root):
        for thread in threads:
            thread.start()
        assert wait_for(lambda: pending(kb) == 4, 30), "appends waited for each other's commits"
    for thread in threads:
        thread.join(HANG_GUARD)
    assert sorted(done) == [f"logs/l{i}.md" for i in range(4)]
    assert len(commits_since(root, before)) <= 2


def test_each_shared_commit_has_the_author_of_its_writes(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    writers = Writers(kb, root)
    actors = {}
    with git_lock_held(root):
        for round_, actor in enumerate(["alice", "bob", "alice"]):
            for i in range(3):
                path = f"{actor}/r{round_}-{i}.md"
                actors[path] = actor
                writers.start(path, f"by {actor}\n", actor)
            assert wait_for(lambda n=3 * (round_ + 1): pending(kb) == n, HANG_GUARD)  # type: ignore[misc]
    writers.join()
    assert all(ok is True for ok in writers.outcome.values()), writers.outcome
    commits = commits_since(root, before)
    assert len(commits) < len(actors)  # shared...
    for author, paths in commits:  # ...but never across authors
        assert {actors[p] for p in paths} == {author}
    assert sorted(p for _, paths in commits for p in paths) == sorted(actors)


def test_a_git_failure_fails_every_writer_of_the_group(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    fan, doomed = break_object_store_for(root, b"# git cannot store this\n")
    writers = Writers(kb, root)
    with git_lock_held(root):
        for i in range(4):  # the same bytes: every commit holding one of them fails
            writers.start(f"doomed/d{i}.md", doomed, "carol", provenance=False)
        assert wait_for(lambda: pending(kb) == 4, HANG_GUARD)
    writers.join()
    for path, outcome in writers.outcome.items():
        assert isinstance(outcome, StorageError), (path, outcome)
        assert "git commit failed" in outcome.message
        assert (root / path).read_bytes() == doomed  # on disk, and journaled...
        assert path in (root / ".kiwi/state/uncommitted.log").read_text()
    assert commit_count(root) == before
    fan.unlink()  # ...so once git works again they are committed after all
    kb.close()  # commits what is pending, and writes the git index file (else done after 1 s)
    assert {f"doomed/d{i}.md" for i in range(4)} <= head_files(root)
    assert git(root, "status", "--porcelain") == ""


def test_a_bulk_write_waits_for_the_queue_and_commits_alone(kb: Knowledge, root: Path) -> None:
    """A bulk commits under the lock (to undo itself if git fails): what was queued before it is
    committed first, so history keeps the order of the disk writes."""
    before = commit_count(root)
    writers = Writers(kb, root)
    bulk_done: list[int] = []
    with git_lock_held(root):
        writers.start("shared.md", "by a single write\n", "alice")
        assert wait_for(lambda: pending(kb) == 1, HANG_GUARD)
        bulk = threading.Thread(
            target=lambda: bulk_done.append(
                len(kb.bulk_write([("shared.md", "by the bulk\n"), ("b.md", "b\n")], actor="bob"))
            ),
            daemon=True,
        )
        bulk.start()
    writers.join()
    bulk.join(HANG_GUARD)
    assert bulk_done == [2]
    assert (
        git(root, "show", "HEAD:shared.md") == "by the bulk\n" == (root / "shared.md").read_text()
    )
    assert [author for author, _ in commits_since(root, before)] == ["alice", "bob"]


# -- through a real server ----------------------------------------------------------------------


@contextlib.contextmanager
def served(root: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with realserver.serving(root, probe="/health") as pair:
        yield pair


def server_pending(base: str) -> int:
    return int(httpx.get(base + "/health", timeout=HANG_GUARD).json()["commits"]["pending"])


def put_in_threads(base: str, paths: list[str]) -> tuple[list[threading.Thread], dict[str, int]]:
    statuses: dict[str, int] = {}

    def put(path: str) -> None:
        try:
            with httpx.Client(base_url=base, timeout=HANG_GUARD) as client:
                resp = client.put("/api/kiwi/file", params={"path": path}, content=f"# {path}\n")
            statuses[path] = resp.status_code
        except httpx.TransportError:
            statuses[path] = 0  # the server went away: not acknowledged

    threads = [threading.Thread(target=put, args=(p,), daemon=True) for p in paths]
    for thread in threads:
        thread.start()
    return threads, statuses


def test_concurrent_puts_to_a_real_server_share_commits(root: Path) -> None:
    paths = [f"served/s{i}.md" for i in range(6)]
    with served(root) as (base, _):
        before = commit_count(root)
        with git_lock_held(root):
            threads, statuses = put_in_threads(base, paths)
            assert wait_for(lambda: server_pending(base) == len(paths), HANG_GUARD)
            assert statuses == {}
        for thread in threads:
            thread.join(HANG_GUARD)
        assert statuses == dict.fromkeys(paths, 200)
        assert 1 <= commit_count(root) - before <= 2
        for path in paths:
            assert git(root, "show", f"HEAD:{path}") == (root / path).read_text() == f"# {path}\n"


def test_kill_9_while_writers_wait_for_a_group_commit(root: Path) -> None:
    """Writes on disk and journaled, their commit not made, none acknowledged: the next start
    commits them, and git status is clean."""
    paths = [f"waiting/w{i}.md" for i in range(5)]
    with served(root) as (base, proc):
        with git_lock_held(root):
            threads, statuses = put_in_threads(base, paths)
            assert wait_for(lambda: server_pending(base) == len(paths), HANG_GUARD)
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
        for thread in threads:
            thread.join(HANG_GUARD)
    assert statuses == dict.fromkeys(paths, 0)  # nobody was told the write was done
    with Knowledge.open(root) as kb:
        assert set(paths) <= head_files(root)
        assert [v.message for v in kb.versions(paths[0])] == ["kiwifs: recommit 5 file(s)"]
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
