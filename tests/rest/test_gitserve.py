"""Git over HTTP (``/api/kiwi/git``, ``/api/kiwi/NAME/git``) on a real ``kiwifs serve``, with
the real ``git`` as the client: a clone is the root's history and files, a fetch brings the next
commit, a space's URL its own repository, a push is refused, and the keys hold as on every
route (no key 401, a read key enough, a prefixed key or another space's 403)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

import realserver

API = "/api/kiwi"
KEYS = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-admin"

[[auth.api_keys]]
key = "k-read"
space = "default"
scope = "read"

[[auth.api_keys]]
key = "k-team"
space = "default"
scope = "read"
prefix = "team"

[[auth.api_keys]]
key = "k-alpha"
space = "alpha"
scope = "read"
"""


def git(
    *args: str, key: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The ``git`` command line, the key sent as git users send it (``http.extraHeader``)."""
    extra = ["-c", f"http.extraHeader=Authorization: Bearer {key}"] if key else []
    return subprocess.run(
        ["git", *extra, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        timeout=60,
        check=False,
    )


def rev(repo: Path, what: str = "HEAD") -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", what], capture_output=True, text=True, check=True
    ).stdout.strip()


def files(folder: Path) -> dict[str, bytes]:
    """Every file of a checkout but git's own."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(folder).parts
    }


def tracked(root: Path) -> dict[str, bytes]:
    """The files of ``root``'s HEAD, as they are on disk (a served root is clean)."""
    names = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    return {name: (root / name).read_bytes() for name in names.split("\0") if name}


def test_clone_fetch_spaces_and_no_push(root: Path, tmp_path: Path) -> None:
    (root / "notes.md").write_text("# Notes\n\nthe walrus\n")
    # a pack far larger than a pipe's buffer: git's answer must stream while it is written
    (root / "noise.md").write_bytes(os.urandom(3 << 20).hex().encode())
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "notes"], check=True)
    subprocess.run(["git", "-C", str(root), "update-ref", "refs/kiwifs/own", "HEAD"], check=True)
    with realserver.serving(root, tmp_path / "serve.log") as (base, _):
        clone = tmp_path / "clone"
        done = git("clone", "-q", f"{base}{API}/git", str(clone))
        assert done.returncode == 0, done.stderr
        assert rev(clone) == rev(root)
        assert files(clone) == tracked(root)
        assert (clone / "notes.md").read_text() == "# Notes\n\nthe walrus\n"
        listed = git("ls-remote", f"{base}{API}/git").stdout
        assert "refs/heads/" in listed and "refs/kiwifs/" not in listed  # kiwifs's own refs

        # a second commit, then an incremental fetch
        put = httpx.put(f"{base}{API}/file", params={"path": "more.md"}, content=b"# More\n")
        assert put.status_code == 200, put.text
        done = git("pull", "-q", "--ff-only", cwd=clone)
        assert done.returncode == 0, done.stderr
        assert rev(clone) == rev(root)
        assert (clone / "more.md").read_bytes() == b"# More\n"

        # a space's URL is that space's repository
        made = httpx.post(base + "/api/spaces", json={"name": "alpha"})
        assert made.status_code == 201, made.text
        alpha_root = Path(made.json()["root"])
        alpha = tmp_path / "alpha"
        done = git("clone", "-q", f"{base}{API}/alpha/git", str(alpha))
        assert done.returncode == 0, done.stderr
        assert rev(alpha) == rev(alpha_root) != rev(root)
        assert not (alpha / "notes.md").exists()

        # no push, no dumb protocol
        (clone / "pushed.md").write_text("no\n")
        git("add", "pushed.md", cwd=clone)
        git("-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "-m", "x", cwd=clone)
        done = git("push", "-q", "origin", "HEAD", cwd=clone)
        assert done.returncode != 0 and "403" in done.stderr, done.stderr
        assert not (root / "pushed.md").exists()
        assert httpx.get(f"{base}{API}/git/info/refs").status_code == 403
        assert httpx.get(f"{base}{API}/git/HEAD").status_code == 404

        # bad input is never a 5xx: git's own answer, or 413 over the body limit
        pack = f"{base}{API}/git/git-upload-pack"
        kind = {"Content-Type": "application/x-git-upload-pack-request"}
        assert httpx.post(pack, content=b"junk", headers=kind).status_code == 200  # git's error
        assert httpx.post(pack, content=b"0000", headers={"Content-Type": "x/y"}).status_code == 415
        big = (b"0" * (1 << 20) for _ in range(65))
        assert httpx.post(pack, content=big, headers=kind, timeout=60).status_code == 413


def test_keys(root: Path, tmp_path: Path) -> None:
    (root / ".kiwi" / "config.toml").write_text(KEYS)
    with realserver.serving(root, tmp_path / "serve.log") as (base, _):
        url = f"{base}{API}/git"
        made = httpx.post(
            base + "/api/spaces",
            json={"name": "alpha"},
            headers={"Authorization": "Bearer k-admin"},
        )
        assert made.status_code == 201, made.text
        refs = httpx.get(url + "/info/refs", params={"service": "git-upload-pack"})
        assert refs.status_code == 401 and refs.headers["WWW-Authenticate"] == "Bearer"
        done = git("clone", "-q", url, str(tmp_path / "none"))
        assert done.returncode != 0 and not (tmp_path / "none" / ".git").exists()
        # git asks for credentials on a 401 (none here: an authentication failure)
        assert any(s in done.stderr for s in ("Username", "Authentication failed")), done.stderr

        done = git("clone", "-q", url, str(tmp_path / "read"), key="k-read")
        assert done.returncode == 0, done.stderr
        assert rev(tmp_path / "read") == rev(root)

        for key, target in [
            ("k-team", url),
            ("k-alpha", url),
            ("k-read", f"{base}{API}/alpha/git"),
        ]:
            done = git("clone", "-q", target, str(tmp_path / key), key=key)
            assert done.returncode != 0 and "403" in done.stderr, (key, done.stderr)
        refused = httpx.get(
            url + "/info/refs",
            params={"service": "git-upload-pack"},
            headers={"Authorization": "Bearer k-team"},
        )
        assert refused.status_code == 403 and "whole history" in refused.json()["error"]
        done = git("clone", "-q", f"{base}{API}/alpha/git", str(tmp_path / "alpha"), key="k-alpha")
        assert done.returncode == 0, done.stderr
