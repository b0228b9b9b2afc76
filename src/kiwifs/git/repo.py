"""Git, the audit trail: every write is a commit whose author is the actor who made it.

Commits go through libgit2 (pygit2) in-process, which keeps a committed write in the low
milliseconds. A root is versioned when it has its own ``.git`` folder. This module holds the
repository (:class:`Git`): its setup, the commits and the trees and blobs they are built from,
and the upkeep of the git index file (:mod:`kiwifs.git.indexfile`). History reads (versions, diffs,
the changes feed) are :mod:`kiwifs.git.log`'s, asked with a :class:`Git` (by
:class:`kiwifs.services.history.History`); the timeline's reader is :mod:`kiwifs.git.replay`.

A commit runs no program that the repository or a user's git configuration names: libgit2 runs
no hooks, no external diff or textconv and no filter drivers (it knows only its built-in
``crlf`` and ``ident`` filters, and our blobs are made from bytes, unfiltered). The ``git``
commands of history reads are started so that they run none either (see :mod:`kiwifs.git.log`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kiwifs.base.paths import NotRegularFile, open_regular, read_all
from kiwifs.errors import StorageError
from kiwifs.files.serverlock import SERVER_LOCK
from kiwifs.git import owncommits, reflock
from kiwifs.git.indexfile import BackgroundSync, IndexFile, reconcile_due
from kiwifs.git.owncommits import MadeCommit, is_knowledge_path
from kiwifs.git.packing import PACK_AT, Packer
from kiwifs.git.trees import MODE_TREE as MODE_TREE  # with the other modes, for gitreplay
from kiwifs.git.trees import TreeCache

EMAIL = "kiwifs@internal"
# kiwifs's own files in a root, never part of its history: the index and the journals (rebuilt
# or replayed from the files), the server lock, an interrupted write's temporary file, and the
# scoped keys' hashes (kiwifs.server.tokens: a revoked key must not live on in history)
IGNORED = (".kiwi/state/", SERVER_LOCK, ".kiwi-write-*", ".kiwi/keys.json")
EXCLUDE_FILE = Path(".git") / "info" / "exclude"

if TYPE_CHECKING:
    import pygit2

# Attempts at a commit before its error is raised. A packing (kiwifs.git.packing) deletes each
# object folder it empties, and libgit2, which makes the folder before it moves a new object in
# from a temporary file, does not make it again: the commit fails ("failed to rename lockfile
# ... No such file or directory") and is made again from HEAD, which has not moved.
COMMIT_ATTEMPTS = 3

# Git file modes (tree entry modes), as libgit2 and git define them; a folder's, MODE_TREE, is
# gittrees's.
MODE_BLOB, MODE_EXECUTABLE, MODE_LINK = 0o100644, 0o100755, 0o120000
FILE_MODES = (MODE_BLOB, MODE_EXECUTABLE)
TreeChange = tuple["pygit2.Oid", int] | None  # a path's new blob id and mode; None: gone


class CommitChannel(Protocol):
    """Another process making this repository's commits, as :meth:`Git.commit_objects` would
    (:class:`kiwifs.git.child.CommitProcess`). Handed in, not imported: that module's child
    makes a :class:`Git` of its own."""

    def start(self) -> None: ...

    def commit(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None,
        contents: Mapping[str, bytes | None] | None,
    ) -> MadeCommit | None: ...

    def close(self) -> None: ...


@functools.cache
def load_pygit2() -> ModuleType:
    """pygit2, imported on first use (here and by the sibling git modules): reports and
    searches never touch git, and the import costs ~50 ms of every CLI call."""
    import pygit2

    # libgit2 checks, for every entry of every tree it writes, that the object exists in the
    # odb: one lookup per sibling, so a commit in a folder of N files cost O(N) stats (the
    # biggest cost of a write at a few hundred files). Our trees come from HEAD's trees plus
    # blobs just written.
    pygit2.settings.enable_strict_object_creation(False)
    return pygit2


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (SHA-1 of ``blob <len>\\0`` + data): kiwifs's ETag."""
    h = hashlib.sha1(b"blob %d\0" % len(data))  # noqa: S324 - git's object id, not security
    h.update(data)
    return h.hexdigest()


