"""``Serving``: the background work a server runs on a root, started and stopped in order.

A one-shot command opens a :class:`~kiwifs.knowledge.Knowledge`, makes its call and closes it;
``kiwifs serve`` and ``kiwifs mcp`` keep one open for hours, and that needs work no call makes:
the root's server lock, commits in background batches or in a child process, the watcher that
keeps the index current, and the dashboard's loops (the history timeline, the stored check).
They live here rather than on the facade so that the domain API stays the operations every
interface shares, and the order they start in is written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiwifs.errors import UsageError
from kiwifs.files.serverlock import acquire_server_lock
from kiwifs.index.memory.checkcache import QUIET_SECONDS

if TYPE_CHECKING:
    from kiwifs.knowledge import Knowledge
    from kiwifs.server.backup import Pusher
    from kiwifs.server.replica import AckBoard, Follower, Role, StepDown


class Serving:
    """The server's work on ``kb``: what :meth:`start` starts, :meth:`stop` stops (and closes
    ``kb``, which commits what is pending)."""

    def __init__(self, kb: Knowledge) -> None:
        self.kb = kb
        self.follower: Follower | None = None  # this root follows a primary (a replica)
        self._acks: AckBoard | None = None
        self.step_down: StepDown | None = None  # a promoted node's call to its former primary
        self.backup: Pusher | None = None  # [backup]: pushes the branch to a remote

    # -- before the server listens -----------------------------------------------------------

    def lock_root(self) -> int:
        """Take ``.kiwi/server.lock`` so that two servers never share one root.

        Returns the file descriptor holding the lock (released when the process exits).
        """
        return acquire_server_lock(self.kb.root)

    def prepare(self, background: bool = True) -> None:
        """Make the root a repository (unless config says none) and load the embedder, so that
        a server fails at start rather than at its first request. The first import of the
        files already there runs in a child process (``background``, see
        :mod:`kiwifs.git.adoption`): a server answers during it, its commits wait for it."""
        self.kb.ensure_versioned(background)
        self.kb.prepare_vectors()

    def enable_async_commit(self, window: float = 0.2, max_paths: int = 50) -> None:
        """Commit in background batches; a write returns once on disk and journaled.

        History reads (versions, version, diff, changes) wait for pending commits, so they see
        every write that returned. :meth:`stop` commits what is left.
        """
        self.kb.pipeline.enable_async_commit(window, max_paths)

    def commit_pending(self) -> None:
        """Wait until every write that returned is committed (with async commit; a synchronous
        write returns once committed). :class:`~kiwifs.errors.StorageError` while failing."""
        self.kb.pipeline.flush()

    def start_commit_process(self) -> None:
        """Make git commits in a child process from now on, so that a server's threads go on
        while one is made (see :mod:`kiwifs.git.child`); ``Tuning.commit_process`` off keeps
        them in this process."""
        git = self.kb.git
        if git is not None and self.kb.tuning.commit_process:
            from kiwifs.git.child import CommitProcess  # servers only

            git.start_commit_process(CommitProcess(self.kb.root, git.kept_trees))

    # -- while it serves ---------------------------------------------------------------------

    def follow(self, role: Role) -> Follower:
        """Make this root a replica of ``role.primary``: local writes refused from now on (they
        are the primary's to make), its commits fetched and applied once :meth:`start` runs."""
        from kiwifs.server.replica import Follower, set_follower  # replicas only

        self.kb.pipeline.refuse_writes(
            f"this root is a replica of {role.primary}: writes go to the primary"
        )
        self.follower = Follower(self.kb, role)
        set_follower(self.kb, self.follower)
        return self.follower

    @property
    def acks(self) -> AckBoard:
        """What this root's replicas reported holding (a primary's; made on first use)."""
        if self._acks is None:
            from kiwifs.server.replica import AckBoard

            self._acks = AckBoard(self.kb)
        return self._acks

    def promote(self, here: str | None = None) -> None:
        """Make this replica the primary (its primary is gone: manual failover). It stops
        following, takes writes from now on and remembers it, so a restart stays primary. With
        ``here`` (this node's URL as the others reach it), the former primary is told to follow
        it as soon as it is back (:class:`~kiwifs.server.replica.StepDown`).
        :class:`UsageError` on a node that is the primary already."""
        from kiwifs.server.replica import Role, StepDown, check_primary_url, save_role, set_follower

        follower = self.follower
        if follower is None:
            raise UsageError("this node is the primary already")
        url = check_primary_url(here) if here else None
        follower.stop()
        save_role(self.kb.root, Role())
        self.follower = None
        set_follower(self.kb, None)
        self.kb.pipeline.refuse_writes(None)
        if url is not None and follower.role.primary is not None:
            self.step_down = StepDown(follower.role.primary, url, follower.role.key)

    def demote(self, primary: str, key: str | None) -> None:
        """This primary was replaced (a replica was promoted while it was away): follow the
        new ``primary`` from now on. Its writes are refused at once; what it had that the new
        primary lacks is kept aside, not lost (:func:`kiwifs.git.follow.fast_forward`)."""
        from kiwifs.server.replica import Role, check_primary_url, load_role, prepare_replica

        if self.follower is not None:
            raise UsageError("this node is a replica already")
        prepare_replica(self.kb.root, Role(check_primary_url(primary), key))
        self.follow(load_role(self.kb.root)).start()

    def start(self, dashboard: bool = True) -> None:
        """Start the background loops: the index watcher first (the others read its rows),
        then a replica's follower, then, for a server with the web dashboard, the timeline and
        the stored check."""
        self.start_watching()
        if self.follower is not None:
            self.follower.start()
        self.start_backup()
        if dashboard:
            self.start_timeline()
            self.start_checking()

    def stop(self) -> None:
        """Stop every loop, commit what is pending and close the root (:meth:`Knowledge.close`:
        uvicorn re-raises SIGTERM after shutdown, so no hook after the server would run)."""
        if self.follower is not None:
            self.follower.stop()
        if self.step_down is not None:
            self.step_down.stop()
        try:
            self.kb.close()
        finally:
            self.stop_backup()

    def start_backup(self) -> None:
        """Push the branch to ``[backup] remote`` on a timer (:mod:`kiwifs.server.backup`):
        nothing, not even a thread, for a root without one or without git."""
        config = self.kb.config.backup
        if self.backup is not None or not config.enabled or self.kb.git is None:
            return
        from kiwifs.server import backup  # roots with a [backup] only

        self.backup = backup.start(self.kb.root, config, lambda: self.follower is None)

    def stop_backup(self) -> None:
        """The last push, after the last commits (bounded: :data:`backup.STOP_WAIT`)."""
        pusher, self.backup = self.backup, None
        if pusher is not None:
            from kiwifs.server import backup

            backup.stop(pusher)

    def start_watching(self) -> None:
        """Keep the index current in the background (file events plus a periodic reconcile),
        ready once the first search and report of the default prefix are loaded."""
        self.kb.indexing.start_watching(warm_prefix=self.kb.episodes_prefix())

    def stop_watching(self) -> None:
        self.kb.indexing.stop_watching()

    def start_timeline(self) -> None:
        """Keep the history behind :meth:`Knowledge.overview` current in the background."""
        self.kb.consolidation.start_timeline()

    def start_checking(self, quiet: float = QUIET_SECONDS) -> None:
        """Keep the check behind :meth:`Knowledge.overview`'s problems current in the
        background: run again ``quiet`` seconds after files change, stored in the index, never
        on a request."""
        self.kb.integrity.start_checking(quiet)

    def stop_checking(self) -> None:
        self.kb.integrity.stop_checking()
