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
  statement waits for the other connection's lock (:data:`~kiwifs.index.db.BUSY_TIMEOUT`), then
  the call fails with :class:`~kiwifs.errors.Busy` and the index is left as it was.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kiwifs.config import VectorConfig
from kiwifs.errors import Busy
from kiwifs.memory.rules import Claims, EpisodicFile, MemoryReport, ReportDocument, build_report

from . import checkcache
from . import report as indexed_report
from .db import (
    BUSY_TIMEOUT,
    INDEX_FILE,
    STATE_DIR,
    Index,
    IndexUnavailable,
    Progress,
    ReconcileStats,
    is_busy,
    is_damage,
)
from .vectorschema import disable as disable_vectors
from .watcher import DEFAULT_PERIOD, Watcher

# The modules of the other answers (search, /meta, lineage, the dashboard, the timeline, the
# check) are imported by the methods that give them: a one-shot command needs one of them, and
# the memory report from the CLI none (their imports were a fifth of its start-up).
if TYPE_CHECKING:
    import tempfile

    from kiwifs.memory.check import EpisodeRow, PageRow
    from kiwifs.memory.lineage import Lineage
    from kiwifs.memory.overview import Overview, QueuePage
    from kiwifs.memory.problems import CheckState, Problem

    from . import tasks as indexed_tasks
    from .filters import RecallFilter
    from .hybrid import HybridResults
    from .meta import Filter, MetaResults
    from .recall import Recall
    from .search import SearchResults
    from .semantic import SemanticResults
    from .termcolumns import TermColumns
    from .timeline import Timeline, TimelineKeeper
    from .vectors import EmbedRound, VectorStatus
    from .writeback import Writeback

log = logging.getLogger(__name__)
T = TypeVar("T")


