"""The git index file (``.git/index``), kept consistent with HEAD although commits bypass it.

kiwifs builds each commit's tree from HEAD's tree (see :mod:`kiwifs.git.repo`), never from the
index file, because rewriting that file costs time in proportion to the whole root (~45 ms at
100k files) while a commit should cost what its paths cost. But ``git status`` and a user's plain
``git commit`` start from the index file: one that lags behind HEAD shows acknowledged files as
deleted and untracked, and a ``git commit`` would then delete them from history.

So the index file is reconciled with HEAD off the write path — after a quiet moment, at clean
shutdown — and, because ``kill -9`` can strike between a commit and that reconcile, again when the
root is next opened. A marker file (:data:`STALE_MARKER`) says a reconcile is due: every kiwifs
commit makes sure it exists *before* moving HEAD, and only a reconcile that brought the index file
up to date removes it. Commits and reconciles hold one lock across processes
(:data:`LOCK_FILE`), so no commit slips in between a reconcile and the removal of the marker.
Whatever the moment of a crash, the marker is there when the index file may lag; checking it
costs one ``stat`` at open.

A reconcile never undoes a user's own staging: a path whose index entry equals the file on disk
(``git add``) is left alone; any other difference is repaired (see :func:`_repair`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.heap import release_free_memory
from kiwifs.errors import KiwiError

if TYPE_CHECKING:
    import pygit2

log = logging.getLogger(__name__)

STATE_DIR = ".kiwi/state"
# kiwifs committed and the git index file may not show it yet: reconcile at the next open
STALE_MARKER = f"{STATE_DIR}/git-index.stale"
# kiwifs is writing .git/index: an index.lock found while this exists was left by a crash
WRITING_MARKER = f"{STATE_DIR}/git-index.writing"
# held by every kiwifs commit and every reconcile, in every process
LOCK_FILE = f"{STATE_DIR}/git.lock"
GIT_INDEX_LOCK = ".git/index.lock"

MODE_LINK = 0o120000
MODE_SUBMODULE = 0o160000

# (blob id as hex, file mode) of one path in HEAD, the index file or the working tree
Entry = tuple[str, int] | None


def reconcile_due(root: Path) -> bool:
    """True when a crash may have left the git index file behind HEAD (one ``stat``)."""
    return (root / STALE_MARKER).exists() or (root / WRITING_MARKER).exists()


class IndexFile:
    """The git index file of one root and the markers that say whether it matches HEAD."""

    def __init__(self, root: Path, repo: Callable[[], pygit2.Repository]) -> None:
        self.root = root
        self._repo = repo
        self._lock_fd: int | None = None
        self._stale = os.fspath(root / STALE_MARKER)  # checked before every commit

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold :data:`LOCK_FILE` (callers serialise threads themselves).

        Best effort: a root whose ``.kiwi/state`` cannot be created gets no lock, and then no
        marker either, which is the behaviour of a root without crash recovery.
        """
        fd = self._lock_descriptor()
        if fd is None:
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock_descriptor(self) -> int | None:
        if self._lock_fd is None:
            try:
                (self.root / STATE_DIR).mkdir(parents=True, exist_ok=True)
                self._lock_fd = os.open(
                    self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
                )
            except OSError as exc:
                log.warning("cannot open %s: %s", LOCK_FILE, exc)
                return None
        return self._lock_fd

    def close(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    def mark_stale(self) -> None:
        """Before a commit moves HEAD (lock held): record that the index file will lag."""
        if os.path.exists(self._stale):
            return
        try:
            _create_durably(Path(self._stale))
        except OSError as exc:
            log.warning("cannot create %s: %s", STALE_MARKER, exc)

    def reconcile(self) -> bool:
        """Bring the index file up to date with HEAD; False when it could not be written.

        A lock held by a user's ``git`` makes it fail; the marker then stays, and the next
        reconcile (or the next open) tries again.
        """
        import pygit2

        with self.locked():
            try:
                self._clear_abandoned_lock()
                repo = self._repo()
                try:
                    self._reconcile(repo)
                finally:
                    # the index read and the trees walked stay in the handle's caches until
                    # Python's cycle collector frees it (pygit2's handles are in cycles), and
                    # glibc keeps what they free: 195 MB at a million files, which a server
                    # then kept for good
                    repo.free()
                    release_free_memory()
            except (OSError, pygit2.GitError, KiwiError) as exc:
                log.info("git index file not updated (retried later): %s", exc)
                return False
            with contextlib.suppress(OSError):  # a marker left in place costs a reconcile
                os.unlink(self._stale)
            return True

    def _reconcile(self, repo: pygit2.Repository) -> None:
        import pygit2

        if repo.head_is_unborn:
            return
        tree = repo.head.peel(pygit2.Commit).tree
        index = repo.index
        try:
            index.read(False)
            differing = _differing(tree, index)
            changed = [p for p, head in differing.items() if _repair(self.root, p, head, index)]
            if changed:
                self._write(index)
        except BaseException:
            with contextlib.suppress(OSError, pygit2.GitError):
                index.read(True)  # drop the half-made changes from memory
            raise

    def _write(self, index: pygit2.Index) -> None:
        writing = self.root / WRITING_MARKER
        _create_durably(writing)
        try:
            index.write()  # fails, leaving the lock alone, when a git command holds index.lock
        finally:
            os.unlink(writing)  # only a kill in between leaves it: then the lock is ours

    def _clear_abandoned_lock(self) -> None:
        """Remove the ``index.lock`` of a kiwifs write that was killed midway (lock held)."""
        writing = self.root / WRITING_MARKER
        if not writing.exists():
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / GIT_INDEX_LOCK)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(writing)


