"""A replica's git side: clone a primary's repository, fetch what it committed since, and move
this root onto it, files and all.

A replica is a git clone that follows, plus its own index (see docs/replication.md). The
transport is git's own smart HTTP, served by the primary (``/api/kiwi/git``) behind the same
keys: the key goes in an ``Authorization`` header that git sends with every request, set through
``GIT_CONFIG_*`` variables so that it never shows in a process listing. No command run here
starts a program the repository or a user's configuration names (no hooks, credential helper,
askpass, fsmonitor or pager), and only the ``http`` and ``https`` transports are allowed.

:func:`fast_forward` is the one place a replica's files change: it writes what the fetched
commits changed (each file atomically, as a write does) and moves the branch, after checking
that the local branch is an ancestor, so a replica never loses a commit of its own.
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiwifs.errors import Conflict, StorageError
from kiwifs.files.atomic import write_in
from kiwifs.git import remote as gitremote
from kiwifs.git.repo import load_pygit2

FETCHED_REF = "refs/kiwifs/primary"  # where the primary's branch is fetched to
DIVERGED_REFS = "refs/kiwifs/diverged"  # a former primary's own commits, kept when it follows
TRANSPORTS = ("http", "https")  # a primary is a kiwifs server
TIMEOUT = 120.0  # seconds a clone or fetch may take before it is abandoned (and tried again)


@dataclass(frozen=True)
class Change:
    """A path a fast-forward changed: written (``write``) or removed (``delete``)."""

    path: str
    op: str


def git_url(primary: str, space: str | None = None) -> str:
    """The URL git fetches a space of ``primary`` (a server's base URL) from."""
    base = primary.rstrip("/")
    return f"{base}/api/kiwi/{space}/git" if space else f"{base}/api/kiwi/git"


def _run(args: list[str], key: str | None, cwd: Path | None = None) -> str:
    """``git args`` (:func:`kiwifs.git.remote.run`), the key in an ``Authorization`` header set
    through ``GIT_CONFIG_*``; :class:`StorageError` when git fails."""
    env = {}
    if key:
        env = {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Bearer {key}",
        }
    try:
        return gitremote.run(args, TRANSPORTS, TIMEOUT, cwd=cwd, env=env)
    except gitremote.GitFailed as exc:
        raise StorageError(f"git {args[0]} failed: {exc}") from exc


def clone(url: str, root: Path, key: str | None) -> None:
    """Clone ``url`` into ``root`` (missing or empty), its files checked out."""
    root.parent.mkdir(parents=True, exist_ok=True)
    _run(["clone", "--quiet", "--no-hardlinks", url, str(root)], key)


def fetch(root: Path, url: str, key: str | None, branch: str) -> str | None:
    """Fetch the primary's ``branch`` into :data:`FETCHED_REF`; its commit (``None``: the
    primary has no commit yet)."""
    spec = f"+refs/heads/{branch}:{FETCHED_REF}"
    try:  # one git process, not ls-remote first: each starts a git http-backend on the primary
        _run(["fetch", "--quiet", "--no-tags", url, spec], key, root)
    except StorageError as exc:
        if "couldn't find remote ref" in exc.message:
            return None  # the primary has no commit yet
        raise
    repo = load_pygit2().Repository(str(root))
    return str(repo.references[FETCHED_REF].target)


def fast_forward(root: Path, target: str, keep_diverged: bool = False) -> list[Change]:
    """Move this root's branch to ``target`` and its files with it: the paths the commits
    since HEAD changed, written or removed. When HEAD is not an ancestor of ``target`` (this
    root has commits the primary lacks: it was a primary that took writes of its own),
    :class:`Conflict` and nothing changed; with ``keep_diverged``, HEAD is first kept on a ref of
    its own under :data:`DIVERGED_REFS` (its commits stay in the repository, named) and the
    root then moves to ``target`` all the same."""
    git2 = load_pygit2()
    repo = git2.Repository(str(root))
    new = repo[target].peel(git2.Commit)
    if repo.head_is_unborn:
        old_tree = None
    else:
        head = repo.head.peel(git2.Commit)
        if head.id == new.id:
            return []
        if not repo.descendant_of(new.id, head.id):
            if not keep_diverged:
                raise Conflict(f"this replica's HEAD {head.id} is not an ancestor of {new.id}")
            repo.references.create(f"{DIVERGED_REFS}/{head.id}", head.id, force=True)
        old_tree = head.tree
    if old_tree is None:
        diff = new.tree.diff_to_tree(swap=True)  # from nothing: every file added
    else:
        diff = repo.diff(old_tree, new.tree)
    changes: list[Change] = []
    for patch in diff.deltas:
        old_path, new_path = patch.old_file.path, patch.new_file.path
        if patch.status_char() == "D":
            _remove(root, old_path)
            changes.append(Change(old_path, "delete"))
            continue
        if old_path != new_path:
            _remove(root, old_path)
            changes.append(Change(old_path, "delete"))
        _write(root, new_path, repo[patch.new_file.id].data, patch.new_file.mode)
        changes.append(Change(new_path, "write"))
    if changes:
        sync_filesystem(root)  # every file on disk before the branch names them
    branch = repo.head.name if not repo.head_is_unborn else branch_ref(root)
    repo.references.create(branch, new.id, force=True)
    return changes


def sync_filesystem(root: Path) -> None:
    """Flush the filesystem holding ``root`` once (Linux ``syncfs``; elsewhere ``sync``): a
    fast-forward writes its files without an fsync each (2 ms a file, which made a catch-up of
    600 paths take seconds and the next batch bigger still) and makes them durable together."""
    libc = _libc()
    if libc is not None:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


@functools.cache
def _libc() -> Any:
    """The C library when it has ``syncfs`` (Linux), else ``None``."""
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        return lib if hasattr(lib, "syncfs") else None
    except OSError:
        return None


def diverged(root: Path) -> list[str]:
    """The commits kept under :data:`DIVERGED_REFS` (what this root had that its primary
    lacked when it began to follow)."""
    repo = load_pygit2().Repository(str(root))
    prefix = DIVERGED_REFS + "/"
    return sorted(name[len(prefix) :] for name in repo.references if name.startswith(prefix))


def branch_ref(root: Path) -> str:
    """The branch HEAD names (``refs/heads/…``), born or not; ``refs/heads/main`` when HEAD
    is detached."""
    target = load_pygit2().Repository(str(root)).references["HEAD"].target
    return target if isinstance(target, str) else "refs/heads/main"


def _write(root: Path, rel: str, data: bytes, mode: int) -> None:
    """Write one file of a fetched commit as a write would: atomically, its folders made."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISLNK(mode):
        _remove(root, rel)
        os.symlink(data.decode("utf-8", "surrogateescape"), path)
        return
    if not stat.S_ISREG(mode):
        return  # a submodule: nothing to check out
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = write_in(folder, path.name, data, durable=False, mode=_mode(mode))
        if fd is not None:
            os.close(fd)
    finally:
        os.close(folder)


def _mode(git_mode: int) -> int:
    return 0o755 if git_mode & stat.S_IXUSR else 0o644


def _remove(root: Path, rel: str) -> None:
    try:
        (root / rel).unlink()
    except FileNotFoundError:
        return
    parent = (root / rel).parent
    while parent != root:  # folders the commit emptied go too, as git's checkout does
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent
