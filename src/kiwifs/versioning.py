"""Git, the audit trail: every write is a commit whose author is the actor who made it.

Commits go through libgit2 (pygit2) in-process, which keeps a committed write in the low
milliseconds; history queries (log, diff) run the ``git`` command, which is what users compare
them with anyway. A root is versioned when it has its own ``.git`` folder.

Neither runs a program that the repository or a user's git configuration names. libgit2 runs no
hooks, no external diff or textconv and no filter drivers (it knows only its built-in ``crlf``
and ``ident`` filters, and our blobs are made from bytes, unfiltered). Every ``git`` command is
started with :data:`_NO_PROGRAMS` and diff options :data:`_NO_DIFF_PROGRAMS`: no external diff
(``diff.external``, ``diff.<driver>.command``, ``GIT_EXTERNAL_DIFF``), no textconv, no hooks, no
fsmonitor, no signature check (``gpg.program``), no pager, and no transport (a partial clone's
lazy fetch could otherwise run ``core.sshCommand``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from . import reflock
from .errors import NotFound, StorageError, UsageError
from .gitindex import BackgroundSync, IndexFile, reconcile_due
from .paths import NotRegularFile, open_regular, read_all
from .text import check_text, without_surrogates

EMAIL = "kiwifs@internal"
MAX_SUBJECT_CHARS = 1000
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_EXTERNAL_DIFF", "GIT_PAGER")
_GIT_ENV_SET = {"GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0"}
_NO_PROGRAMS = (
    "--no-pager",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "log.showSignature=false",
    "-c",
    "protocol.allow=never",
)
_NO_DIFF_PROGRAMS = ("--no-ext-diff", "--no-textconv")

if TYPE_CHECKING:
    import pygit2

    from .commitproc import CommitProcess

# Git file modes (tree entry modes), as libgit2 and git define them.
MODE_BLOB, MODE_EXECUTABLE, MODE_LINK, MODE_TREE = 0o100644, 0o100755, 0o120000, 0o040000


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
        self._lock = threading.RLock()
        self._index_file = IndexFile(self.root, lambda: self.repo)
        self._index_stale = False
        self._index_syncer = BackgroundSync(self.sync_index)
        self._process: CommitProcess | None = None

    # -- setup ------------------------------------------------------------------------------

    def is_repo(self) -> bool:
        return (self.root / ".git").exists()

    def init(self) -> None:
        """Create the repository (idempotent) with KiwiFS's settings."""
        if not self.is_repo():
            load_pygit2().init_repository(str(self.root), initial_head="main")
        repo = self.repo
        repo.config["core.autocrlf"] = "false"
        attributes = self.root / ".gitattributes"
        if not attributes.exists():
            attributes.write_text("* -text\n")

    def adopt(self, actor: str, message: Callable[[int], str]) -> str | None:
        """Make the root a repository holding the files already there, in one commit whose
        message is ``message(number of files)``: what ``init`` and a first ``serve`` do. The
        commit's id, or ``None`` when there was nothing to commit."""
        self.init()
        dirty = self.dirty_paths()
        return self.commit(dirty, actor, message(len(dirty))) if dirty else None

    @property
    def repo(self) -> pygit2.Repository:
        if self._repo is None:
            git2 = load_pygit2()
            try:
                self._repo = git2.Repository(str(self.root))
            except git2.GitError as exc:
                raise StorageError(f"cannot open git repository in {self.root}: {exc}") from exc
        return self._repo

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
        :mod:`kiwifs.gitindex`).
        """
        process = self._process
        if process is None:
            oid = self.commit_objects(paths, actor, message, trailer, contents)
        else:
            oid = process.commit(paths, actor, message, trailer, contents)
        if oid is None:
            return None
        with self._lock:
            self._index_stale = True
        if not self._index_syncer.poke():
            self.sync_index()  # closed: no background thread any more, sync now
        return oid

    def commit_objects(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None = None,
        contents: Mapping[str, bytes | None] | None = None,
        wanted: Callable[[], bool] | None = None,
    ) -> str | None:
        """The commit itself, under the git lock, without the index file's upkeep: what
        :meth:`commit` does here, or the commit process (:mod:`kiwifs.commitproc`) for it.

        ``wanted`` is asked once the lock is held; False makes no commit (StorageError): the
        commit process asks whether its server still lives.
        """
        git2 = load_pygit2()
        with self._lock, self._index_file.locked():
            if wanted is not None and not wanted():
                raise StorageError("git commit not made: the server asking for it is gone")
            try:
                reflock.clear_abandoned(self.root)
                return self._commit(paths, actor, message, trailer, contents)
            except (git2.GitError, OSError) as exc:
                raise StorageError(f"git commit failed: {self._relative(exc)}") from exc

    def _commit(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None,
        contents: Mapping[str, bytes | None] | None,
    ) -> str | None:
        repo = self.repo
        git2 = load_pygit2()
        head = None if repo.head_is_unborn else repo.head.peel(git2.Commit)
        changes = {rel: self._blob(rel, contents) for rel in paths}
        base = head.tree if head is not None else None
        tree = self._apply(base, changes)
        if tree is None:
            tree = repo.TreeBuilder().write()
        if head is not None and head.tree_id == tree:
            return None
        sig = git2.Signature(actor or "kiwifs", EMAIL, int(time.time()), 0)
        full = message if trailer is None else f"{message}\n\n{trailer}"
        parents = [head.id] if head is not None else []
        self._index_file.mark_stale()  # before HEAD moves: a crash from here on is repaired
        with reflock.moving_head(self.root):
            return str(repo.create_commit("HEAD", sig, sig, full + "\n", tree, parents))

    def _relative(self, exc: BaseException) -> str:
        """An error's text with the root's absolute path left out (it reaches API clients)."""
        return str(exc).replace(f"{self.root.resolve()}/", "").replace(f"{self.root}/", "")

    def _blob(
        self, rel: str, contents: Mapping[str, bytes | None] | None
    ) -> tuple[pygit2.Oid, int] | None:
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
        self, tree: pygit2.Tree | None, changes: Mapping[str, tuple[pygit2.Oid, int] | None]
    ) -> pygit2.Oid | None:
        """Write ``tree`` with ``changes`` applied; ``None`` when the result is empty."""
        repo = self.repo
        builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
        folders: dict[str, dict[str, tuple[pygit2.Oid, int] | None]] = {}
        for rel, change in changes.items():
            name, sep, rest = rel.partition("/")
            if sep:
                folders.setdefault(name, {})[rest] = change
            elif change is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                builder.insert(name, change[0], change[1])
        for name, sub in folders.items():
            current = builder.get(name)
            subtree = current if isinstance(current, load_pygit2().Tree) else None
            written = self._apply(subtree, sub)
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

    def start_commit_process(self) -> None:
        """Make commits in a child process from now on (see :mod:`kiwifs.commitproc`)."""
        from .commitproc import CommitProcess

        if self._process is None:
            self._process = CommitProcess(self.root)
            self._process.start()

    def close(self) -> None:
        """Stop the commit process and the background index syncer after a last sync."""
        process, self._process = self._process, None
        if process is not None:
            process.close()
        self._index_syncer.stop()
        self.sync_index()
        with self._lock:
            self._index_file.close()

    def head(self) -> str | None:
        with self._lock:
            repo = self.repo
            return None if repo.head_is_unborn else str(repo.head.target)

    def dirty_paths(self) -> list[str]:
        """Knowledge files whose disk state differs from HEAD (for crash recovery)."""
        self.sync_index()
        status = self.repo.status(untracked_files="all")
        return sorted(p for p, flags in status.items() if flags != load_pygit2().GIT_STATUS_IGNORED)

    # -- reading ----------------------------------------------------------------------------

    def _run(self, *args: str) -> str:
        import subprocess  # only history reads run git: ~4 ms of import a report does not pay

        env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP} | _GIT_ENV_SET
        proc = subprocess.run(
            ["git", *_NO_PROGRAMS, "-C", str(self.root), "-c", "core.quotepath=false", *args],
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
        out = self._run("log", *_NO_DIFF_PROGRAMS, "--format=%H%x1f%aI%x1f%an%x1f%s%x1e", "--", rel)
        versions = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            h, date, author, subject = record.split("\x1f", 3)
            versions.append(Version(h, date, author, subject))
        return versions

    def show(self, rel: str, rev: str) -> bytes:
        _check_rev(rev)
        if not self.is_repo():
            raise NotFound("version not found")
        git2 = load_pygit2()
        try:
            commit = self.repo.revparse_single(rev).peel(git2.Commit)
            entry = commit.tree[rel]
        except (KeyError, ValueError, git2.GitError, git2.InvalidSpecError) as exc:
            raise NotFound("version not found") from exc
        blob = self.repo[entry.id]
        if not isinstance(blob, git2.Blob):
            raise NotFound("version not found")
        data: bytes = blob.data
        return data

    def diff(self, rel: str, rev_from: str, rev_to: str) -> str:
        for rev in (rev_from, rev_to):
            _check_rev(rev)
        try:
            return self._run("diff", *_NO_DIFF_PROGRAMS, "--no-color", rev_from, rev_to, "--", rel)
        except _GitFailed as exc:
            raise NotFound(f"unknown version: {exc}") from exc

    def first_added(self, paths: Sequence[str]) -> dict[str, float]:
        """When each of ``paths`` was first added to history (commit time, POSIX seconds);
        paths git never saw are left out. One ``git log`` over the paths' top folders."""
        wanted = set(paths)
        if not wanted or not self.is_repo() or self.head() is None:
            return {}
        spec = sorted(wanted) if len(wanted) <= 64 else sorted({_top(p) for p in wanted})
        try:
            out = self._run(
                "log",
                "--diff-filter=A",
                "--no-renames",
                "--format=%x1e%ct",
                "--name-only",
                "--",
                *spec,
            )
        except _GitFailed:
            return {}
        found: dict[str, float] = {}
        for record in out.split("\x1e"):  # newest first: the last time seen is the first add
            lines = record.strip("\n").split("\n")
            if not lines or not lines[0].strip().isdigit():
                continue
            when = float(lines[0])
            for line in lines[1:]:
                if line in wanted:
                    found[line] = when
        return found

    def changes(self, since: str | None, limit: int) -> list[Change]:
        """The latest commits (after ``since``), newest first, each with what it changed.

        The action and path come from the commit's own tree changes, never from its message: a
        message is text a caller may choose, and ``delete: index.md`` in it deletes nothing.
        """
        check_sequence(since)
        if not self.is_repo() or self.head() is None:
            return []
        args = ["log", *_NO_DIFF_PROGRAMS, f"--max-count={limit}", "-z", "--name-status"]
        args += ["--find-renames=100%", "--format=%x1e%H%x1f%an%x1f%aI"]
        if since:
            args.append(f"{since}..HEAD")
        try:
            out = self._run(*args)
        except _GitFailed as exc:
            raise UsageError("unknown sequence") from exc
        return [
            Change(h, *_action_of(files), author, date)
            for (h, author, date), files in _log_records(out)
        ]