class Git:
    """The git repository of one knowledge root."""

    def __init__(self, root: Path, kept_trees: bool = True, pack_at: int = PACK_AT) -> None:
        self.root = Path(root)
        # trees written from their kept entries (kiwifs.git.trees); False: libgit2's builder
        self.kept_trees = kept_trees
        # packs the loose objects this process's commits leave (kiwifs.git.packing); pack_at
        # is Tuning.pack_loose_objects, 0: never
        self.packer = Packer(self.root, pack_at)
        self._repo: pygit2.Repository | None = None
        self._lock = threading.RLock()
        self._index_file = IndexFile(self.root, self._own_handle)
        self._index_stale = False
        self._index_syncer = BackgroundSync(self.sync_index)
        self._process: CommitChannel | None = None
        self._trees = TreeCache()  # the entries of the trees this process wrote last
        # the first import of the root's files, made by another process (kiwifs.git.adoption):
        # set while none runs; its failure, if it failed
        self._imported = threading.Event()
        self._imported.set()
        self._import_error: str | None = None

    # -- setup ------------------------------------------------------------------------------

    def is_repo(self) -> bool:
        return (self.root / ".git").exists()

    def init(self) -> None:
        """Create the repository (idempotent) with KiwiFS's settings."""
        if not self.is_repo():
            load_pygit2().init_repository(str(self.root), initial_head="main")
        repo = self.repo
        repo.config["core.autocrlf"] = "false"
        self.exclude_own_files()
        attributes = self.root / ".gitattributes"
        if not attributes.exists():
            attributes.write_text("* -text\n")

    def exclude_own_files(self) -> None:
        """Have git ignore kiwifs's own files (:data:`IGNORED`) through the repository's
        ``info/exclude``, which is no part of history: in a repository a user made with ``git
        init`` (no kiwifs ``.gitignore``), or one kiwifs adopts, the index database is then
        never listed by ``git status`` or taken by ``git add -A``, nor committed by the
        adopting commit. Best effort: a ``.git`` that is a file or read-only is left alone."""
        exclude_from_history(self.root)

    def adopt(self, actor: str, message: Callable[[int], str]) -> str | None:
        """Make the root a repository holding the files already there, in one commit whose
        message is ``message(number of files)``: what ``init`` and a first ``serve`` do. The
        commit's id, or ``None`` when there was nothing to commit."""
        self.init()
        dirty = self.dirty_paths()
        return self.commit(dirty, actor, message(len(dirty))) if dirty else None

    def begin_import(self) -> None:
        """Another process imports the root's files from now on: commits wait for its end."""
        self._import_error = None
        self._imported.clear()

    def end_import(self, error: str | None) -> None:
        """The import ended (``error``: why it failed); waiting commits go on. The import
        wrote the git index file itself, so only this process's kept trees are forgotten."""
        with self._lock:
            self._trees = TreeCache()
        self._import_error = error
        self._imported.set()

    @property
    def importing(self) -> bool:
        """Whether the first import of the root's files is still being made."""
        return not self._imported.is_set()

    def _after_import(self) -> None:
        """Wait for the import, if one runs; :class:`StorageError` if it failed (the write's
        paths stay journaled, and the next start imports again)."""
        self._imported.wait()
        if self._import_error is not None:
            raise StorageError(f"git import of the existing files failed: {self._import_error}")

    @property
    def repo(self) -> pygit2.Repository:
        if self._repo is None:
            self._repo = self._own_handle()
        return self._repo

    def _own_handle(self) -> pygit2.Repository:
        """A new repository handle: the shared one (:attr:`repo`), and one for each reconcile of
        the index file, dropped after it (libgit2 keeps the index a handle has read for as long
        as the handle lives: on the shared one the entries of a million files stayed with the
        server, 195 MB)."""
        git2 = load_pygit2()
        try:
            handle: pygit2.Repository = git2.Repository(str(self.root))
        except git2.GitError as exc:
            raise StorageError(f"cannot open git repository in {self.root}: {exc}") from exc
        return handle

    # -- writing ----------------------------------------------------------------------------

    def commit(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None = None,
        contents: Mapping[str, bytes | None] | None = None,
    ) -> str | None:
        """Commit ``paths`` as they are on disk (gone → removed); ``None`` if nothing changed.

        ``contents`` may give the bytes just written (``None`` for a deletion) so they are not
        read back. The commit's tree is built from HEAD's with tree builders along the changed
        paths only, so its cost does not grow with the number of files in the root; the git
        index file is brought up to date afterwards, off the write path (:meth:`sync_index`,
        :mod:`kiwifs.git.indexfile`).
        """
        self._after_import()
        process = self._process
        if process is None:
            made = self.commit_objects(paths, actor, message, trailer, contents)
        else:
            made = process.commit(paths, actor, message, trailer, contents)
        if made is None:
            return None
        owncommits.record(made)  # the timeline's replay reads them from here, not from git
        with self._lock:
            self._index_stale = True
        if not self._index_syncer.poke():
            self.sync_index()  # closed: no background thread any more, sync now
        self.packer.committed()
        return made.id

    def commit_objects(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None = None,
        contents: Mapping[str, bytes | None] | None = None,
        wanted: Callable[[], bool] | None = None,
    ) -> MadeCommit | None:
        """The commit itself, under the git lock, without the index file's upkeep: what
        :meth:`commit` does here, or the commit process (:mod:`kiwifs.git.child`) for it.
        ``None`` when nothing changed.

        ``wanted`` is asked once the lock is held; False makes no commit (StorageError): the
        commit process asks whether its server still lives.
        """
        git2 = load_pygit2()
        with self._lock, self._index_file.locked():
            if wanted is not None and not wanted():
                raise StorageError("git commit not made: the server asking for it is gone")
            attempt = 1
            while True:
                try:
                    reflock.clear_abandoned(self.root)
                    return self._commit(paths, actor, message, trailer, contents)
                except (git2.GitError, OSError) as exc:
                    if attempt == COMMIT_ATTEMPTS:
                        raise StorageError(f"git commit failed: {self._relative(exc)}") from exc
                    attempt += 1

    def _commit(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None,
        contents: Mapping[str, bytes | None] | None,
    ) -> MadeCommit | None:
        repo = self.repo
        git2 = load_pygit2()
        head = None if repo.head_is_unborn else repo.head.peel(git2.Commit)
        changes = {rel: self._blob(rel, contents) for rel in paths}
        seen = _Seen()
        if not self.kept_trees:
            tree = self._apply_builder(head.tree if head is not None else None, changes, "", seen)
        else:
            tree = self._apply(head.tree_id if head is not None else None, changes, "", seen)
        if tree is None:
            tree = repo.TreeBuilder().write()
        if head is not None and head.tree_id == tree:
            return None
        sig = git2.Signature(actor or "kiwifs", EMAIL, int(time.time()), 0)
        full = message if trailer is None else f"{message}\n\n{trailer}"
        parents = [head.id] if head is not None else []
        self._index_file.mark_stale()  # before HEAD moves: a crash from here on is repaired
        with reflock.moving_head(self.root):
            oid = str(repo.create_commit("HEAD", sig, sig, full + "\n", tree, parents))
        parent = str(head.id) if head is not None else None
        return MadeCommit(oid, parent, seen.changes())

    def _relative(self, exc: BaseException) -> str:
        """An error's text with the root's absolute path left out (it reaches API clients)."""
        return str(exc).replace(f"{self.root.resolve()}/", "").replace(f"{self.root}/", "")

    def _blob(self, rel: str, contents: Mapping[str, bytes | None] | None) -> TreeChange:
        """The blob id and file mode of ``rel``'s new state, or ``None`` when it is gone."""
        full = self.root / rel
        if contents is not None and rel in contents:
            data = contents[rel]
            if data is None:
                return None
            mode = _mode_of(full)  # bytes written are a file's, even if a link took its place
            return self.repo.create_blob(data), MODE_BLOB if mode == MODE_LINK else mode
        if full.is_symlink():
            return self.repo.create_blob(os.fsencode(os.readlink(full))), MODE_LINK
        try:
            fd, st = open_regular(full)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, NotRegularFile):
            return None  # gone, or a FIFO (which git does not track either)
        return self.repo.create_blob(read_all(fd, st.st_size)), _mode_of(full)

    def _apply(
        self,
        tree: pygit2.Oid | None,
        changes: Mapping[str, TreeChange],
        base: str,
        seen: _Seen,
    ) -> pygit2.Oid | None:
        """Write tree ``tree`` (the folder ``base``) with ``changes`` applied, noting in
        ``seen`` what each entry was and becomes; ``None`` when the result is empty.

        Trees are changed and written as lists of their entries (:mod:`kiwifs.git.trees`);
        a name new to its tree is first checked by libgit2's tree builder, so that names
        git refuses (``.git``, ``git~1``…) are refused as they were.
        """
        repo = self.repo
        entries = self._trees.take(repo, tree)
        leaves, folders = _by_folder(changes)
        for name, change in leaves.items():
            key = os.fsencode(name)
            old = entries.get(key)
            seen.leaf(base + name, old, change)
            if change is None:
                entries.remove(key)
            else:
                if old is None:
                    repo.TreeBuilder().insert(name, change[0], change[1])  # refuses bad names
                entries.put(key, change[0].raw, change[1])
        for name, sub in folders.items():
            key = os.fsencode(name)
            current = entries.get(key)
            subtree = None
            if current is not None:
                if current[1] == MODE_TREE:
                    subtree = load_pygit2().Oid(raw=current[0])
                else:
                    seen.complex()  # a file becomes a folder: the diff reports it its own way
            written = self._apply(subtree, sub, f"{base}{name}/", seen)
            if written is None:
                entries.remove(key)
            else:
                if current is None:
                    repo.TreeBuilder().insert(name, written, MODE_TREE)  # refuses bad names
                entries.put(key, written.raw, MODE_TREE)
        if not entries:
            return None
        return self._trees.write(repo, entries)

    def _apply_builder(
        self,
        tree: pygit2.Tree | None,
        changes: Mapping[str, TreeChange],
        base: str,
        seen: _Seen,
    ) -> pygit2.Oid | None:
        """:meth:`_apply` with libgit2's tree builders (``kept_trees`` off: the plain path)."""
        repo = self.repo
        builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
        leaves, folders = _by_folder(changes)
        for name, change in leaves.items():
            old = builder.get(name)
            seen.leaf(base + name, None if old is None else (old.id.raw, old.filemode), change)
            if change is None:
                if old is not None:
                    builder.remove(name)
            else:
                builder.insert(name, change[0], change[1])
        git2 = load_pygit2()
        for name, sub in folders.items():
            current = builder.get(name)
            subtree = current if isinstance(current, git2.Tree) else None
            if current is not None and subtree is None:
                seen.complex()  # a file becomes a folder: the diff reports it its own way
            written = self._apply_builder(subtree, sub, f"{base}{name}/", seen)
            if written is None:
                if current is not None:
                    builder.remove(name)
            else:
                builder.insert(name, written, MODE_TREE)
        if len(builder) == 0:
            return None
        return builder.write()

    def sync_index(self) -> bool:
        """Bring the git index file up to date with HEAD after this process's commits.

        Until then ``git status`` may briefly show committed changes as staged; history is
        never affected. False when the index file is still behind (a lock held by another git
        process, such as a user's ``git status`` refreshing it): the caller tries again.
        """
        with self._lock:
            if not self._index_stale or not self.is_repo():
                return True
            self._index_stale = not self._index_file.reconcile()
            return not self._index_stale

    def recover_index(self) -> bool:
        """At open: reconcile the git index file if a crash may have left it behind HEAD.

        Returns True when a reconcile ran. Costs one ``stat`` when there is nothing to do.
        """
        if not reconcile_due(self.root) or not self.is_repo():
            return False
        with self._lock:
            if not self._index_file.reconcile():
                self._index_stale = True
                self._index_syncer.poke()
            return True

    def start_commit_process(self, process: CommitChannel) -> None:
        """Make commits in ``process`` from now on, starting it (the child process of
        :mod:`kiwifs.git.child`); a second one is not taken."""
        if self._process is None:
            self._process = process
            process.start()

    def close(self) -> None:
        """Stop the commit process and the background index syncer after a last sync, and the
        packer's checks (a packing under way finishes on its own)."""
        self.packer.close()
        process, self._process = self._process, None
        if process is not None:
            process.close()
        self._index_syncer.stop()
        self.sync_index()
        with self._lock:
            self._index_file.close()

    def head_moved(self) -> None:
        """HEAD was moved by another hand (a replica's fast-forward): forget the trees kept
        from this process's last commit and bring the git index file up to date soon."""
        with self._lock:
            self._trees = TreeCache()
            self._index_stale = True
        if not self._index_syncer.poke():
            self.sync_index()

    def head(self) -> str | None:
        with self._lock:
            repo = self.repo
            return None if repo.head_is_unborn else str(repo.head.target)

    def dirty_paths(self) -> list[str]:
        """Knowledge files whose disk state differs from HEAD (for crash recovery)."""
        self.sync_index()
        status = self.repo.status(untracked_files="all")
        return sorted(p for p, flags in status.items() if flags != load_pygit2().GIT_STATUS_IGNORED)


