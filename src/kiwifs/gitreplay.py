"""A root's commits read back for the timeline: HEAD's first-parent line, the knowledge files
each commit changed, and their blobs.

The timeline (:mod:`kiwifs.index.timeline`) is its one user, on a background thread; this
reader therefore holds a repository handle of its own (see :class:`GitHistory`) and never writes.
A file is a knowledge file here by the walk's rule (:func:`is_knowledge_path`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .versioning import MODE_BLOB, MODE_EXECUTABLE, MODE_TREE, load_pygit2

if TYPE_CHECKING:
    import pygit2


@dataclass(frozen=True)
class CommitInfo:
    """A commit on HEAD's first-parent line: its id, first parent and commit time (POSIX s)."""

    id: str
    parent: str | None
    time: int


@dataclass(frozen=True)
class BlobChange:
    """A knowledge file a commit changed: its new blob id, or ``None`` when it was removed."""

    path: str
    blob: str | None


def is_knowledge_path(rel: str) -> bool:
    """The walk's rule for a path in a git tree: ``.md`` exactly, no hidden segment."""
    return rel.endswith(".md") and not any(seg.startswith(".") for seg in rel.split("/"))


class GitHistory:
    """Read-only access to a root's commits for replaying history, with its own repository
    handle: it runs on a background thread while :class:`~kiwifs.versioning.Git` commits, and
    libgit2 handles are not to be shared between threads."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._repo: pygit2.Repository | None = None

    @property
    def repo(self) -> pygit2.Repository:
        if self._repo is None:
            self._repo = load_pygit2().Repository(str(self.root))
        return self._repo

    def head(self) -> str | None:
        """HEAD's commit id, ``None`` for no repository or no commit yet."""
        if not (self.root / ".git").exists():
            return None
        repo = self.repo
        return None if repo.head_is_unborn else str(repo.head.target)

    def first_parents(
        self, known: Callable[[str], bool], head: str | None = None
    ) -> tuple[list[CommitInfo], str | None]:
        """Commits from ``head`` (default HEAD) back along first parents, newest first, up to
        the first one ``known`` accepts; returns them and that known commit (``None``: the walk
        reached the first commit)."""
        start = head or self.head()
        out: list[CommitInfo] = []
        current = start
        git2 = load_pygit2()
        while current is not None:
            if known(current):
                return out, current
            commit = self.repo.get(current)
            if not isinstance(commit, git2.Commit):
                break
            parents = commit.parent_ids
            parent = str(parents[0]) if parents else None
            out.append(CommitInfo(current, parent, int(commit.commit_time)))
            current = parent
        return out, None

    def changes(self, commit: str, parent: str | None) -> list[BlobChange]:
        """The knowledge files ``commit`` changed relative to ``parent`` (or all, for none)."""
        git2 = load_pygit2()
        new = self.repo[commit].peel(git2.Commit).tree
        if parent is None:
            return [BlobChange(path, blob) for path, blob in self.files(commit)]
        old = self.repo[parent].peel(git2.Commit).tree
        out: list[BlobChange] = []
        for delta in self.repo.diff(old, new).deltas:
            if delta.old_file.path != delta.new_file.path and is_knowledge_path(
                delta.old_file.path
            ):
                out.append(BlobChange(delta.old_file.path, None))
            path = delta.new_file.path
            if not is_knowledge_path(path):
                continue
            gone = delta.status == git2.enums.DeltaStatus.DELETED or not _is_file_mode(
                delta.new_file.mode
            )
            out.append(BlobChange(path, None if gone else str(delta.new_file.id)))
        return out

    def files(self, commit: str) -> Iterator[tuple[str, str]]:
        """Every knowledge file of ``commit``'s tree with its blob id."""
        git2 = load_pygit2()
        stack: list[tuple[str, pygit2.Tree]] = [("", self.repo[commit].peel(git2.Commit).tree)]
        while stack:
            base, tree = stack.pop()
            for entry in tree:
                name = entry.name or ""
                if name.startswith("."):
                    continue
                rel = base + name
                if entry.filemode == MODE_TREE:
                    stack.append((rel + "/", self.repo[entry.id].peel(git2.Tree)))
                elif _is_file_mode(entry.filemode) and name.endswith(".md"):
                    yield rel, str(entry.id)

    def blob(self, blob_id: str) -> bytes:
        data: bytes = self.repo[blob_id].peel(load_pygit2().Blob).data
        return data

    def close(self) -> None:
        self._repo = None


def _is_file_mode(mode: int) -> bool:
    return mode in (MODE_BLOB, MODE_EXECUTABLE)