class _GitFailed(Exception):
    pass


def _top(path: str) -> str:
    """A path's top-level folder (the path itself for a file at the root)."""
    return path.split("/", 1)[0]


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


def check_sequence(since: str | None) -> None:
    """A ``since`` of the changes feed: a commit id or its abbreviation (4–40 lowercase hex
    digits), so that nothing else (an option, a range, a ref name) ever reaches ``git log``."""
    if since and not (4 <= len(since) <= 40 and all(c in "0123456789abcdef" for c in since)):
        raise UsageError("unknown sequence")


def _check_rev(rev: str) -> None:
    """A revision git may be asked about: not empty, no option (``-x``), no control character
    (git would cut ``HEAD\\0…`` at the NUL and answer for ``HEAD``), valid Unicode."""
    if not rev or rev.startswith("-") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in rev):
        raise UsageError(f"invalid version: {rev!r}")
    check_text(rev, "version")


def commit_subject(message: str) -> str:
    """``message`` as the one line a commit message starts with.

    Line breaks and other control characters become spaces, runs of spaces one space, lone
    surrogates are dropped, and the line is cut at :data:`MAX_SUBJECT_CHARS`. A caller's
    message (a bulk write's ``message``) therefore cannot add a paragraph of its own, i.e.
    cannot forge a ``Provenance:`` trailer, nor make every history listing carry megabytes.
    """
    printable = "".join(
        " " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in without_surrogates(message)
    )
    line = " ".join(printable.split())
    if len(line) > MAX_SUBJECT_CHARS:
        line = line[: MAX_SUBJECT_CHARS - 1] + "\u2026"
    return line