def _by_folder(
    changes: Mapping[str, TreeChange],
) -> tuple[dict[str, TreeChange], dict[str, dict[str, TreeChange]]]:
    """``changes`` split into the entries of this folder and, per sub-folder, the changes
    below it (paths relative to that sub-folder)."""
    leaves: dict[str, TreeChange] = {}
    folders: dict[str, dict[str, TreeChange]] = {}
    for rel, change in changes.items():
        name, sep, rest = rel.partition("/")
        if sep:
            folders.setdefault(name, {})[rest] = change
        else:
            leaves[name] = change
    return leaves, folders


class _Seen:
    """The knowledge files a commit changes, noted while its trees are built: what
    :mod:`kiwifs.git.owncommits` keeps for the timeline. Anything but a file replaced by a file
    (or added, or removed) makes the commit *complex*, and then nothing is kept."""

    def __init__(self) -> None:
        self._changes: list[tuple[str, str | None]] = []
        self._complex = False

    def complex(self) -> None:
        self._complex = True

    def leaf(self, rel: str, old: tuple[bytes, int] | None, new: TreeChange) -> None:
        """Entry ``rel`` was ``old`` (raw id, mode) and becomes ``new`` (``None``: absent)."""
        if old is not None and old[1] not in FILE_MODES:
            self._complex = True  # a folder, a link or a sub-module replaced or removed
        elif new is not None and new[1] not in FILE_MODES:
            self._complex = True  # a link added
        elif new is None:
            if old is not None:
                self._changes.append((rel, None))
        elif old is None or old[0] != new[0].raw or old[1] != new[1]:
            self._changes.append((rel, str(new[0])))

    def changes(self) -> owncommits.Changes | None:
        if self._complex:
            return None
        return tuple(sorted(c for c in self._changes if is_knowledge_path(c[0])))


