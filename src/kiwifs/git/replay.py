"""A root's commits read back for the timeline: HEAD's first-parent line, the knowledge files
each commit changed, and their blobs.

The timeline (:mod:`kiwifs.index.memory.timeline`) is its one user, on a background thread; this
reader therefore holds a repository handle of its own (see :class:`GitHistory`) and never writes.
A file is a knowledge file here by the walk's rule (:func:`is_knowledge_path`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.git import owncommits
from kiwifs.git.owncommits import is_knowledge_path
from kiwifs.git.repo import FILE_MODES, MODE_BLOB, MODE_TREE, load_pygit2

if TYPE_CHECKING:
    import pygit2


@dataclass(frozen=True)
class CommitInfo:
    """A commit on HEAD's first-parent line: its id, first parent and commit time (POSIX s)."""

    id: str
    parent: str | None
    time: int


@dataclass(frozen=True, slots=True)
class BlobChange:
    """A knowledge file a commit changed: its new blob id, or ``None`` when it was removed."""

    path: str
    blob: str | None


BIG_TREE = 1024  # entries above which a changed folder is compared by libgit2's diff


class GitHistory:
    """Read-only access to a root's commits for replaying history, with its own repository
    handle: it runs on a background thread while :class:`~kiwifs.git.repo.Git` commits, and
    libgit2 handles are not to be shared between threads.

    ``known`` and ``by_folder`` are :class:`~kiwifs.tuning.Tuning`'s ``timeline_known`` and
    ``timeline_by_folder``: off, every commit's changes are read back from git (``known``), by
    one libgit2 diff of the whole trees (``by_folder``): the plain paths."""

    def __init__(self, root: Path, known: bool = True, by_folder: bool = True) -> None:
        self.root = Path(root)
        self.known = known
        self.by_folder = by_folder
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
        """The knowledge files ``commit`` changed relative to ``parent`` (or all, for none),
        in path order.

        libgit2's tree-to-tree diff reads every tree of both commits, unchanged sub-folders
        too: 67 ms a commit on a 100,000-file root, for one file written. Here only the folders
        whose tree ids differ are read (the path from the root to each change), and a changed
        folder of more than :data:`BIG_TREE` entries is compared by libgit2 in one call (its
        loop over entries beats Python's; such a folder holds files, seldom sub-folders). The
        answer is the diff's, in its order (``tests/git/test_gitreplay.py`` holds them equal).
        A commit this process made is not read at all: its changes were noted as it was made
        (:mod:`kiwifs.git.owncommits`).
        """
        known = owncommits.lookup(commit, parent) if self.known else None
        if known is not None:  # a commit this process made: no tree is read
            return [BlobChange(path, blob) for path, blob in known]
        git2 = load_pygit2()
        new = self.repo[commit].peel(git2.Commit).tree
        if parent is None:
            return [BlobChange(path, blob) for path, blob in self.files(commit)]
        old = self.repo[parent].peel(git2.Commit).tree
        out: list[BlobChange] = []
        if self.by_folder:
            self._compared(old, new, "", out)
        else:
            self._diffed(old, new, "", out)
        out.sort(key=lambda change: change.path)  # stable: a type change's removal first
        return out

    def _compared(
        self, old: pygit2.Tree | None, new: pygit2.Tree | None, base: str, out: list[BlobChange]
    ) -> None:
        """The changes between two states of the folder ``base`` (``None``: absent), read
        entry by entry; sub-folders whose ids are equal are not entered."""
        if old is not None and new is not None and max(len(old), len(new)) > BIG_TREE:
            self._diffed(old, new, base, out)
            return
        before = {e.name: e for e in old} if old is not None else {}
        after = {e.name: e for e in new} if new is not None else {}
        for name in before.keys() | after.keys():
            if not name or name.startswith("."):
                continue  # hidden: nothing under it is a knowledge file
            was, now = before.get(name), after.get(name)
            if was is not None and now is not None:
                if was.id == now.id and was.filemode == now.filemode:
                    continue
            self._entry_changed(was, now, base + name, out)

    def _entry_changed(
        self, was: pygit2.Object | None, now: pygit2.Object | None, rel: str, out: list[BlobChange]
    ) -> None:
        """One name whose entry differs, as the diff reports it: a changed folder entered, a
        file's removal or new blob, and a change of type split into a removal and an addition."""
        old_tree = self._tree_of(was)
        new_tree = self._tree_of(now)
        if old_tree is not None or new_tree is not None:
            self._compared(old_tree, new_tree, rel + "/", out)
        if not rel.endswith(".md"):
            return
        old_leaf = was if was is not None and old_tree is None else None
        new_leaf = now if now is not None and new_tree is None else None
        if old_leaf is not None and (new_leaf is None or _kind(old_leaf) != _kind(new_leaf)):
            out.append(BlobChange(rel, None))  # removed (or its type changed: removed first)
            if new_leaf is None:
                return
        elif new_leaf is None:
            return
        out.append(BlobChange(rel, str(new_leaf.id) if _is_file_mode(new_leaf.filemode) else None))

    def _tree_of(self, entry: pygit2.Object | None) -> pygit2.Tree | None:
        if entry is None or entry.filemode != MODE_TREE:
            return None
        tree: pygit2.Tree = self.repo[entry.id].peel(load_pygit2().Tree)
        return tree

    def _diffed(self, old: pygit2.Tree, new: pygit2.Tree, base: str, out: list[BlobChange]) -> None:
        """The changes between two states of the folder ``base`` by libgit2's diff."""
        git2 = load_pygit2()
        for delta in old.diff_to_tree(new).deltas:
            if delta.old_file.path != delta.new_file.path and is_knowledge_path(
                base + delta.old_file.path
            ):
                out.append(BlobChange(base + delta.old_file.path, None))
            path = base + delta.new_file.path
            if not is_knowledge_path(path):
                continue
            gone = delta.status == git2.enums.DeltaStatus.DELETED or not _is_file_mode(
                delta.new_file.mode
            )
            out.append(BlobChange(path, None if gone else str(delta.new_file.id)))

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

    def blob_size(self, blob_id: str) -> int:
        """A blob's size from its object header, without reading the blob."""
        return int(self.repo.odb.read_header(blob_id)[1])

    def close(self) -> None:
        self._repo = None


def _is_file_mode(mode: int) -> bool:
    return mode in FILE_MODES


def _kind(entry: pygit2.Object) -> int:
    """The kind of a non-folder entry as a diff tells changes apart: a file (either mode), a
    symbolic link or a sub-module; a change between kinds is a removal plus an addition."""
    return MODE_BLOB if _is_file_mode(entry.filemode) else entry.filemode
