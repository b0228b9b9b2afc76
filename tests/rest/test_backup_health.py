"""``GET /health``'s ``backup`` object: shown only with a ``[backup]``; a failing remote is
reported there (still 200) while writes go on; a working one names the commit it holds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from asgiclient import AppClient, app_on
from gitrepo import git, git_line

API = "/api/kiwi"


def configure(root: Path, remote: Path) -> None:
    config = root / ".kiwi" / "config.toml"
    config.write_text(
        config.read_text() + f"\n[backup]\nremote = {str(remote)!r}\ninterval = '1h'\n"
    )


def backup_when(client: AppClient, done: Any) -> dict[str, Any]:
    """``/health``'s backup object once ``done(it)`` holds (the first push runs in the
    background as the server starts); bounded only against a hang."""
    deadline = time.monotonic() + 60
    while True:
        answer = client.get("/health")
        assert answer.status_code == 200
        found: dict[str, Any] = answer.json()["backup"]
        if done(found):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


def test_no_backup_no_backup_object(root: Path) -> None:
    with app_on(root, web=False) as client:
        assert "backup" not in client.get("/health").json()


def test_a_failing_remote_shows_in_health_and_writes_succeed(root: Path, tmp_path: Path) -> None:
    configure(root, tmp_path / "nowhere.git")
    with app_on(root, web=False) as client:
        failing = backup_when(client, lambda b: b["last_error"] is not None)
        assert failing["state"] == "failing"
        assert failing["remote"] == str(tmp_path / "nowhere.git")
        assert failing["last_push"] is None and failing["pushed_commit"] is None
        assert "backup: git ls-remote failed" in failing["last_error"]
        answer = client.put(f"{API}/file", params={"path": "notes/a.md"}, content=b"# A\n")
        assert answer.status_code == 200
        assert client.get("/health").json()["status"] == "ok"
    assert "notes/a.md" in git(root, "ls-tree", "-r", "--name-only", "HEAD")


def test_a_working_remote_names_the_commit_it_holds(root: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    configure(root, remote)
    head = git_line(root, "rev-parse", "HEAD")
    with app_on(root, web=False) as client:
        pushed = backup_when(client, lambda b: b["pushed_commit"] == head)
        assert pushed["state"] == "ok" and pushed["last_error"] is None
        assert pushed["last_push"].endswith("Z")
        assert pushed["branch"] == git_line(root, "symbolic-ref", "--short", "HEAD")
        client.put(f"{API}/file", params={"path": "notes/b.md"}, content=b"# B\n")
    # the app's shutdown made the last push
    branch = git_line(root, "symbolic-ref", "--short", "HEAD")
    assert git_line(remote, "rev-parse", branch) == git_line(root, "rev-parse", "HEAD")
