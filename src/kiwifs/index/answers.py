"""The memory answers the index gives: the report, lineage, the queue, the dashboard's overview,
``memory check``'s rows and stored problems, the claims' candidates and task files.

:class:`IndexAnswers` is a part the keeper builds (``keeper.answers``), handed the keeper as a
:class:`~kiwifs.index.policy.KeeperPolicy`: each answer reads the index through
:meth:`~kiwifs.index.policy.KeeperPolicy.guarded` (current, repaired once on damage), and the
policy names everything else it reads of the keeper (the watcher's state, the check's and the
timeline's loops). A part rather than a mixin, so what an answer may touch of the keeper is
written once, typed, and visible here; this module holds only what every answer asks and how.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from kiwifs.base.printed_json import Printed
from kiwifs.base.printed_json import dumps as printed_json
from kiwifs.index import report as indexed_report
from kiwifs.index.memory import checkcache, printed
from kiwifs.index.schema import printed_schema
from kiwifs.index.search.storedcolumns import keeping_stamp
from kiwifs.memory.rules import (
    Claims,
    EpisodicFile,
    MemoryReport,
    ReportDocument,
    ReportText,
    build_report,
)

T = TypeVar("T")
Printable = tuple[bytes, bytes, int] | None  # a report as printed: body, aside, unmerged count

# The modules of these answers (lineage, the dashboard, the timeline, the check, the tasks) are
# imported by the methods that give them: the memory report from the CLI needs none of them.
if TYPE_CHECKING:
    from kiwifs.index.core import Index
    from kiwifs.index.memory import tasks as indexed_tasks
    from kiwifs.index.memory.overview import Coverage
    from kiwifs.index.policy import KeeperPolicy
    from kiwifs.memory.check import EpisodeRow, PageRow
    from kiwifs.memory.lineage import Lineage
    from kiwifs.memory.overview import Overview, QueuePage
    from kiwifs.memory.problems import CheckState, Problem
    from kiwifs.memory.queue import MergeFindings
    from kiwifs.memory.rules import MergeEntry


# what kept totals were counted at: the index object and generation, and the report log's
# position in that snapshot (None: a scoped report, or no log)
TotalsMark = tuple[int, int, indexed_report.LogPosition | None]


def _kept_totals(
    conn: sqlite3.Connection,
    cached: tuple[TotalsMark, indexed_report.Totals] | None,
    now: tuple[int, int],
    prefix: str,
) -> indexed_report.Totals | None:
    """The kept totals as of ``conn``'s snapshot (inside it): rolled forward over the report
    log from the position they were kept at (:func:`indexed_report.advanced`: as kept when
    nothing was logged since), else, with no log, as kept while the index generation did not
    move; ``None``: count them.

    The log decides when there is one: the generation is read before the snapshot is taken, so
    a write committed in between is in the snapshot before the generation moves. Trusted then,
    the generation let totals from before such a write be kept at the position after it, and
    every later roll found nothing to roll (an out-of-band delete missing from the report for
    good; seen once in ~15 runs of tests/index/test_index.py's watcher test)."""
    if cached is None:
        return None
    (index_id, generation, position), totals = cached
    if index_id != now[0]:
        return None
    if position is not None:
        return indexed_report.advanced(conn, totals, position, prefix)
    return totals if generation == now[1] else None


def _with_report_log(index: Index) -> None:
    """Make the report log and its triggers in an index made before them (a server's warm-up,
    before its first search: the schema change would have it read the term columns again)."""
    with index.reader() as conn:
        if indexed_report.log_position(conn) is not None:
            return
    try:
        with index.transaction() as writer, keeping_stamp(writer):
            for statement in printed_schema(writer):
                writer.execute(statement)
    except sqlite3.OperationalError:  # busy, or read-only: totals are counted after writes
        return


class IndexAnswers:
    """The memory answers of the index, asked through the keeper's policy, and the caches they
    keep while a watcher keeps the index current (valid while the index generation is
    unchanged)."""

    def __init__(self, keeper: KeeperPolicy) -> None:
        self._keeper = keeper
        # report totals per prefix and path prefix (watching): valid while the index generation
        # is unchanged, and rolled forward over the report log (the whole root's) when not
        self._totals: dict[tuple[str, str | None], tuple[TotalsMark, indexed_report.Totals]] = {}
        self._overviews: dict[str, tuple[tuple[int, int], Overview]] = {}
        # the dashboard's folder counts per prefix (and the index they were read from): rolled
        # forward over the report log by the next overview, not counted again
        self._coverage: dict[str, tuple[int, Coverage]] = {}

    # -- the answers ------------------------------------------------------------------------

    def memory_report(
        self,
        prefix: str,
        limit: int | None,
        offset: int,
        claims: Claims | None = None,
        path_prefix: str | None = None,
        unmerged_only: bool = False,
    ) -> MemoryReport | None:
        """The report from the index, or ``None`` when the scan is the better answer;
        ``unmerged_only``: ``episodic_files`` left empty (see :func:`indexed_report.report`).

        That is when the root cannot hold an index, and when no index exists yet: building one
        reads and indexes every file's full text (tens of seconds at 100k files), while the scan
        reads only frontmatter. A one-shot ``kiwifs memory report`` on a fresh root therefore
        scans; ``kiwifs reindex``, ``serve``, ``mcp``, search and meta build the index.
        """
        if not self._keeper.answers_reports():
            return None

        def run(index: Index) -> MemoryReport:
            generation = index.generation
            asked = (prefix, path_prefix or None)
            with index.reader() as conn, indexed_report.snapshot(conn):
                mark, totals = self._kept_at(index, generation, conn, asked)
                result, totals = indexed_report.report(
                    conn, prefix, limit, offset, totals, claims, path_prefix, unmerged_only
                )
            self._totals[asked] = (mark, totals)
            return result

        return self._keeper.guarded(run)

    def _kept_at(
        self,
        index: Index,
        generation: int,
        conn: sqlite3.Connection,
        asked: tuple[str, str | None],
    ) -> tuple[TotalsMark, indexed_report.Totals | None]:
        """The mark of ``conn``'s snapshot (inside it; ``generation`` read before it) and the
        totals kept for ``asked`` (prefix, path prefix) as of it, ``None`` when they must be
        counted (see :func:`_kept_totals`). A report under a path prefix is not rolled."""
        prefix, path_prefix = asked
        cached = self._totals.get(asked) if self._keeper.watching else None
        position = indexed_report.log_position(conn) if not path_prefix else None
        totals = _kept_totals(conn, cached, (id(index), generation), prefix)
        return (id(index), generation, position), totals

    def warm(self, index: Index, prefix: str) -> None:
        """Count the report's totals for ``prefix`` now and keep them, as :meth:`memory_report`
        keeps them (a server before it reports ready: its first report then pages only); the
        report log they are rolled forward over is made first if the index lacks it."""
        _with_report_log(index)
        generation = index.generation
        with index.reader() as conn, indexed_report.snapshot(conn):
            position = indexed_report.log_position(conn)
            _, totals = indexed_report.report(conn, prefix, 0, 0)
        self._totals[(prefix, None)] = ((id(index), generation, position), totals)

    def memory_report_document(
        self,
        prefix: str,
        limit: int | None,
        offset: int,
        claims: Claims | None = None,
        path_prefix: str | None = None,
    ) -> ReportDocument | None:
        """:meth:`memory_report` as a printable document (``None``: use the scan). The whole
        report is kept as printed until a file row changes (:mod:`index.memory.printed`)."""

        def make(conn: sqlite3.Connection, index: Index, keep: bool) -> tuple[Any, Printable]:
            value, unmerged = indexed_report.report_document(
                conn, prefix, limit, offset, claims, index.tuning.report_in_sql, path_prefix
            )
            body = _printed_json(value) if keep else None
            return ReportDocument(value, unmerged), (body, b"", unmerged) if body else None

        def read(kept: tuple[bytes, bytes, int]) -> ReportDocument:
            return ReportDocument(Printed(kept[0]), kept[2])  # printed once, not twice

        whole = _whole(limit, offset, claims, path_prefix)
        return self._printed(prefix, printed.JSON, whole, make, read)

    def keeps_reports(self) -> bool:
        """Whether the whole report is kept once printed: the index answers reports and no
        watcher keeps it (a server makes its pages; only one-shot commands print it whole)."""
        return self._keeper.answers_reports() and not self._keeper.watching

    def memory_report_text(
        self,
        prefix: str,
        limit: int | None,
        offset: int,
        claims: Claims | None = None,
        path_prefix: str | None = None,
    ) -> ReportText | None:
        """The report as the CLI prints it (its warnings apart), or ``None``: use the scan.
        The whole report's text is kept until a file row changes, like its JSON."""

        def make(conn: sqlite3.Connection, index: Index, keep: bool) -> tuple[Any, Printable]:
            from kiwifs.memory.render import report_text  # the text form's rendering

            report, _ = indexed_report.report(
                conn, prefix, limit, offset, None, claims, path_prefix, unmerged_only=True
            )
            text = report_text(report)
            if not keep:
                return text, None
            try:  # a name that is not UTF-8 cannot be kept
                return text, (text.text.encode(), text.warnings.encode(), text.unmerged_count)
            except UnicodeEncodeError:
                return text, None

        def read(kept: tuple[bytes, bytes, int]) -> ReportText:
            return ReportText(kept[0].decode("utf-8"), kept[1].decode("utf-8"), kept[2])

        whole = _whole(limit, offset, claims, path_prefix)
        return self._printed(prefix, printed.TEXT, whole, make, read)

    def _printed(
        self,
        prefix: str,
        form: str,
        whole: bool,
        make: Callable[[sqlite3.Connection, Index, bool], tuple[Any, Printable]],
        read: Callable[[tuple[bytes, bytes, int]], T],
    ) -> T | None:
        """A report in ``form``: the kept one (``read`` from its bytes) when ``whole`` and one is
        kept, else ``make``-d from the rows (told whether it may be kept) and kept when it
        was printed (``make``'s second part). ``None``: the scan is the better answer."""
        if not self._keeper.answers_reports():
            return None

        def run(index: Index) -> T:
            keep = whole and index.tuning.kept_reports
            with index.reader() as conn:
                kept = printed.read(conn, prefix, form) if keep else None
                if kept is not None:
                    return read(kept)
                seen = printed.version(conn)
                answer, body = make(conn, index, keep)
                if (
                    keep
                    and body is not None
                    and printed.keep(index, conn, seen, prefix, form, body)
                ):
                    return read(body)
            return cast(T, answer)

        return self._keeper.guarded(run)

    def episode_paths(self, episode_id: str, prefix: str) -> list[str]:
        """Where an episode with this id already lives (an index lookup, not a report).

        Current like every answer: reconciled first unless the watcher keeps the index so.
        """

        def run(index: Index) -> list[str]:
            with index.reader() as conn:
                return indexed_report.episode_paths(conn, episode_id, prefix)

        return self._keeper.guarded(run)

    def merge_findings(
        self, page: str, entries: Sequence[MergeEntry], prefix: str
    ) -> MergeFindings:
        """The episodes a merge into ``page`` cites that other pages already merged, and its
        entries that cite nothing (the merge's guard asks, under the write lock)."""
        from kiwifs.index.memory import lineage as indexed_lineage

        def run(index: Index) -> MergeFindings:
            with index.reader() as conn:
                return indexed_lineage.merge_findings(conn, page, entries, prefix)

        return self._keeper.guarded(run)

    def stored_facts_report(self, prefix: str) -> MemoryReport:
        """``build_report`` over the facts the index stores (the slow path, for proofs)."""

        def run(index: Index) -> MemoryReport:
            with index.reader() as conn:
                from_index = list(indexed_report.stored_facts(conn))
            return build_report(from_index, prefix)

        return self._keeper.guarded(run)

    def lineage(self, rel: str, prefix: str) -> Lineage:
        from kiwifs.index.memory import lineage as indexed_lineage

        def run(index: Index) -> Lineage:
            with index.reader() as conn:
                return indexed_lineage.lineage(conn, rel, prefix)

        return self._keeper.guarded(run)

    def queue(self, prefix: str, path_prefix: str, limit: int, offset: int) -> QueuePage:
        from kiwifs.index.memory import overview as indexed_overview

        def run(index: Index) -> QueuePage:
            if path_prefix:
                with index.reader() as conn:
                    return indexed_overview.queue_page(conn, prefix, path_prefix, limit, offset)
            # the whole queue: its length is the report's unmerged count, kept and rolled
            # forward (counting it read every unmerged row: 0.4 s at a million episodes)
            generation = index.generation
            with index.reader() as conn, indexed_report.snapshot(conn):
                mark, totals = self._kept_at(index, generation, conn, (prefix, None))
                total = None if totals is None else totals.unmerged_count
                page = indexed_overview.queue_page(conn, prefix, "", limit, offset, total)
            if totals is not None:
                self._totals[(prefix, None)] = (mark, totals)
            return page

        return self._keeper.guarded(run)

    def check_problems(self, prefix: str) -> list[Problem] | None:
        """The problems of ``memory check`` from the index, in the check's worker process while
        the background loop runs; ``None`` when the scan is the better answer (the same policy
        as :meth:`memory_report`)."""
        if not self._keeper.answers_reports():
            return None
        from kiwifs.index.memory import check as indexed_check
        from kiwifs.memory.problems import problems_in

        worker = self._keeper.check_worker

        def run(index: Index) -> list[Problem]:
            if worker is not None:
                found = worker.problems(str(index.path), prefix)
                if found is not None:
                    return found
            with index.reader() as conn:
                return problems_in(prefix, *indexed_check.check_rows(conn, prefix))

        return self._keeper.guarded(run)

    def check_state(self, prefix: str) -> CheckState:
        """The stored check for ``prefix``, or :data:`NOT_YET` while none is stored."""
        from kiwifs.memory.problems import NOT_YET

        checker = self._keeper.check_keeper

        def run(index: Index) -> CheckState:
            # without the loop the check ran in this very call (refresh_check): current
            current = checker is not None and (checker.current or not checker.running)
            with index.reader() as conn:
                found = checkcache.read_state(conn, prefix, current)
            return NOT_YET if found is None else found

        return self._keeper.guarded(run)

    def overview(self, prefix: str, head: str | None, now: float) -> Overview:
        """The dashboard's facts; cached per index generation while a watcher keeps it current
        (every write and every replayed commit moves the generation)."""

        def run(index: Index) -> Overview:
            stamp = (id(index), index.generation)
            cached = self._overviews.get(prefix) if self._keeper.watching else None
            if cached is not None and cached[0] == stamp:
                found = cached[1]
            else:
                found = self._compute_overview(index, prefix, now)
                self._overviews[prefix] = (stamp, found)
            current = head is None or found.extra.get("timeline_head") == head
            timeline = self._keeper.timeline_keeper
            if not current and timeline is not None:
                timeline.wake()
            return replace(found, timeline_current=current, computed_at=now)

        return self._keeper.guarded(run)

    def _compute_overview(self, index: Index, prefix: str, now: float) -> Overview:
        from kiwifs.index.memory import overview as indexed_overview
        from kiwifs.index.memory import timeline as indexed_timeline
        from kiwifs.memory.overview import Overview

        kept = self._coverage.get(prefix)
        with index.reader() as conn, indexed_report.snapshot(conn):
            rolled = kept[1] if kept is not None and kept[0] == id(index) else None
            found = indexed_overview.coverage(conn, prefix, rolled)
            oldest = indexed_overview.oldest_unmerged(conn, prefix)
            replayed = indexed_timeline.replayed_prefix(conn) == prefix
            points = indexed_timeline.points(conn) if replayed else []
            last = indexed_timeline.last_commit(conn) if replayed else None
        self._coverage[prefix] = (id(index), found)
        folders = found.folders
        return Overview(
            prefix=prefix,
            episodic=sum(f.episodic for f in folders),
            unmerged=sum(f.unmerged for f in folders),
            superseded=found.superseded,
            folders=folders,
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

        return self._keeper.guarded(run)

    def check_rows(self, prefix: str) -> tuple[list[EpisodeRow], list[PageRow], set[str]] | None:
        """The rows ``memory check`` reads (see :mod:`kiwifs.index.memory.check`); ``None`` when the
        scan is the better answer (the same policy as :meth:`memory_report`)."""
        if not self._keeper.answers_reports():
            return None
        from kiwifs.index.memory import check as indexed_check

        def run(index: Index) -> tuple[list[EpisodeRow], list[PageRow], set[str]]:
            with index.reader() as conn:
                return indexed_check.check_rows(conn, prefix)

        return self._keeper.guarded(run)

    def first_added(self, paths: Sequence[str], head: str | None) -> dict[str, float] | None:
        """When each of ``paths`` was first committed, from the history replayed into the index,
        when it is replayed up to ``head``; ``None`` otherwise (git's log is the answer then)."""
        if head is None or not self._keeper.answers_reports():
            return None
        from kiwifs.index.memory import timeline as indexed_timeline

        def run(index: Index) -> dict[str, float] | None:
            with index.reader() as conn, indexed_report.snapshot(conn):
                if indexed_timeline.last_commit(conn) != head:
                    return None
                return indexed_timeline.first_added(conn, paths)

        return self._keeper.guarded(run)

    def todo_files(self, path_prefix: str) -> list[indexed_tasks.TodoFile]:
        """Files whose frontmatter ``status`` is ``todo`` under ``path_prefix``."""
        from kiwifs.index.memory import tasks as indexed_tasks

        def run(index: Index) -> list[indexed_tasks.TodoFile]:
            with index.reader() as conn:
                return indexed_tasks.todo_files(conn, path_prefix)

        return self._keeper.guarded(run)


def _whole(limit: int | None, offset: int, claims: Claims | None, path_prefix: str | None) -> bool:
    """Whether a report is the whole one, which is kept once printed (a page, a path prefix or a
    live claim makes its own)."""
    return limit is None and offset == 0 and not claims and not path_prefix


def _printed_json(value: object) -> bytes | None:
    """``value`` as printed, or ``None`` when it holds a name that is not UTF-8: the strict
    encoding refuses it (orjson's output is UTF-8 or an error), and the caller's rule prints
    such a report, which is not kept."""
    try:
        return printed_json(value)
    except (UnicodeError, ValueError):
        return None
