"""Git, the audit trail: every write is a commit whose author is the actor who made it.

Commits go through libgit2 (pygit2) in-process, which keeps a committed write in the low
milliseconds; history queries (log, diff) run the ``git`` command, which is what users compare
them with anyway. A root is versioned when it has its own ``.git`` folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

from .errors import NotFound, StorageError, UsageError

EMAIL = "kiwifs@internal"
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")

# libgit2 checks, for every entry of every tree it writes, that the object exists in the odb: one
# lookup per sibling, so a commit in a folder of N files cost O(N) stats (the biggest cost of a
# write at a few hundred files). The trees come from the index, whose blobs were just written.
pygit2.settings.enable_strict_object_creation(False)


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (SHA-1 of ``blob <len>\\0`` + data): kiwifs's ETag."""
    h = hashlib.sha1(b"blob %d\0" % len(data))  # noqa: S324 - git's object id, not security
    h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class Version:
    hash: str
    date: str
    author: str
    message: str


@dataclass(frozen=True)
class Change:
    seq: str
    path: str
    action: str
    actor: str
    timestamp: str


class Git:
    """The git repository of one knowledge root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._repo: pygit2.Repository | None = None

    # -- setup ------------------------------------------------------------------------------

    def is_repo(self) -> bool:
        return (self.root / ".git").exists()

    def init(self) -> None:
        """Create the repository (idempotent) with KiwiFS's settings."""
        if not self.is_repo():
            pygit2.init_repository(str(self.root), initial_head="main")
        repo = self.repo
        repo.config["core.autocrlf"] = "false"
        attributes = self.root / ".gitattributes"
        if not attributes.exists():
            attributes.write_text("* -text\n")

    @property
    def repo(self) -> pygit2.Repository:
        if self._repo is None:
            try:
                self._repo = pygit2.Repository(str(self.root))
            except pygit2.GitError as exc:
                raise StorageError(f"cannot open git repository in {self.root}: {exc}") from exc
        return self._repo

    # -- writing ----------------------------------------------------------------------------

    def commit(
        self, paths: list[str], actor: str, message: str, trailer: str | None = None
    ) -> str | None:
        """Stage ``paths`` as on disk (gone → removed) and commit; ``None`` if unchanged."""
        repo = self.repo
        index = repo.index
        try:
            tree = self._stage(index, paths)
        except BaseException:
            index.read(True)  # drop what this attempt staged in memory only
            raise
        parents: list[pygit2.Oid] = []
        if not repo.head_is_unborn:
            head = repo.head.peel(pygit2.Commit)
            if head.tree_id == tree:
                return None
            parents = [head.id]
        sig = pygit2.Signature(actor or "kiwifs", EMAIL, int(time.time()), 0)
        full = message if trailer is None else f"{message}\n\n{trailer}"
        ref = "HEAD"
        oid = repo.create_commit(ref, sig, sig, full + "\n", tree, parents)
        return str(oid)

    def _stage(self, index: pygit2.Index, paths: list[str]) -> pygit2.Oid:
        """Stage ``paths`` and return the tree; the index file is re-read only if it changed.

        Keeping the in-memory index also keeps its tree cache, so only the trees on the changed
        paths are rebuilt. The tree is computed before the index is written so that the written
        index carries that cache for the next commit (and for the git command).
        """
        index.read(False)
        for rel in paths:
            if (self.root / rel).is_file():
                self._retry(lambda rel=rel: index.add(rel))
            else:
                try:
                    index.remove(rel)
                except (OSError, pygit2.GitError):
                    pass
        tree = index.write_tree()
        self._retry(index.write)
        return tree

    @staticmethod
    def _retry(action: object) -> object:
        delay = 0.005
        for _ in range(8):
            try:
                return action()  # type: ignore[operator]
            except pygit2.GitError as exc:
                if "lock" not in str(exc).lower():
                    raise StorageError(f"git: {exc}") from exc
                time.sleep(delay)
                delay *= 2
        raise StorageError("git: the index is locked by another process")

    def head(self) -> str | None:
        repo = self.repo
        return None if repo.head_is_unborn else str(repo.head.target)

    def dirty_paths(self) -> list[str]:
        """Knowledge files whose disk state differs from HEAD (for crash recovery)."""
        status = self.repo.status(untracked_files="all")
        return sorted(p for p, flags in status.items() if flags != pygit2.GIT_STATUS_IGNORED)

    # -- reading ----------------------------------------------------------------------------

    def _run(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
        proc = subprocess.run(
            ["git", "-C", str(self.root), "-c", "core.quotepath=false", *args],
            capture_output=True,
            env=env,
            check=False,
        )
        if proc.returncode != 0:
            raise _GitFailed(proc.stderr.decode("utf-8", "replace").strip())
        return proc.stdout.decode("utf-8", "replace")

    def versions(self, rel: str) -> list[Version]:
        if not self.is_repo() or self.head() is None:
            return []
        out = self._run("log", "--format=%H%x1f%aI%x1f%an%x1f%s%x1e", "--", rel)
        versions = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            h, date, author, subject = record.split("\x1f", 3)
            versions.append(Version(h, date, author, subject))
        return versions

    def show(self, rel: str, rev: str) -> bytes:
        if not self.is_repo():
            raise NotFound("version not found")
        try:
            commit = self.repo.revparse_single(rev).peel(pygit2.Commit)
            entry = commit.tree[rel]
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as exc:
            raise NotFound("version not found") from exc
        blob = self.repo[entry.id]
        if not isinstance(blob, pygit2.Blob):
            raise NotFound("version not found")
        return blob.data

    def diff(self, rel: str, rev_from: str, rev_to: str) -> str:
        for rev in (rev_from, rev_to):
            self._check_rev(rev)
        try:
            return self._run("diff", "--no-color", rev_from, rev_to, "--", rel)
        except _GitFailed as exc:
            raise NotFound(f"unknown version: {exc}") from exc

    def _check_rev(self, rev: str) -> None:
        if not rev or rev.startswith("-"):
            raise UsageError(f"invalid version: {rev!r}")

    def changes(self, since: str | None, limit: int) -> list[Change]:
        if not self.is_repo() or self.head() is None:
            return []
        args = ["log", f"--max-count={limit}", "--format=%H%x1f%an%x1f%aI%x1f%s%x1e"]
        if since:
            args.append(f"{since}..HEAD")
        try:
            out = self._run(*args)
        except _GitFailed as exc:
            raise UsageError("unknown sequence") from exc
        changes = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            h, author, date, subject = record.split("\x1f", 3)
            action, path = _action_of(subject, author)
            changes.append(Change(h, path, action, author, date))
        return changes


class _GitFailed(Exception):
    pass


def _action_of(subject: str, actor: str) -> tuple[str, str]:
    """Action and path of a commit subject ``<actor>: <verb> <path>`` (reference §3.3)."""
    rest = subject[len(actor) + 2 :] if subject.startswith(actor + ": ") else subject
    word, _, tail = rest.partition(" ")
    lowered = word.lower()
    if lowered in ("write", "create", "update"):
        return "write", tail
    if lowered in ("delete", "remove", "delete:"):
        return "delete", tail
    if lowered in ("rename", "move"):
        return "rename", tail.rsplit(" \u2192 ", 1)[-1]
    if lowered == "bulk":
        return "write", ""
    if subject.startswith("delete: "):
        return "delete", subject[len("delete: ") :]
    return "write", rest