class IndexKeeper:
    """The index of one root and the rules for keeping it right."""

    def __init__(
        self, root: Path, vector: VectorConfig | None = None, busy_timeout: float = BUSY_TIMEOUT
    ) -> None:
        self.root = Path(root)
        self.busy_timeout = busy_timeout
        self.vector = vector or VectorConfig()
        self._recall: Recall | None = None
        self._index: Index | None = None
        self._in_root = True
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self._watcher: Watcher | None = None
        self._writeback: Writeback | None = None  # while watching: writes indexed in batches
        self._lock = threading.RLock()
        # report totals per prefix, valid while the index generation is unchanged (watching)
        self._totals: dict[str, tuple[tuple[int, int], indexed_report.Totals]] = {}
        self._overviews: dict[str, tuple[tuple[int, int], Overview]] = {}
        self._timeline: Timeline | None = None
        self._timeline_keeper: TimelineKeeper | None = None
        self._checker: checkcache.CheckKeeper | None = None
        self._check_worker: checkcache.CheckWorker | None = None

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
                    self._index = Index(self.root, busy_timeout=self.busy_timeout)
                    self._in_root = True
                except IndexUnavailable as exc:
                    log.info("index unavailable in the root (%s); using a temporary one", exc)
                    import tempfile

                    self._temp = tempfile.TemporaryDirectory(prefix="kiwifs-index-")
                    temp = Path(self._temp.name) / INDEX_FILE
                    self._index = Index(self.root, temp, busy_timeout=self.busy_timeout)
                    self._in_root = False
                if not self.vector.enabled:
                    disable_vectors(self._index)
            return self._index

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

    def _guarded(self, action: Callable[[Index], T]) -> T:
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
        index = self._open()

        def rebuild() -> int:
            return index.rebuild(progress)

        return self._repairing(index, rebuild, rebuild)

    def reindex_vectors(self, progress: Progress | None = None) -> EmbedRound:
        """Embed every page again from scratch (after the text index is current)."""
        self.reconcile()
        return self.recall().store.rebuild(progress)

    def start_watching(self, period: float = DEFAULT_PERIOD) -> None:
        with self._lock:
            if self._watcher is not None:
                return
            index = self._open()
            recall = self.recall() if self.vector.enabled else None
            refresh, reconcile = index.refresh_if_changed, index.reconcile
            if recall is not None:
                refresh, reconcile = recall.waking(refresh), recall.waking(reconcile)
                recall.start_worker()
            refresh, reconcile = self._then_rows_moved(refresh), self._then_rows_moved(reconcile)
            on_events: Callable[[Iterable[str]], object] = refresh
            from . import writeback as batches  # servers only: one-shot commands never watch

            if batches.enabled():
                writeback = batches.Writeback(functools.partial(self._refresh_written, index))
                self._writeback = writeback
                on_events = _leaving_out(writeback, refresh)
            self._watcher = Watcher(self.root, on_events, reconcile, period)
            self._watcher.start()

    def stop_watching(self) -> None:
        with self._lock:
            watcher, self._watcher = self._watcher, None
            writeback, self._writeback = self._writeback, None
        if writeback is not None:
            writeback.close()  # what is queued is indexed first
        if watcher is not None:
            watcher.stop()
        recall = self._recall
        if recall is not None:
            recall.stop_worker()

    @property
    def watching(self) -> bool:
        return self._watcher is not None and self._watcher.ready.is_set()

    # -- answers ----------------------------------------------------------------------------

    def _answers_reports(self) -> bool:
        """True when the report should come from the index: it exists and lives in the root."""
        if self._index is None and not (self.root / STATE_DIR / INDEX_FILE).is_file():
            return False
        return self.in_root()

    def memory_report(
        self, prefix: str, limit: int | None, offset: int, claims: Claims | None = None
    ) -> MemoryReport | None:
        """The report from the index, or ``None`` when the scan is the better answer.

        That is when the root cannot hold an index, and when no index exists yet: building one
        reads and indexes every file's full text (tens of seconds at 100k files), while the scan
        reads only frontmatter. A one-shot ``kiwifs memory report`` on a fresh root therefore
        scans; ``kiwifs reindex``, ``serve``, ``mcp``, search and meta build the index.
        """
        if not self._answers_reports():
            return None

        def run(index: Index) -> MemoryReport:
            generation = index.generation
            cached = self._totals.get(prefix) if self.watching else None
            totals = cached[1] if cached and cached[0] == (id(index), generation) else None
            with index.reader() as conn:
                result, totals = indexed_report.report(conn, prefix, limit, offset, totals, claims)
            self._totals[prefix] = ((id(index), generation), totals)
            return result

        return self._guarded(run)

    def memory_report_document(
        self, prefix: str, limit: int | None, offset: int, claims: Claims | None = None
    ) -> ReportDocument | None:
        """:meth:`memory_report` as a printable document (``None``: use the scan)."""
        if not self._answers_reports():
            return None

        def run(index: Index) -> ReportDocument:
            with index.reader() as conn:
                document = indexed_report.report_document(conn, prefix, limit, offset, claims)
            return ReportDocument(*document)

        return self._guarded(run)

    def search(
        self,
        query: str,
        limit: int,
        offset: int,
        path_prefix: str | None,
        where: RecallFilter | None = None,
        recency_weight: float | None = None,
        snippets: bool = True,
    ) -> SearchResults:
        from . import search

        def run(index: Index) -> SearchResults:
            with index.reader() as conn:
                return search.search(
                    conn,
                    query,
                    limit,
                    offset,
                    path_prefix,
                    where,
                    recency_weight,
                    self._columns(index),
                    snippets,
                )

        return self._guarded(run)

    def meta(
        self,
        where: Sequence[str | Filter],
        or_: Sequence[str],
        sort: str | None,
        order: str,
        limit: int,
        offset: int,
        paths: Sequence[str] | None,
        include_superseded: bool = False,
    ) -> MetaResults:
        from . import meta as meta_query

        def run(index: Index) -> MetaResults:
            with index.reader() as conn:
                return meta_query.query(
                    conn, where, or_, sort, order, limit, offset, paths, include_superseded
                )

        return self._guarded(run)

    def episode_paths(self, episode_id: str, prefix: str) -> list[str]:
        """Where an episode with this id already lives (an index lookup, not a report).

        Current like every answer: reconciled first unless the watcher keeps the index so.
        """

        def run(index: Index) -> list[str]:
            with index.reader() as conn:
                return indexed_report.episode_paths(conn, episode_id, prefix)

        return self._guarded(run)

    # -- semantic and hybrid search ---------------------------------------------------------

    def recall(self) -> Recall:
        """The vector side (embedder, store, worker), built on first use.

        Raises :class:`~kiwifs.errors.Unavailable` when vectors are not enabled, and
        :class:`~kiwifs.errors.ConfigError` when the embedder cannot be built (a missing model).
        """
        self._settle()
        with self._lock:
            if self._recall is None:
                from .recall import Recall

                self._recall = Recall.open(self.root, self._open(), self.vector)
            return self._recall

    def semantic(
        self,
        query: str,
        limit: int | None,
        offset: int,
        threshold: float | None,
        where: RecallFilter,
    ) -> SemanticResults:
        recall = self.recall()
        return self._guarded(
            lambda index: recall.semantic(query, limit, offset, threshold, where, self.watching)
        )

    def _columns(self, index: Index) -> TermColumns | None:
        """The term columns, in a process that keeps running (a server): making a word's column
        costs about one plain query, which a one-shot command would never win back."""
        return index.columns if self.watching else None

    def hybrid(
        self,
        query: str,
        limit: int | None,
        offset: int,
        where: RecallFilter,
        snippets: bool = True,
    ) -> HybridResults:
        from .recall import keyword_only

        if not self.vector.enabled:
            return self._guarded(
                lambda index: keyword_only(
                    index, query, limit, offset, where, snippets, self._columns(index)
                )
            )
        recall = self.recall()
        return self._guarded(
            lambda index: recall.hybrid(query, limit, offset, where, self.watching, snippets)
        )

    def vector_status(self) -> VectorStatus:
        from .vectors import VectorStatus

        if not self.vector.enabled:
            return VectorStatus(enabled=False)
        return self.recall().store.status()

    def stored_facts_report(self, prefix: str) -> MemoryReport:
        """``build_report`` over the facts the index stores (the slow path, for proofs)."""

        def run(index: Index) -> MemoryReport:
            with index.reader() as conn:
                from_index = list(indexed_report.stored_facts(conn))
            return build_report(from_index, prefix)

        return self._guarded(run)

    # -- the consolidation picture ----------------------------------------------------------

    def lineage(self, rel: str, prefix: str) -> Lineage:
        from . import lineage as indexed_lineage

        def run(index: Index) -> Lineage:
            with index.reader() as conn:
                return indexed_lineage.lineage(conn, rel, prefix)

        return self._guarded(run)

    def queue(self, prefix: str, path_prefix: str, limit: int, offset: int) -> QueuePage:
        from . import overview as indexed_overview

        def run(index: Index) -> QueuePage:
            with index.reader() as conn:
                return indexed_overview.queue_page(conn, prefix, path_prefix, limit, offset)

        return self._guarded(run)

    @property
    def timeline(self) -> Timeline:
        from .timeline import Timeline

        with self._lock:
            if self._timeline is None:
                self._timeline = Timeline(self.root, self._open)
            return self._timeline

    def refresh_timeline(self, prefix: str) -> int:
        """Replay the commits the timeline does not hold yet (now, in this thread)."""
        return self.timeline.refresh(prefix)

    def start_timeline(self, prefix: Callable[[], str], period: float = DEFAULT_PERIOD) -> None:
        """Keep the timeline current on a background thread (see :class:`TimelineKeeper`)."""
        from .timeline import TimelineKeeper

        with self._lock:
            if self._timeline_keeper is None:
                self._timeline_keeper = TimelineKeeper(self.timeline, prefix, period)
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
        """Run the check keeper's loop (see :class:`~kiwifs.index.checkcache.CheckKeeper`)."""
        with self._lock:
            if self._checker is not None:
                if self._check_worker is None:
                    self._check_worker = checkcache.CheckWorker()
                self._checker.quiet = quiet
                self._checker.start()

    def stop_checking(self) -> None:
        checker = self._checker
        if checker is not None:
            checker.stop()
        with self._lock:
            worker, self._check_worker = self._check_worker, None
        if worker is not None:
            worker.close()

    def check_problems(self, prefix: str) -> list[Problem] | None:
        """The problems of ``memory check`` from the index, in the check's worker process while
        the background loop runs; ``None`` when the scan is the better answer (the same policy
        as :meth:`memory_report`)."""
        if not self._answers_reports():
            return None
        from kiwifs.memory.problems import problems_in

        from . import check as indexed_check

        worker = self._check_worker

        def run(index: Index) -> list[Problem]:
            if worker is not None:
                found = worker.problems(str(index.path), prefix)
                if found is not None:
                    return found
            with index.reader() as conn:
                return problems_in(prefix, *indexed_check.check_rows(conn, prefix))

        return self._guarded(run)

    def _watcher_ready(self) -> bool:
        """True unless a watcher was started and none of its reconciles has succeeded yet."""
        watcher = self._watcher
        return watcher is None or watcher.ready.is_set()

    @property
    def check_keeper(self) -> checkcache.CheckKeeper | None:
        return self._checker

    def refresh_check(self) -> None:
        """Run the check now if the rows changed since it last ran, unless the background loop
        keeps it (then a request never waits for it)."""
        checker = self._checker
        if checker is None or checker.running:
            return
        checker.run_once()

    def check_state(self, prefix: str) -> CheckState:
        """The stored check for ``prefix``, or :data:`NOT_YET` while none is stored."""
        from kiwifs.memory.problems import NOT_YET

        checker = self._checker

        def run(index: Index) -> CheckState:
            # without the loop the check ran in this very call (refresh_check): current
            current = checker is not None and (checker.current or not checker.running)
            with index.reader() as conn:
                found = checkcache.read_state(conn, prefix, current)
            return NOT_YET if found is None else found

        return self._guarded(run)

    def overview(self, prefix: str, head: str | None, now: float) -> Overview:
        """The dashboard's facts; cached per index generation while a watcher keeps it current
        (every write and every replayed commit moves the generation)."""

        def run(index: Index) -> Overview:
            stamp = (id(index), index.generation)
            cached = self._overviews.get(prefix) if self.watching else None
            if cached is not None and cached[0] == stamp:
                found = cached[1]
            else:
                found = self._compute_overview(index, prefix, now)
                self._overviews[prefix] = (stamp, found)
            current = head is None or found.extra.get("timeline_head") == head
            if not current and self._timeline_keeper is not None:
                self._timeline_keeper.wake()
            return replace(found, timeline_current=current, computed_at=now)

        return self._guarded(run)

    def _compute_overview(self, index: Index, prefix: str, now: float) -> Overview:
        from kiwifs.memory.overview import Overview

        from . import overview as indexed_overview
        from . import timeline as indexed_timeline

        with index.reader() as conn, indexed_report.snapshot(conn):
            folders = indexed_overview.folder_coverage(conn, prefix)
            oldest = indexed_overview.oldest_unmerged(conn, prefix)
            superseded = indexed_overview.superseded_count(conn, prefix)
            replayed = indexed_timeline.replayed_prefix(conn) == prefix
            points = indexed_timeline.points(conn) if replayed else []
            last = indexed_timeline.last_commit(conn) if replayed else None
        return Overview(
            prefix=prefix,
            episodic=sum(f.episodic for f in folders),
            unmerged=sum(f.unmerged for f in folders),
            superseded=superseded,
            folders=tuple(folders),
            oldest=oldest,
            timeline=tuple(points),
            timeline_current=True,
            computed_at=now,
            extra={"timeline_head": last},
        )

    # -- the consolidation queue ------------------------------------------------------------

    def claim_candidates(
        self, paths: Sequence[str], prefix: str, count: int
    ) -> tuple[set[str], list[EpisodicFile]]:
        """Which of ``paths`` are still unmerged episodes, and the first ``count`` unmerged
        episodes in report order, from one current state of the index."""

        def run(index: Index) -> tuple[set[str], list[EpisodicFile]]:
            with index.reader() as conn, indexed_report.snapshot(conn):
                still = indexed_report.unmerged_among(conn, paths, prefix)
                head = indexed_report.unmerged_head(conn, prefix, count) if count > 0 else []
            return still, head

        return self._guarded(run)

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

    def check_rows(self, prefix: str) -> tuple[list[EpisodeRow], list[PageRow], set[str]] | None:
        """The rows ``memory check`` reads (see :mod:`kiwifs.index.check`); ``None`` when the
        scan is the better answer (the same policy as :meth:`memory_report`)."""
        if not self._answers_reports():
            return None
        from . import check as indexed_check

        def run(index: Index) -> tuple[list[EpisodeRow], list[PageRow], set[str]]:
            with index.reader() as conn:
                return indexed_check.check_rows(conn, prefix)

        return self._guarded(run)

    def todo_files(self, path_prefix: str) -> list[indexed_tasks.TodoFile]:
        """Files whose frontmatter ``status`` is ``todo`` under ``path_prefix``."""
        from . import tasks as indexed_tasks

        def run(index: Index) -> list[indexed_tasks.TodoFile]:
            with index.reader() as conn:
                return indexed_tasks.todo_files(conn, path_prefix)

        return self._guarded(run)


def _leaving_out(
    writeback: Writeback, refresh: Callable[[Iterable[str]], T]
) -> Callable[[Iterable[str]], T]:
    """The watcher's refresh without the paths ``writeback`` has queued: its next round reads
    them, after the events that named them."""

    def run(paths: Iterable[str]) -> T:
        return refresh(writeback.unqueued(paths))

    return run
