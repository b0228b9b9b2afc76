"""When and how :class:`Knowledge` uses its index: opened lazily, reconciled before answering,
kept current by a watcher while a server runs, rebuilt when found corrupt.

The policy in one place:

* The index opens on first use. A root where ``.kiwi/state`` cannot be written answers the memory
  report by the plain scan, and search and ``/meta`` from a throw-away index in a temporary folder.
* Without a running watcher, every answer is preceded by a reconcile (a stat walk that re-reads
  only changed files), so files edited behind our back are always seen.
* With a watcher, answers come straight from the index: events refresh it within milliseconds and
  a periodic reconcile catches what events miss.
* An SQLite error that shows real damage (a corrupt or foreign file, missing tables) resets the
  index, fills it again from the files and retries once. A busy database is never reset: each
  statement waits for the other connection's lock
  (:data:`~kiwifs.index.connections.BUSY_TIMEOUT`), then the call fails with
  :class:`~kiwifs.errors.Busy` and the index is left as it was.

The answers are parts the keeper builds, handed the keeper as their
:class:`~kiwifs.index.policy.KeeperPolicy`: the memory answers (``keeper.answers``,
:mod:`kiwifs.index.answers`) and search, ``/meta`` and the vector searches (``keeper.lookups``,
:mod:`kiwifs.index.lookups`), each reading the index through :meth:`IndexKeeper.guarded`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kiwifs.base import pagecache
from kiwifs.base.limits import MAX_READ_BYTES
from kiwifs.config import VectorConfig
from kiwifs.errors import Busy, Locked
from kiwifs.index import rebuildlock
from kiwifs.index.answers import IndexAnswers
from kiwifs.index.connections import (
    BUSY_TIMEOUT,
    INDEX_FILE,
    STATE_DIR,
    IndexUnavailable,
    is_busy,
    is_damage,
)
from kiwifs.index.core import Index, Progress, ReconcileStats
from kiwifs.index.linkparse import DEFAULT_TYPED_FIELDS
from kiwifs.index.lookups import IndexLookups
from kiwifs.index.memory import checkcache
from kiwifs.index.vectorschema import disable as disable_vectors
from kiwifs.index.watcher import DEFAULT_PERIOD, Watcher
from kiwifs.tuning import Tuning

# The vector side, the timeline and the writeback queue are imported where they are made: the
# memory report from the CLI needs none of them (see the answers' modules for theirs).
if TYPE_CHECKING:
    import tempfile

    from kiwifs.index.memory.timeline import Timeline, TimelineKeeper
    from kiwifs.index.vectors.side import Recall
    from kiwifs.index.vectors.store import EmbedRound
    from kiwifs.index.writeback import Writeback

log = logging.getLogger(__name__)
T = TypeVar("T")

# Rows of files over the size limit: unreadable rows with a warning (the partial index
# ``files_warn`` holds only rows with warnings, a few hundred on a 100,000-file root).
TOO_LARGE_COUNT = (
    "SELECT count(*) FROM files WHERE warnings IS NOT NULL AND unreadable = 1 AND size > ?"
)


@dataclass(frozen=True)
class IndexRefresh:
    """What ``kiwifs reindex`` did: rebuilt the index from the files (``rebuilt``), or, beside a
    server that keeps the index current, checked it against the files in place (a reconcile
    that never drops a table under the server), re-reading ``updated`` files and removing
    ``removed`` rows. ``files``: the knowledge files the index now holds."""

    files: int
    rebuilt: bool
    updated: int = 0
    removed: int = 0


class IndexKeeper:
    """The index of one root and the rules for keeping it right."""

    def __init__(
        self,
        root: Path,
        vector: VectorConfig | None = None,
        busy_timeout: float = BUSY_TIMEOUT,
        tuning: Tuning | None = None,
    ) -> None:
        self.root = Path(root)
        self.busy_timeout = busy_timeout
        self.tuning = tuning or Tuning()
        self.vector = vector or VectorConfig()
        # ``[links] typed_fields``, set by the wiring from the config, handed to the Index
        self.link_fields: tuple[str, ...] = DEFAULT_TYPED_FIELDS
        self._recall: Recall | None = None
        self._index: Index | None = None
        self._in_root = True
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self._watcher: Watcher | None = None
        self._watch_lock: int | None = None  # the shared rebuild lock a watcher holds
        self._writeback: Writeback | None = None  # while watching: writes indexed in batches
        self._lock = threading.RLock()
        self._timeline: Timeline | None = None
        self._timeline_keeper: TimelineKeeper | None = None
        self._checker: checkcache.CheckKeeper | None = None
        self._check_worker: checkcache.CheckWorker | None = None
        self.answers = IndexAnswers(self)
        self.lookups = IndexLookups(self)

    # -- opening ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _busy_is_an_error(self) -> Iterator[None]:
        """Report a database another connection keeps locked as :class:`Busy`."""
        try:
            yield
        except sqlite3.Error as exc:
            if not is_busy(exc):
                raise
            raise Busy(
                f"the index is busy: another connection held a lock on {STATE_DIR}/{INDEX_FILE}"
                f" for more than {self.busy_timeout:g} s; try again"
            ) from exc

    def _settle(self) -> None:
        """Every write that returned is in the rows from here on: whoever reads the index
        (answers, the vector side, the timeline) opens it through this."""
        writeback = self._writeback
        if writeback is not None:
            writeback.settle()

    def _open(self) -> Index:
        self._settle()
        with self._lock, self._busy_is_an_error():
            if self._index is None:
                try:
                    self._index = Index(self.root, None, self.busy_timeout, self.tuning)
                    self._in_root = True
                except IndexUnavailable as exc:
                    log.info("index unavailable in the root (%s); using a temporary one", exc)
                    import tempfile

                    self._temp = tempfile.TemporaryDirectory(prefix="kiwifs-index-")
                    temp = Path(self._temp.name) / INDEX_FILE
                    self._index = Index(self.root, temp, self.busy_timeout, self.tuning)
                    self._in_root = False
                self._index.link_fields = self.link_fields
                if not self.vector.enabled:
                    disable_vectors(self._index)
            return self._index

    def too_large_count(self) -> int:
        """Files over the size limit, which the index holds as skipped (``/health`` counts
        them). From the rows as they stand: a probe never waits for a reconcile, nor opens the
        index; 0 while it is not open or cannot be read."""
        index = self._index
        if index is None:
            return 0
        try:
            with index.reader() as conn:
                found: int = conn.execute(TOO_LARGE_COUNT, (MAX_READ_BYTES,)).fetchone()[0]
        except sqlite3.Error:
            return 0
        return found

    def in_root(self) -> bool:
        """True when the index lives in the root (False: read-only root, temporary index)."""
        self._open()
        return self._in_root

    def close(self) -> None:
        self.stop_watching()
        self.stop_timeline()
        self.stop_checking()
        with self._lock:
            if self._timeline is not None:
                self._timeline.close()
                self._timeline = None
            self._recall = None
            if self._index is not None:
                self._index.close()
                self._index = None
            if self._temp is not None:
                self._temp.cleanup()
                self._temp = None

    # -- keeping it current -----------------------------------------------------------------

    def on_written(self, paths: list[str]) -> None:
        """The write pipeline's hook: refresh the written paths if the index is open (while a
        watcher runs, queued for the next batch: see :mod:`kiwifs.index.writeback`)."""
        index = self._index
        if index is None:
            return  # not opened yet: the reconcile before the next answer catches up
        writeback = self._writeback
        if writeback is not None and writeback.add(paths):
            return
        self._refresh_written(index, paths)

    def _refresh_written(self, index: Index, paths: list[str]) -> None:
        try:
            index.refresh(paths)
        except sqlite3.Error:
            log.exception("index update after a write failed; the next reconcile repairs it")
        recall = self._recall
        if recall is not None:
            recall.wake()
        self._rows_moved()

    def refresh_shared(self, paths: list[str]) -> None:
        """Bring these paths' rows up to date now in an index file this process has not opened
        (another process, a server, may be answering from it). When this process has it open,
        the write pipeline's hook has done it already."""
        if self._index is not None or not (self.root / STATE_DIR / INDEX_FILE).is_file():
            return
        try:
            index = self._open()
        except (IndexUnavailable, sqlite3.Error):
            return
        try:
            index.refresh(paths)
        except sqlite3.Error:
            log.exception("index update after a write failed; the next reconcile repairs it")

    def _rows_moved(self) -> None:
        """Wake the loops whose work is derived from the file rows (the background check); each
        looks whether the rows really changed before doing anything."""
        checker = self._checker
        if checker is not None and checker.running:
            checker.wake()

    def _then_rows_moved(self, action: Callable[..., T]) -> Callable[..., T]:
        def run(*args: object) -> T:
            try:
                return action(*args)
            finally:
                self._rows_moved()

        return run

    def guarded(self, action: Callable[[Index], T]) -> T:
        """Run ``action`` on a current index; on corruption reset, refill and retry once.

        Current means: a live watcher keeps it so (while its first reconcile runs, a server's
        start-up, ``action`` waits for it rather than walking the root a second time), or a
        reconcile runs first (overlapping with ``action`` when the walk runs in worker
        processes, see :meth:`Index.reconcile_then`).
        """
        index = self._open()

        def current() -> T:
            watcher = self._watcher
            if watcher is not None and watcher.wait_ready():
                return action(index)
            return index.reconcile_then(lambda: action(index))

        def refilled() -> T:
            index.reconcile()
            return action(index)

        return self._repairing(index, current, refilled)

    def _repairing(self, index: Index, attempt: Callable[[], T], again: Callable[[], T]) -> T:
        """``attempt()``; on real damage reset the index and run ``again()`` once.

        A busy database becomes :class:`Busy` and is left alone.
        """
        with self._busy_is_an_error():
            try:
                return attempt()
            except sqlite3.DatabaseError as exc:
                if not is_damage(exc):
                    raise
                log.warning("index database unusable; rebuilding it from the files", exc_info=True)
                index.reset()
                return again()

    def reconcile(self) -> ReconcileStats:
        index = self._open()
        return self._repairing(index, index.reconcile, index.reconcile)

    def reindex(self, progress: Progress | None = None) -> int:
        """Rebuild the text index; :class:`~kiwifs.errors.Locked` beside a server that keeps
        it (see :mod:`~kiwifs.index.rebuildlock`)."""
        index = self._open()

        def rebuild() -> int:
            return index.rebuild(progress)

        with self._rebuilding():
            return self._repairing(index, rebuild, rebuild)

    def reindex_or_reconcile(self, progress: Progress | None = None) -> IndexRefresh:
        """:meth:`reindex`, or beside a server that keeps the index current (which a rebuild
        from this process would drop the tables under), a full reconcile instead: the index
        comes out equal to the files either way, and the server's view is never broken."""
        index = self._open()

        def rebuild() -> int:
            return index.rebuild(progress)

        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._rebuilding())
            except Locked:
                stats = self.reconcile()
                return IndexRefresh(stats.files, False, stats.updated, stats.removed)
            return IndexRefresh(self._repairing(index, rebuild, rebuild), True)
        raise AssertionError("unreachable")  # pragma: no cover - the block always returns

    def reindex_vectors(self, progress: Progress | None = None) -> EmbedRound:
        """Embed every page again from scratch (after the text index is current); refused
        beside a server, as :meth:`reindex` is."""
        self._open()
        with self._rebuilding():
            self.reconcile()
            return self.recall().store.rebuild(progress)

    def _rebuilding(self) -> contextlib.AbstractContextManager[None]:
        """The rebuild lock for a rebuild from this process: none needed when this process
        watches (its watcher and the rebuild share the index object and its lock) or indexes
        into a temporary folder of its own."""
        if self._watcher is not None or not self._in_root:
            return contextlib.nullcontext()
        return rebuildlock.exclusive(self.root)

    def start_watching(
        self, period: float = DEFAULT_PERIOD, warm_prefix: str | None = None
    ) -> None:
        """Keep the index current from a watcher. Once its first reconcile is done, and before
        it reports ready, the answers a server's first requests need are loaded: search's
        document lengths and, for ``warm_prefix``, the memory report's totals (at a million
        files, 1.7 s and 0.5 s that the first search and the first report paid)."""
        with self._lock:
            if self._watcher is not None:
                return
            index = self._open()
            pagecache.read_ahead(index.path, self.tuning.read_ahead)  # beside the warm-up
            if self._in_root:  # waits while another process rebuilds the index
                self._watch_lock = rebuildlock.hold_shared(self.root)
            recall = self.recall() if self.vector.enabled else None
            refresh = index.refresh_if_changed
            # on a large root the change monitor narrows each reconcile to the folders it saw
            # change (the first one, before ready, included): see Index.reconcile
            reconcile: Callable[[], ReconcileStats] = self._keeping_columns(
                index, functools.partial(index.reconcile, monitored=True)
            )
            if recall is not None:
                refresh, reconcile = recall.waking(refresh), recall.waking(reconcile)
                recall.start_worker()
            refresh, reconcile = self._then_rows_moved(refresh), self._then_rows_moved(reconcile)
            on_events: Callable[[Iterable[str]], object] = refresh
            from kiwifs.index import writeback as batches  # servers only: commands never watch

            if self.tuning.index_writeback:  # else each write indexed inside it, under its lock
                written = functools.partial(self._refresh_written, index)
                writeback = batches.Writeback(written, self.tuning.writeback_window)
                self._writeback = writeback
                on_events = _leaving_out(writeback, refresh)
            warm = functools.partial(self._warm, index, warm_prefix)
            self._watcher = Watcher(self.root, on_events, reconcile, period, self.tuning, warm)
            self._watcher.start()

    def _keeping_columns(
        self, index: Index, reconcile: Callable[[], ReconcileStats]
    ) -> Callable[[], ReconcileStats]:
        """``reconcile``, then, once the server is ready, the term columns kept in the index
        again when the kept ones fell behind the text log (:meth:`Index.keep_columns`)."""

        def run() -> ReconcileStats:
            stats = reconcile()
            if self.watching:  # not the first reconcile: a start catches them up itself
                try:
                    index.keep_columns()
                except sqlite3.Error:  # kept again after the next reconcile
                    log.exception("keeping the term columns in the index failed")
            return stats

        return run

    def _warm(self, index: Index, prefix: str | None) -> None:
        if prefix is not None:  # first: it may make the report log, a change of the schema
            self.answers.warm(index, prefix)
        index.warm_search()

    def stop_watching(self) -> None:
        with self._lock:
            watcher, self._watcher = self._watcher, None
            writeback, self._writeback = self._writeback, None
        if writeback is not None:
            writeback.close()  # what is queued is indexed first
        if watcher is not None:
            watcher.stop()
        with self._lock:
            lock, self._watch_lock = self._watch_lock, None
        rebuildlock.release(lock)
        recall = self._recall
        if recall is not None:
            recall.stop_worker()

    @property
    def watching(self) -> bool:
        return self._watcher is not None and self._watcher.ready.is_set()

    # -- when the index answers ---------------------------------------------------------------

    def answers_reports(self) -> bool:
        """True when the report should come from the index: it exists and lives in the root."""
        if self._index is None and not (self.root / STATE_DIR / INDEX_FILE).is_file():
            return False
        return self.in_root()

    # -- the vector side ----------------------------------------------------------------------

    def recall(self) -> Recall:
        """The vector side (embedder, store, worker), built on first use.

        Raises :class:`~kiwifs.errors.Unavailable` when vectors are not enabled, and
        :class:`~kiwifs.errors.ConfigError` when the embedder cannot be built (a missing model).
        """
        self._settle()
        with self._lock:
            if self._recall is None:
                from kiwifs.index.vectors.side import Recall

                self._recall = Recall.open(self.root, self._open(), self.vector)
            return self._recall

    # -- the history timeline -----------------------------------------------------------------

    @property
    def timeline(self) -> Timeline:
        from kiwifs.index.memory.timeline import Timeline

        with self._lock:
            if self._timeline is None:
                self._timeline = Timeline(self.root, self._open, self.tuning)
            return self._timeline

    def refresh_timeline(self, prefix: str) -> int:
        """Replay the commits the timeline does not hold yet (now, in this thread)."""
        return self.timeline.refresh(prefix)

    def start_timeline(self, prefix: Callable[[], str], period: float = DEFAULT_PERIOD) -> None:
        """Keep the timeline current on a background thread (see :class:`TimelineKeeper`)."""
        from kiwifs.index.memory.timeline import TimelineKeeper

        with self._lock:
            if self._timeline_keeper is None:
                self._timeline_keeper = TimelineKeeper(
                    self.timeline, prefix, period, self._watcher_ready
                )
                self._timeline_keeper.settle = self.tuning.check_settle
                self._timeline_keeper.start()

    def stop_timeline(self) -> None:
        with self._lock:
            keeper, self._timeline_keeper = self._timeline_keeper, None
        if keeper is not None:
            keeper.stop()

    @property
    def timeline_keeper(self) -> TimelineKeeper | None:
        return self._timeline_keeper

    # -- the background memory check ---------------------------------------------------------

    def checker(
        self, compute: checkcache.Compute, announce: Callable[[], None]
    ) -> checkcache.CheckKeeper:
        """The root's check keeper (made on first use; its thread runs after
        :meth:`start_checking`, else :meth:`refresh_check` runs it in the caller's thread)."""
        with self._lock:
            if self._checker is None:
                self._checker = checkcache.CheckKeeper(
                    self._open, compute, announce, self._watcher_ready
                )
            return self._checker

    def start_checking(self, quiet: float = checkcache.QUIET_SECONDS) -> None:
        """Run the check keeper's loop (see
        :class:`~kiwifs.index.memory.checkcache.CheckKeeper`)."""
        with self._lock:
            if self._checker is not None:
                if self._check_worker is None:
                    self._check_worker = checkcache.CheckWorker(self.tuning.workers)
                self._checker.quiet = quiet
                self._checker.settle = self.tuning.check_settle
                self._checker.start()

    def stop_checking(self) -> None:
        checker = self._checker
        if checker is not None:
            checker.stop()
        with self._lock:
            worker, self._check_worker = self._check_worker, None
        if worker is not None:
            worker.close()

    def _watcher_ready(self) -> bool:
        """True unless a watcher was started and none of its reconciles has succeeded yet."""
        watcher = self._watcher
        return watcher is None or watcher.ready.is_set()

    @property
    def check_keeper(self) -> checkcache.CheckKeeper | None:
        return self._checker

    @property
    def check_worker(self) -> checkcache.CheckWorker | None:
        return self._check_worker

    def refresh_check(self) -> None:
        """Run the check now if the rows changed since it last ran, unless the background loop
        keeps it (then a request never waits for it)."""
        checker = self._checker
        if checker is None or checker.running:
            return
        checker.run_once()


def _leaving_out(
    writeback: Writeback, refresh: Callable[[Iterable[str]], T]
) -> Callable[[Iterable[str]], T]:
    """The watcher's refresh without the paths ``writeback`` has queued: its next round reads
    them, after the events that named them."""

    def run(paths: Iterable[str]) -> T:
        return refresh(writeback.unqueued(paths))

    return run