def _create_durably(path: Path) -> None:
    """Create an empty file and make its name survive a power cut (fsync of the folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _differing(tree: pygit2.Tree, index: pygit2.Index) -> dict[str, Entry]:
    """Paths whose entry differs between HEAD's tree and the index file, in path order, each
    with its entry in HEAD.

    HEAD's entry comes with the diff (its old side): looking each path up in the tree again
    would inflate and parse every folder on its way once per path, since libgit2 caches no tree
    over 4 KiB (~100 entries): 0.7 ms a path in a folder of 3,000 files, a reconcile after a
    burst of 3,000 writes 2.3 s instead of 0.05 (see docs/benchmarks.md).
    """
    import pygit2

    heads: dict[str, Entry] = {}
    for delta in tree.diff_to_index(index).deltas:
        old, new = delta.old_file, delta.new_file
        if old.path != new.path:  # not made by a diff without rename detection; to be safe
            heads[old.path] = _tree_entry(tree, old.path)
            heads[new.path] = _tree_entry(tree, new.path)
        elif delta.status == pygit2.enums.DeltaStatus.ADDED:
            # not in HEAD, unless this is the second half of a change of type (a file become a
            # link is a deletion and an addition of one path): then the first half says
            heads.setdefault(old.path, None)
        elif old.mode == MODE_SUBMODULE:
            heads[old.path] = None  # not a file in HEAD (as _tree_entry says)
        else:
            heads[old.path] = (str(old.id), int(old.mode))
    return dict(sorted(heads.items()))


def _repair(root: Path, rel: str, head: Entry, index: pygit2.Index) -> bool:
    """Make ``rel``'s index entry agree with HEAD; True when the index changed.

    - the file on disk is HEAD's version (what a kiwifs commit leaves): stage it, with its stat
      data, so ``git status`` need not hash it again;
    - the index entry is the file on disk, different from HEAD: the user's ``git add``, kept;
    - otherwise (the index lags behind a commit and the file was edited since): put HEAD's
      version in the index, so a ``git commit`` cannot undo the commit.
    """
    import pygit2

    staged, disk = _index_entry(index, rel), _disk_entry(root, rel)
    if staged == disk:
        return False
    if disk == head:
        if disk is None:
            index.remove(rel)
        else:
            index.add(rel)
        return True
    if head is None:
        index.remove(rel)
    else:
        index.add(pygit2.IndexEntry(rel, pygit2.Oid(hex=head[0]), pygit2.enums.FileMode(head[1])))
    return True


def _tree_entry(tree: pygit2.Tree, rel: str) -> Entry:
    import pygit2

    try:
        obj = tree[rel]
    except KeyError:
        return None
    if not isinstance(obj, pygit2.Blob):
        return None
    return str(obj.id), int(obj.filemode or 0)


def _index_entry(index: pygit2.Index, rel: str) -> Entry:
    try:
        entry = index[rel]
    except KeyError:
        return None
    return str(entry.id), int(entry.mode)


def _disk_entry(root: Path, rel: str) -> Entry:
    """The blob id and git mode the file at ``rel`` would have, or ``None`` when not a file."""
    import pygit2

    path = root / rel
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return str(pygit2.hash(os.fsencode(os.readlink(path)))), MODE_LINK
        if not stat.S_ISREG(st.st_mode):
            return None
        mode = 0o100755 if st.st_mode & stat.S_IXUSR else 0o100644
        return str(pygit2.hashfile(str(path))), mode
    except OSError:
        return None


class BackgroundSync:
    """Runs ``sync`` on a daemon thread after :data:`SYNC_DELAY` of quiet following a commit.

    A reconcile costs time in proportion to the root, so a burst of commits is followed by one
    reconcile, not one each. It also runs at :meth:`Git.close <kiwifs.git.repo.Git.close>` and
    at interpreter exit; a crash before then is repaired at the next open.

    The thread ends once a sync leaves nothing owed, and the next commit starts another: a
    server holding many spaces open keeps no thread for those not written to lately.
    """

    def __init__(self, sync: Callable[[], bool]) -> None:
        self._sync = sync  # strong: a Git dropped right after a commit must still be synced
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._dirty = False
        self._stopped = False

    def poke(self) -> bool:
        """Schedule a sync; False when stopped (the caller must sync itself)."""
        with self._wake:
            if self._stopped:
                return False
            self._dirty = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kiwifs-git-index", daemon=True
                )
                self._thread.start()
                _live_syncers.add(self)
            self._wake.notify()
            return True

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._dirty or self._stopped:
                    if self._thread is threading.current_thread():
                        self._thread = None  # the next poke starts another
                    return
                self._dirty = False
                # wait for a quiet moment: more commits keep pushing the sync back
                while self._wake.wait(SYNC_DELAY) and not self._stopped:
                    self._dirty = False
            self._sync_with_retries()

    def _sync_with_retries(self) -> None:
        """Sync; a sync that found the index file locked (a user's ``git status`` refreshes it
        under ``index.lock``) is tried again after a pause, so that ``git status`` does not stay
        behind until the next commit. Gives up after :data:`SYNC_RETRIES` tries."""
        for _ in range(SYNC_RETRIES):
            try:
                if self._sync():
                    return
            except Exception:  # a root deleted under a live process, a read-only .git ...
                log.exception("git index file sync failed; retried after the next commit")
                return
            with self._wake:
                if self._stopped or self._wake.wait_for(lambda: self._stopped, SYNC_DELAY / 4):
                    return

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        _live_syncers.discard(self)

    def flush_at_exit(self) -> None:
        self.stop()
        self._sync()


SYNC_DELAY = 1.0
SYNC_RETRIES = 40  # about 10 s of a busy index.lock
_live_syncers: weakref.WeakSet[BackgroundSync] = weakref.WeakSet()


@atexit.register
def _sync_all_at_exit() -> None:
    for syncer in list(_live_syncers):
        with contextlib.suppress(Exception):
            syncer.flush_at_exit()
