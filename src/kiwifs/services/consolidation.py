"""The consolidation picture: the memory report, the queue of unmerged episodes and the overview
a dashboard draws.

Each answers from the index (reconciled with the files first, unless a watcher keeps it current)
and falls back on reading every file when the root cannot hold an index. Live claims are laid
over the answer here, since they live in the claims store, not in the index: the report and the
queue mark the episodes a worker holds, the overview counts them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kiwifs.base.text import check_text
from kiwifs.claims.desk import ClaimsDesk
from kiwifs.errors import UsageError
from kiwifs.index.answers import IndexAnswers
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.memory.rules import (
    Claims,
    MemoryReport,
    ReportDocument,
    ReportText,
    build_report,
    check_paging,
)
from kiwifs.services.integrity import EpisodesPrefix, Integrity
from kiwifs.writes.pipeline import Pipeline

if TYPE_CHECKING:  # the dashboard's types: the queue and the overview import them when used
    from kiwifs.memory.overview import Overview, QueuePage

QUEUE_MAX = 1000  # the most episodes one queue page lists
T = TypeVar("T")


class Consolidation:
    """The report, the queue and the overview of one root."""

    def __init__(
        self,
        root: Path,
        pipeline: Pipeline,
        indexing: IndexKeeper,
        claims: ClaimsDesk,
        integrity: Integrity,
        episodes_prefix: EpisodesPrefix,
    ) -> None:
        self.root = root
        self.pipeline = pipeline
        self.indexing = indexing
        self.claims = claims
        self.integrity = integrity
        self.episodes_prefix = episodes_prefix

    def report(
        self,
        prefix: str | None,
        limit: int | None,
        offset: int,
        use_index: bool,
        path_prefix: str | None = None,
        unmerged_only: bool = False,
    ) -> MemoryReport:
        """Every episode no ``merged-from`` cites yet (one page of them); ``path_prefix``: only
        what lies under it, coverage still the whole root's (:func:`build_report`);
        ``unmerged_only``: no list of every episodic file (``episodic_files`` empty)."""

        def indexed(
            answers: IndexAnswers,
            prefix: str,
            limit: int | None,
            offset: int,
            claims: Claims,
            within: str | None,
        ) -> MemoryReport | None:
            return answers.memory_report(prefix, limit, offset, claims, within, unmerged_only)

        def scanned(report: MemoryReport) -> MemoryReport:
            return dataclasses.replace(report, episodic_files=()) if unmerged_only else report

        return self._answered(prefix, limit, offset, use_index, path_prefix, indexed, scanned)

    def report_document(
        self,
        prefix: str | None,
        limit: int | None,
        offset: int,
        use_index: bool,
        path_prefix: str | None = None,
    ) -> ReportDocument:
        """:meth:`report` as the JSON document to print (from the index, the episode lists are
        the entries' stored text rather than one object per episode)."""

        def scanned(report: MemoryReport) -> ReportDocument:
            return ReportDocument(report.to_json(), report.unmerged_count)

        indexed = IndexAnswers.memory_report_document
        return self._answered(prefix, limit, offset, use_index, path_prefix, indexed, scanned)

    def report_text(
        self,
        prefix: str | None,
        limit: int | None,
        offset: int,
        use_index: bool,
        path_prefix: str | None = None,
    ) -> ReportText:
        """:meth:`report` as ``kiwifs memory report`` prints it (the whole report's text is kept
        in the index until a file row changes)."""
        from kiwifs.memory.render import report_text

        indexed = IndexAnswers.memory_report_text
        return self._answered(prefix, limit, offset, use_index, path_prefix, indexed, report_text)

    def keep_reports(self) -> None:
        """Make and keep the whole report, as JSON and as text, for the configured prefix (after
        a rebuild: the next ``kiwifs memory report`` then reads it instead of making it). Not
        while a live claim marks the report: such a report is made each time anyway."""
        if not self.indexing.tuning.kept_reports or self.claims.marks():
            return
        if not self.indexing.answers.keeps_reports():
            return
        self.report_document(None, None, 0, use_index=True)
        self.report_text(None, None, 0, use_index=True)

    def queue(self, path_prefix: str, limit: int, offset: int, prefix: str | None) -> QueuePage:
        """One page of the unmerged episodes whose path starts with ``path_prefix``."""
        if not 1 <= limit <= QUEUE_MAX:
            raise UsageError(f"limit must be between 1 and {QUEUE_MAX}")
        if offset < 0:
            raise UsageError(f"offset must be 0 or more, got {offset}")
        if any(ord(c) < 0x20 for c in path_prefix):
            raise UsageError("path prefix must not contain control characters")
        page = self.indexing.answers.queue(self.episodes_prefix(prefix), path_prefix, limit, offset)
        marks = self.claims.marks()
        if not marks:
            return page
        from kiwifs.memory.overview import QueueItem

        items = tuple(
            QueueItem(i.episode, m.holder, m.lease_expires)
            if (m := marks.get(i.episode.path))
            else i
            for i in page.items
        )
        return dataclasses.replace(page, items=items)

    def overview(self, prefix: str | None) -> Overview:
        """The dashboard's facts; the history replayed from git first unless a background
        keeper does it, and the stored check's problems for the configured prefix."""
        prefix = self.episodes_prefix(prefix)
        configured = prefix == self.episodes_prefix(None)
        if self.indexing.timeline_keeper is None and configured:
            self.pipeline.flush()
            self.indexing.refresh_timeline(prefix)
        found = self.indexing.answers.overview(prefix, self._head(), time.time())
        problems = None
        if configured:
            self.integrity.checker()
            self.indexing.refresh_check()  # only without the background loop (not a server)
            problems = self.indexing.answers.check_state(prefix)
        return dataclasses.replace(found, claimed=self._claimed_count(prefix), problems=problems)

    def start_timeline(self) -> None:
        """Replay the history behind :meth:`overview` in the background (a server), for the
        configured prefix as it is at each round."""
        self.indexing.start_timeline(lambda: self.episodes_prefix(None))

    def _answered(
        self,
        prefix: str | None,
        limit: int | None,
        offset: int,
        use_index: bool,
        path_prefix: str | None,
        indexed: Callable[[IndexAnswers, str, int | None, int, Claims, str | None], T | None],
        scanned: Callable[[MemoryReport], T],
    ) -> T:
        """The report in one form: the index's (``indexed``, given the checked arguments) unless
        ``use_index`` is off or the index cannot answer, else ``scanned`` of the report made by
        reading every file."""
        prefix, limit, offset, claims, within = self._report_args(
            prefix, limit, offset, path_prefix
        )
        if use_index:
            found = indexed(self.indexing.answers, prefix, limit, offset, claims, within)
            if found is not None:
                return found
        return scanned(self._scanned_report(prefix, limit, offset, claims, within))

    def _report_args(
        self, prefix: str | None, limit: int | None, offset: int, path_prefix: str | None
    ) -> tuple[str, int | None, int, Claims, str | None]:
        """A report's checked paging, its prefix in force, the live claims it marks and its
        checked path prefix (``None``: the whole root)."""
        limit, offset = check_paging(limit, offset)
        within = check_text(path_prefix or "", "path prefix") or None
        return self.episodes_prefix(prefix), limit, offset, self.claims.marks(), within

    def _scanned_report(
        self, prefix: str, limit: int | None, offset: int, claims: Claims, within: str | None
    ) -> MemoryReport:
        """The report from reading every file's frontmatter (no index)."""
        from kiwifs.memory.scan import scan_facts  # the fast scan's parser is only needed here

        facts = scan_facts(self.root, cap=self.indexing.tuning.workers)
        return build_report(facts, prefix, limit, offset, claims, within)

    def _claimed_count(self, prefix: str) -> int:
        """Unmerged episodes held by a live claim (the report's ``claimed_count``)."""
        marks = self.claims.marks()
        if not marks:
            return 0
        return len(self.indexing.answers.claim_candidates(list(marks), prefix, 0)[0])

    def _head(self) -> str | None:
        git = self.pipeline.git
        return git.head() if git is not None else None