def _mode_of(path: Path) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return MODE_BLOB
    if stat.S_ISLNK(st.st_mode):
        return MODE_LINK
    if st.st_mode & stat.S_IXUSR:
        return MODE_EXECUTABLE
    return MODE_BLOB


def exclude_from_history(root: Path, entries: Sequence[str] = IGNORED) -> None:
    """Have git ignore ``entries`` in ``root`` through ``.git/info/exclude``, which is no part
    of history (for a root made before its ``.gitignore`` named them). Best effort: a ``.git``
    that is missing, a file or read-only is left alone."""
    if not (root / ".git").is_dir():
        return
    path = root / EXCLUDE_FILE
    try:
        path.parent.mkdir(exist_ok=True)
        add_ignores(path, entries)
    except OSError:
        return


def add_ignores(path: Path, entries: Sequence[str] = IGNORED) -> bool:
    """Append to the ignore file at ``path`` (made when absent) the ``entries`` it lacks (a
    trailing ``/`` aside), leaving its own lines as they are; True when it changed."""
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    present = {line.strip().rstrip("/") for line in text.splitlines()}
    missing = [entry for entry in entries if entry.rstrip("/") not in present]
    if not missing:
        return False
    separator = "\n" if text and not text.endswith("\n") else ""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(separator + "\n".join(missing) + "\n")
    return True