FileChange = tuple[str, tuple[str, ...]]  # git's status letter and the paths it names


def _log_records(out: str) -> list[tuple[tuple[str, str, str], list[FileChange]]]:
    """Parse ``git log -z --name-status`` with ``%x1e%H%x1f%an%x1f%aI`` headers.

    Tokens are NUL-separated; after a header come entries of a status (``A``, ``M``, ``D``,
    ``R100``…) and its one path, or two for a rename or copy. Paths are taken by count, so a
    path holding any character at all cannot be read as a header or a status.
    """
    records: list[tuple[tuple[str, str, str], list[FileChange]]] = []
    tokens = out.split("\0")
    i = 0
    while i < len(tokens):
        token = tokens[i].lstrip("\n")
        i += 1
        if token.startswith("\x1e"):
            h, author, date = token[1:].split("\x1f", 2)
            records.append(((h, author, date), []))
        elif token and records:
            count = 2 if token[0] in "RC" else 1
            records[-1][1].append((token[0], tuple(tokens[i : i + count])))
            i += count
    return records


def _action_of(files: list[FileChange]) -> tuple[str, str]:
    """The ``(path, action)`` of a commit from what it changed.

    One file: ``write`` (added or modified), ``delete``, or ``rename`` (an exact rename; the
    path is the new name). Several files (a bulk write, a batch of asynchronous commits) or none
    (a merge): an empty path, with ``delete`` when every change deleted a file, else ``write``.
    """
    if len(files) == 1:
        status, paths = files[0]
        if status == "D":
            return paths[-1], "delete"
        if status == "R":
            return paths[-1], "rename"
        return paths[-1], "write"
    if files and all(status == "D" for status, _ in files):
        return "", "delete"
    return "", "write"
