"""``[backup]`` in a server (:mod:`kiwifs.server.backup`, started by ``Serving``): pushed on the
timer and at shutdown, one shared thread, none for a root without a backup, failures kept in
the status and logged once per change, never failing a write; spaces back up too."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gitrepo import git, git_line
from kiwifs.config import BackupConfig
from kiwifs.knowledge import Knowledge
from kiwifs.server import backup
from kiwifs.server.lifecycle import Serving
from kiwifs.server.spaces import SpaceRegistry
from kiwifs.tuning import Tuning


def bare(tmp_path: Path, name: str = "remote.git") -> Path:
    path = tmp_path / name
    git(tmp_path, "init", "--quiet", "--bare", str(path))
    return path


def configure(root: Path, remote: Path | str, **keys: str) -> None:
    config = root / ".kiwi" / "config.toml"
    lines = [f"{k} = {v!r}" for k, v in {"remote": str(remote), **keys}.items()]
    config.write_text(config.read_text() + "\n[backup]\n" + "\n".join(lines) + "\n")


def remote_head(remote: Path, root: Path) -> str | None:
    branch = git_line(root, "symbolic-ref", "--short", "HEAD")
    found = git(remote, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}")
    return found.strip() or None


def eventually(check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds (a background thread's work); bounded only against a hang."""
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def test_the_last_push_at_shutdown_lands_the_last_writes(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    configure(root, remote, interval="1h")
    kb = Knowledge.open(root)
    serving = Serving(kb)
    serving.start(dashboard=False)
    assert serving.backup is not None
    kb.write("notes/last.md", "# Last\n")
    serving.stop()

    head = git_line(root, "rev-parse", "HEAD")
    assert remote_head(remote, root) == head
    assert backup.status_of(root) is None  # a stopped root is no longer shown


def test_the_timer_pushes_what_was_written(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    configure(root, remote, interval="20ms")
    kb = Knowledge.open(root)
    serving = Serving(kb)
    serving.start(dashboard=False)
    try:
        kb.write("notes/a.md", "# A\n")
        head = git_line(root, "rev-parse", "HEAD")
        eventually(lambda: remote_head(remote, root) == head, "the write pushed")
        eventually(lambda: (backup.status_of(root) or {}).get("pushed_commit") == head, "status")
        status = backup.status_of(root)
        assert status is not None
        assert status["state"] == "ok" and status["last_error"] is None
        assert status["last_push"].endswith("Z") and status["remote"] == str(remote)
    finally:
        serving.stop()


def test_a_root_without_backup_starts_nothing(root: Path) -> None:
    kb = Knowledge.open(root)
    serving = Serving(kb)
    serving.start(dashboard=False)
    try:
        assert serving.backup is None
        assert backup.status_of(root) is None
    finally:
        serving.stop()


def test_pushers_share_one_thread_and_it_ends_with_the_last(tmp_path: Path) -> None:
    scheduler = backup.Scheduler(name="test-backup")
    roots = []
    for name in ("a", "b"):
        roots.append(tmp_path / name)
        Knowledge.init(roots[-1], "blank")
    remote = bare(tmp_path)
    pushers = [backup.Pusher(r, BackupConfig(str(remote), "1h", f"side-{r.name}")) for r in roots]

    def threads() -> int:
        return [t.name for t in threading.enumerate()].count("test-backup")

    for pusher in pushers:
        scheduler.add(pusher)
    assert threads() == 1
    eventually(lambda: all(p.status()["state"] == "ok" for p in pushers), "both pushed")
    assert threads() == 1
    for pusher in pushers:
        scheduler.remove(pusher)
    eventually(lambda: threads() == 0, "the thread ends with the last pusher")


def test_failures_are_logged_once_and_never_fail_writes(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    configure(root, tmp_path / "missing.git", interval="1h")
    kb = Knowledge.open(root)
    serving = Serving(kb)
    serving.start(dashboard=False)
    pusher = serving.backup
    assert pusher is not None
    try:
        with caplog.at_level(logging.WARNING, logger="kiwifs.backup"):
            for i in range(3):
                kb.write(f"notes/n{i}.md", f"# N{i}\n")  # commits whatever the backup says
                pusher.push()
        status = pusher.status()
        assert status["state"] == "failing"
        assert "backup: git ls-remote failed" in status["last_error"]
        assert status["pushed_commit"] is None and status["last_push"] is None
        failing = [r for r in caplog.records if "missing.git" in r.getMessage()]
        assert len(failing) == 1  # once per change of state, not per attempt
        # the remote comes: the next push works, and says so once
        bare(tmp_path, "missing.git")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kiwifs.backup"):
            pusher.push()
        assert pusher.status()["state"] == "ok"
        assert [r.getMessage() for r in caplog.records][-1].endswith("works again")
    finally:
        serving.stop()


def test_a_diverged_remote_is_reported_and_kept(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    branch = git_line(root, "symbolic-ref", "--short", "HEAD")
    other = tmp_path / "other"
    git(tmp_path, "init", "--quiet", "--initial-branch", branch, str(other))
    (other / "theirs.md").write_text("# Theirs\n")
    git(other, "add", "theirs.md")
    git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "theirs")
    git(other, "push", "--quiet", str(remote), f"HEAD:{branch}")
    theirs = git_line(other, "rev-parse", "HEAD")
    configure(root, remote, interval="1h")
    kb = Knowledge.open(root)
    serving = Serving(kb)
    serving.start(dashboard=False)
    pusher = serving.backup
    assert pusher is not None
    try:
        pusher.push()
        status = pusher.status()
        assert status["state"] == "diverged"
        assert status["diverged_commit"] == theirs
        assert "refs/kiwifs/backup-diverged" in status["last_error"]
    finally:
        serving.stop()
    assert remote_head(remote, root) == theirs  # the last push did not overwrite it either
    assert git_line(root, "rev-parse", "refs/kiwifs/backup-diverged") == theirs


def test_a_replica_does_not_push(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    replica = True
    pusher = backup.Pusher(root, BackupConfig(str(remote), "1h"), active=lambda: not replica)
    pusher.push()
    assert pusher.status()["state"] == "paused"
    assert remote_head(remote, root) is None
    replica = False  # promoted
    pusher.push()
    assert remote_head(remote, root) == git_line(root, "rev-parse", "HEAD")


def test_a_space_with_backup_pushes_and_one_without_does_not(root: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path)
    (root / ".kiwi" / "config.toml").write_text(
        '[[spaces]]\nname = "kept"\nroot = "../kept"\n[[spaces]]\nname = "plain"\n'
        'root = "../plain"\n'
    )
    for name in ("kept", "plain"):
        Knowledge.init(tmp_path / name, "blank")
    configure(tmp_path / "kept", remote, interval="1h")
    with Knowledge.open(root) as kb:
        registry = SpaceRegistry(kb, Tuning(), dashboard=False)
        try:
            kept, plain = registry.acquire("kept"), registry.acquire("plain")
            assert kept.serving.backup is not None and plain.serving.backup is None
            kept.kb.write("notes/k.md", "# K\n")
            registry.release(kept)
            registry.release(plain)
        finally:
            registry.close()
    assert remote_head(remote, tmp_path / "kept") == git_line(
        tmp_path / "kept", "rev-parse", "HEAD"
    )
