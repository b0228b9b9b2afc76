"""The single write funnel: every mutation from every interface passes through here.

    canonical path → If-Match → provenance → alias-bomb check → atomic write → git commit →
    index → event

Writes to one root are serialised twice over: a lock per root inside this process and an
``flock`` on ``.kiwi/state/write.lock`` across processes (a ``kiwifs memory merge`` next to a
running ``kiwifs serve``). Before touching the disk a write names its paths in
``.kiwi/state/uncommitted.log``; once its commit is made the journal can be emptied. Should the
process die in between, the recovery at the next start (:mod:`kiwifs.writes.recovery`) commits what
is on disk, so a write that reached the disk is never lost from history. A bulk write
(:mod:`kiwifs.writes.bulk`) first records its whole content in ``.kiwi/state/bulk.journal``
(:mod:`kiwifs.writes.journal`), so that a crash midway is finished or undone at the next start (or
the next write), never committed in part. Recovery and the bulk write call the pipeline, never the
other way round: whoever composes them (:class:`~kiwifs.knowledge.Knowledge`) calls them with
it. The ETag conditions a write may carry (``If-Match``, ``If-None-Match``) are
:mod:`kiwifs.writes.preconditions`.

**Group commit.** Only the disk writes are serialised: an operation journals its paths, writes
its files and hands its commit to the :class:`~kiwifs.git.committer.Committer` under the lock, then
releases the lock and waits until a commit holding it is made (synchronous, the default) or
returns at once (``--async-commit``). Concurrent writers thus share commits instead of queueing
behind each other's. Two rules keep history equal to the disk:

- The process keeps the ``flock`` from its first write until *all* its writes are committed
  (and only then empties the journal): see :mod:`kiwifs.writes.lock`.
- Operations that must commit alone under the lock (a bulk write, which is undone if its commit
  fails) first wait for the queue to drain, so commits stay in the order of the disk writes.

**Durability.** A write's file is written and renamed under the lock without fsync; the writer
fsyncs it and its folder after leaving the lock (:meth:`~kiwifs.files.atomic.Unsynced.sync`,
the folder's fsync makes the rename durable), before it is acknowledged, so concurrent writers'
fsyncs overlap with each other and with the commit instead of queueing under the lock. The two
fsyncs run at the same time, and writers of one folder share its fsync
(:mod:`kiwifs.files.foldersync`).
The journal is not fsynced:
like git's own objects (libgit2 does not fsync them) it serves the crash of a process, which the
page cache survives; after a power cut every acknowledged file is there, the newest history may
not be. A bulk write, a delete and the bulk journal keep their fsyncs under the lock.

Tuning (:class:`~kiwifs.tuning.Tuning`): ``group_commit=False`` commits each operation under
the lock (the benchmark's plain side); ``strict_fsync`` (``KIWIFS_FSYNC=strict``) fsyncs the
journal, the file and its folder under the lock, each write on its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kiwifs.base.limits import MAX_FILE_BYTES
from kiwifs.base.paths import canonical
from kiwifs.errors import Conflict, NotFound, PayloadTooLarge
from kiwifs.files.atomic import Unsynced
from kiwifs.files.storage import Storage
from kiwifs.frontmatter.provenance import Provenance, inject_provenance
from kiwifs.frontmatter.reader import refuse_alias_bomb
from kiwifs.git.committer import CommitStatus, Committer, Ticket
from kiwifs.git.messages import commit_trailer
from kiwifs.git.pendingcommit import PendingCommit
from kiwifs.git.repo import Git, blob_id
from kiwifs.tuning import Tuning
from kiwifs.writes import journal as bulklog
from kiwifs.writes.events import Event, EventBus
from kiwifs.writes.lock import WriteLock
from kiwifs.writes.preconditions import check_if_match, check_if_none_match

STATE_DIR = ".kiwi/state"
JOURNAL = "uncommitted.log"

IndexHook = Callable[[list[str]], None]


@dataclass(frozen=True)
class WriteResult:
    path: str
    etag: str


class Pipeline:
    """Serialised writes on one root, each one on disk and in git when it returns."""

    def __init__(
        self,
        storage: Storage,
        git: Git | None,
        events: EventBus,
        index_hook: IndexHook | None,
        tuning: Tuning | None = None,
    ) -> None:
        self.tuning = tuning or Tuning()
        self.storage = storage
        self.git = git
        self.events = events
        self.index_hook = index_hook
        self.root = storage.root
        self.committer: Committer | None = None
        self.asynchronous = False
        self.state = self.root / STATE_DIR
        self._write_lock = WriteLock(
            self.root, self.state, self._pending, self.drain, self._on_release
        )
        self._strict = self.tuning.strict_fsync  # journal, file and folder fsynced under the lock
        self._local = threading.local()  # per thread: locked() depth, announced to committer
        # The journal's descriptor, opened by the first operation after write.lock is taken and
        # closed when it is let go: while the flock is ours no other process touches the file,
        # and one write() per operation is all the journal costs under the lock.
        self._journal_fd: int | None = None
        self._journal_guard = threading.Lock()
        self._refusal: str | None = None  # why writes are refused (a replica's root)

    # -- locking and journal ----------------------------------------------------------------

    def refuse_writes(self, reason: str | None) -> None:
        """Refuse every write from now on with :class:`Conflict` saying ``reason`` (a replica's
        root takes its history from its primary only); ``None``: take writes again."""
        self._refusal = reason

    @contextlib.contextmanager
    def locked(self, settle: bool = True) -> Iterator[None]:
        """Hold the root's write lock (thread and process wide).

        The ``flock`` is kept after leaving while some of this process's writes are still
        waiting for their commit (see :mod:`kiwifs.writes.lock`).

        With ``settle``, a bulk write left unfinished (by a crashed process, or by a failure that
        could not be undone) is finished or undone first, so that no later write can be
        overwritten when it is; while that is impossible every write fails.
        """
        if self._refusal is not None:
            raise Conflict(self._refusal)
        local = self._local
        outermost = not getattr(local, "depth", 0)
        if outermost:
            local.announced = self.committer
            if self.committer is not None:
                self.committer.announce()  # a group commit starting now may wait for this one
        local.depth = getattr(local, "depth", 0) + 1
        try:
            with self._write_lock.held():
                if settle and bulklog.exists(self.state):
                    bulklog.finish(self.state, self.storage, self.git, self.index_hook)
                yield
        finally:
            local.depth -= 1
            if outermost:
                announced, local.announced = local.announced, None
                if announced is not None:
                    announced.withdraw()  # it submitted nothing

    def _pending(self) -> int:
        return self.committer.pending if self.committer is not None else 0

    def _on_release(self) -> None:
        """write.lock about to go, nothing pending: what the journal names is committed."""
        if self.committer is not None:
            self.clear_journal()  # else each operation empties it after its commit
        self._close_journal()

    def journal(self, paths: list[str]) -> None:
        """Name ``paths`` in the crash journal; every operation calls it before touching disk.

        While background commits are failing, writes are refused here, before anything is
        written, as a synchronous commit would fail them.
        """
        if self.committer is not None:
            self.committer.check()
        if self.git is None:
            return
        with self._journal_guard:
            fd = self._journal_fd
            if fd is None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                fd = self._journal_fd = os.open(self.state / JOURNAL, flags, 0o666)
        view = memoryview("".join(p + "\n" for p in paths).encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]
        if self._strict:
            os.fsync(fd)

    def _close_journal(self) -> None:
        with self._journal_guard:  # the committer's release and close() may both get here
            fd, self._journal_fd = self._journal_fd, None
        if fd is not None:
            os.close(fd)

    def clear_journal(self) -> None:
        if self.git is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.truncate(self.state / JOURNAL, 0)

    # -- the funnel -------------------------------------------------------------------------

    def commit(
        self,
        written: dict[str, bytes | None],
        actor: str,
        message: str,
        prov: Provenance | None,
        alone: bool = False,
    ) -> Ticket | None:
        """Commit what the operation wrote (``None``: deleted), the bytes themselves rather than
        the disk: a commit made later then never catches a later operation half done.

        Returns the ticket to :meth:`_committed` on once the lock is released (group commit),
        or ``None`` when there is nothing to wait for (committed here, or asynchronous).
        ``alone``: commit now, in a commit of its own, after what is queued (lock held).
        """
        trailer = commit_trailer(prov)
        paths = list(written)
        committer = self._committer()
        if committer is not None and not alone:
            if self.index_hook is not None:
                self.index_hook(paths)  # first: submitting is the last step under the lock
            announced = getattr(self._local, "announced", None) is committer
            self._local.announced = None
            pending = PendingCommit(tuple(paths), actor, message, trailer, written)
            ticket = committer.submit(pending, announced)
            return None if self.asynchronous else ticket
        if self.git is not None:
            self.git.commit(paths, actor, message, trailer, written)
        if committer is None:
            self.clear_journal()  # else once every queued write is committed too
        if self.index_hook is not None:
            self.index_hook(paths)
        return None

    @contextlib.contextmanager
    def _unsynced(self, rel: str, data: bytes) -> Iterator[Unsynced | None]:
        """Write ``rel`` (lock held) and yield it for :meth:`_sync` after the lock; fsynced
        here already with ``strict_fsync``. Closed unsynced if the block fails."""
        unsynced = self.storage.write(rel, data, durable=self._strict)
        try:
            yield unsynced
        except BaseException:
            if unsynced is not None:
                unsynced.close()
            raise

    def _sync(self, unsynced: Unsynced | None) -> None:
        """After the lock, before the acknowledgement: make the file just written durable."""
        if unsynced is not None:
            unsynced.sync()

    def _committed(self, ticket: Ticket | None) -> None:
        """Wait (lock released) until the operation's commit is made; StorageError if it
        failed. Its files stay on disk and journaled: committed once git works again, or by
        the next start."""
        if ticket is not None and self.committer is not None:
            self.committer.wait(ticket)

    def _committer(self) -> Committer | None:
        """The committer, started at the first commit (synchronous group commit)."""
        if self.committer is None and self.git is not None and self.tuning.group_commit:
            idle = self._write_lock.release_if_idle
            self.committer = Committer(self.git, idle, window=0.0, tuning=self.tuning)
        return self.committer

    def drain(self) -> None:
        """Lock held: wait until every queued commit is made (before committing alone)."""
        if self.committer is not None and self._pending():
            self.committer.flush()

    # -- asynchronous commits ---------------------------------------------------------------

    def enable_async_commit(self, window: float = 0.2, max_paths: int = 50) -> None:
        """Commit in the background, in batches (see :mod:`kiwifs.git.committer`)."""
        if self.git is None or self.asynchronous:
            return
        with self.locked():
            self.drain()
            if self.committer is None:
                idle = self._write_lock.release_if_idle
                self.committer = Committer(self.git, idle, window, max_paths, self.tuning)
            else:
                self.committer.window, self.committer.max_paths = window, max_paths
            self.asynchronous = True

    def flush(self) -> None:
        """Wait until every write that returned is committed: with ``--async-commit`` only,
        since a synchronous write returns once committed.

        Raises :class:`~kiwifs.errors.StorageError` when background commits are failing.
        """
        if self.committer is not None and self.asynchronous:
            self.committer.flush()

    def commit_status(self) -> CommitStatus:
        """Pending background commits and whether they are failing (all clear when sync)."""
        committer = self.committer
        return committer.status() if committer is not None else CommitStatus()

    def close(self) -> None:
        """Commit what is pending and stop the committer (what it cannot commit stays in the
        journal for the next start), letting write.lock go."""
        committer = self.committer
        if committer is not None:
            committer.close()
        self.committer, self.asynchronous = None, False
        self._write_lock.close()
        self._close_journal()

    def write(
        self,
        path: str,
        content: bytes,
        actor: str,
        if_match: str | None = None,
        provenance: Provenance | None = None,
        if_none_match: str | None = None,
        precondition: Callable[[], None] | None = None,
    ) -> WriteResult:
        """Write one file; ``precondition`` runs under the lock, before anything is written,
        and refuses by raising (checks that must not race with other writers, such as a new
        episode's id being free)."""
        rel = canonical(path)
        with self.locked():
            check_if_match(self.storage, rel, if_match)
            if precondition is not None:
                precondition()
            check_if_none_match(self.storage, rel, if_none_match)
            data = prepared_content(content, provenance, actor)
            self.journal([rel])
            with self._unsynced(rel, data) as unsynced:
                ticket = self.commit({rel: data}, actor, f"{actor}: {rel}", provenance)
        self._sync(unsynced)
        self._committed(ticket)
        etag = blob_id(data)
        self.events.publish(Event("write", path=rel, actor=actor, etag=etag))
        return WriteResult(rel, etag)

    def edit(
        self,
        path: str,
        change: Callable[[bytes | None], bytes | None],
        actor: str,
        if_match: str | None = None,
        message: str | None = None,
        guard: contextlib.AbstractContextManager[object] | None = None,
    ) -> WriteResult:
        """Read-modify-write under the lock; ``change`` returns ``None`` to leave the file be.

        ``guard`` is entered under the lock before the file is read and left after the commit
        (or the decision to write nothing), with the exception if anything failed: bookkeeping
        that must not interleave with other writers, such as the claims a merge checks and ends.
        With a guard the commit is waited for before the guard is left, so the guard learns
        whether it was made, unless the guard's ``waits_for_commit`` is false (a claims check
        that only refuses: waiting under the lock would give every such write a commit of its
        own instead of sharing one with the writers around it).
        """
        rel = canonical(path)
        with self.locked(), guard if guard is not None else contextlib.nullcontext():
            check_if_match(self.storage, rel, if_match)
            current = self.storage.read_optional(rel)
            data = change(current)
            if data is None or data == current:
                if current is None:
                    raise NotFound(f"file not found: {rel}")
                return WriteResult(rel, blob_id(current))
            check_file_size(data)
            refuse_alias_bomb(data)
            self.journal([rel])
            with self._unsynced(rel, data) as unsynced:
                ticket = self.commit({rel: data}, actor, message or f"{actor}: {rel}", None)
            if guard is not None and getattr(guard, "waits_for_commit", True):
                self._sync(unsynced)
                self._committed(ticket)
                unsynced, ticket = None, None
        self._sync(unsynced)
        self._committed(ticket)
        etag = blob_id(data)
        self.events.publish(Event("write", path=rel, actor=actor, etag=etag))
        return WriteResult(rel, etag)

    def append(
        self,
        path: str,
        content: bytes,
        actor: str,
        separator: bytes = b"\n",
        if_match: str | None = None,
        guard: contextlib.AbstractContextManager[object] | None = None,
    ) -> WriteResult:
        def change(current: bytes | None) -> bytes:
            return current + separator + content if current else content

        return self.edit(path, change, actor, if_match, guard=guard)

    def delete(
        self,
        path: str,
        actor: str,
        if_match: str | None = None,
        guard: contextlib.AbstractContextManager[object] | None = None,
    ) -> str:
        """Delete one file; ``guard`` (the claims it may not go against) is held under the lock
        from before the check to after the file is gone."""
        rel = canonical(path)
        with self.locked(), guard if guard is not None else contextlib.nullcontext():
            if not self.storage.exists(rel):
                raise NotFound("file not found")
            check_if_match(self.storage, rel, if_match)
            self.journal([rel])
            self.storage.delete(rel)
            ticket = self.commit({rel: None}, actor, f"delete: {rel}", None)
        self._committed(ticket)
        self.events.publish(Event("delete", path=rel, actor=actor))
        return rel

    def rename(
        self,
        src: str,
        dst: str,
        actor: str,
        guard: contextlib.AbstractContextManager[object] | None = None,
    ) -> WriteResult:
        """Move one file; ``guard`` as for :meth:`delete` (claims may follow the file)."""
        old, new = canonical(src), canonical(dst)
        with self.locked(), guard if guard is not None else contextlib.nullcontext():
            data = self.storage.read_optional(old)
            if data is None:
                raise NotFound("source file not found")
            if old == new:
                return WriteResult(new, blob_id(data))
            if self.storage.exists(new):
                raise Conflict(f"target already exists: {new}")
            self.journal([old, new])
            with self._unsynced(new, data) as unsynced:
                self.storage.delete(old)
                ticket = self.commit(
                    {old: None, new: data}, actor, f"{actor}: rename {old} \u2192 {new}", None
                )
        self._sync(unsynced)
        self._committed(ticket)
        etag = blob_id(data)
        self.events.publish(Event("write", path=new, actor=actor, etag=etag))
        self.events.publish(Event("delete", path=old, actor=actor))
        return WriteResult(new, etag)


def prepared_content(content: bytes, provenance: Provenance | None, actor: str) -> bytes:
    """A file's bytes as written: within the size limit, provenance recorded, alias bombs
    refused."""
    check_file_size(content)  # before the copy provenance makes of it
    data = inject_provenance(content, provenance, actor)
    check_file_size(data)
    refuse_alias_bomb(data)
    return data


def check_file_size(data: bytes) -> None:
    """The one size limit of every write (:data:`~kiwifs.base.limits.MAX_FILE_BYTES`), on a file as
    it would be written, so that every interface refuses alike (REST 413, an MCP tool error)."""
    if len(data) > MAX_FILE_BYTES:
        raise PayloadTooLarge(
            f"the file would be {len(data)} bytes, over the {MAX_FILE_BYTES >> 20} MiB limit "
            "for a file"
        )
