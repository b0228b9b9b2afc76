"""``Knowledge``: the one object every interface uses.

The CLI, the REST server and the MCP server each parse their input, make one call here and format
the answer. All behaviour lives below this object; nothing above it decides a rule.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kiwifs.base.limits import BRIEF_BUDGET, BRIEF_MAX_PAGES, SEARCH_LIMIT, SEMANTIC_TOP_K
from kiwifs.files.tree import TreeNode, folder_tree
from kiwifs.frontmatter.provenance import LIBRARY_ACTOR
from kiwifs.index.filters import recall_filter
from kiwifs.index.upkeep import IndexRefresh
from kiwifs.memory.queue import DEFAULT_LIMIT as DEFAULT_CLAIM_LIMIT
from kiwifs.services.memorywrites import MergeResult, RememberResult, StatusResult
from kiwifs.services.navigating import NavigationReads
from kiwifs.services.reading import FileContent, Page
from kiwifs.services.wiring import Wiring

# What only the answers' types name is imported for type checking alone: the modules of search,
# the brief, the check and the dashboard load when a call needs them (see IndexKeeper), not
# with every command.
if TYPE_CHECKING:
    from kiwifs.claims.desk import Task
    from kiwifs.frontmatter.provenance import Provenance
    from kiwifs.git.committer import CommitStatus
    from kiwifs.git.log import Change, Version
    from kiwifs.index.core import ReconcileStats
    from kiwifs.index.search.keyword import SearchHit, SearchResults, marked_parts
    from kiwifs.index.search.meta import MetaHit, MetaResults
    from kiwifs.index.vectors.hybrid import HybridHit, HybridResults
    from kiwifs.index.vectors.semantic import SemanticResults
    from kiwifs.index.vectors.store import EmbedRound, VectorStatus
    from kiwifs.memory.brief import Brief
    from kiwifs.memory.check import MemoryCheck
    from kiwifs.memory.leases import Claim
    from kiwifs.memory.lineage import Lineage
    from kiwifs.memory.overview import Overview, QueuePage
    from kiwifs.memory.queue import ClaimBatch
    from kiwifs.memory.rules import MemoryReport, MergeEntry, ReportDocument, ReportText
    from kiwifs.writes.events import Subscription
    from kiwifs.writes.pipeline import WriteResult


# The value types the answers hand out (and the rule splitting a snippet's <mark> tags), named
# here so that the interfaces import only this module. Each loads with its module when first
# asked for, as the call making it would load it, not with every command.
_HANDED_OUT = {
    "Change": "kiwifs.git.log",
    "HybridHit": "kiwifs.index.vectors.hybrid",
    "HybridResults": "kiwifs.index.vectors.hybrid",
    "MetaHit": "kiwifs.index.search.meta",
    "MetaResults": "kiwifs.index.search.meta",
    "SearchHit": "kiwifs.index.search.keyword",
    "SearchResults": "kiwifs.index.search.keyword",
    "SemanticResults": "kiwifs.index.vectors.semantic",
    "Task": "kiwifs.claims.desk",
    "Version": "kiwifs.git.log",
    "marked_parts": "kiwifs.index.search.keyword",
}

# the names defined or imported here, then the value types of _HANDED_OUT
__all__ = ["DEFAULT_ACTOR", "FileContent", "IndexRefresh", "Knowledge", "MergeResult", "Page"]
__all__ += ["RememberResult", "StatusResult", "TreeNode", "Change", "HybridHit", "HybridResults"]
__all__ += ["MetaHit", "MetaResults", "SearchHit", "SearchResults", "SemanticResults", "Task"]
__all__ += ["Version", "marked_parts"]


def __getattr__(name: str) -> Any:
    """A name of :data:`_HANDED_OUT`, imported on first use (PEP 562)."""
    module = _HANDED_OUT.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


DEFAULT_ACTOR = LIBRARY_ACTOR


class Knowledge(NavigationReads, Wiring):
    """A knowledge root: its files, history, memory report and change events (its parts are
    built by :class:`~kiwifs.services.wiring.Wiring`; a server's background work is
    :class:`~kiwifs.server.lifecycle.Serving`'s; peek, section and context are inherited from
    :class:`~kiwifs.services.navigating.NavigationReads`)."""

    # -- the server's probes ------------------------------------------------------------------

    def commit_status(self) -> CommitStatus:
        """Background commits pending, and whether they are failing (what ``/health`` shows);
        while they fail, writes and history reads raise :class:`StorageError`, never pile up."""
        return self.pipeline.commit_status()

    def too_large_count(self) -> int:
        """Files over the size limit that the index skips (what ``/health`` warns about; the
        memory report names them)."""
        return self.indexing.too_large_count()

    def ready(self) -> bool:
        """True once a server answers from a current index: the root is there and a reconcile
        of the index watcher has succeeded (what ``/readyz`` reports)."""
        return self.root.is_dir() and self.indexing.watching

    # -- reading ----------------------------------------------------------------------------

    def read(self, path: str) -> FileContent:
        return self.reading.read(path)

    def frontmatter(self, path: str) -> dict[str, Any]:
        """A file's frontmatter as JSON-safe data (``{}`` when it has none or it is invalid):
        dates as ISO strings, sets as lists, keys as strings, the form the index stores and
        ``/meta`` returns, so every interface shows one representation."""
        return self.reading.frontmatter(path)

    def page(self, path: str, rev: str | None = None) -> Page:
        """The current file and its version ``rev`` (else the current one) split for display:
        frontmatter as :meth:`frontmatter` gives it, body, and warnings about the frontmatter."""
        return self.reading.page(path, rev)

    def tree(self, path: str | None = None, depth: int = 20) -> TreeNode:
        return folder_tree(self.storage, path, depth)

    def subscribe(self) -> Subscription:
        """The change events from now on (every write, delete and rename, and ``check`` when a
        stored ``memory check`` changed), until the subscription is closed."""
        return self.events.subscribe()

    # -- writing ----------------------------------------------------------------------------

    def write(
        self,
        path: str,
        content: bytes | str,
        actor: str | None = None,
        if_match: str | None = None,
        provenance: str | Provenance | None = None,
        if_none_match: str | None = None,
    ) -> WriteResult:
        """Write a file; ``if_none_match="*"`` creates only (an existing file is a conflict).

        A file under another holder's live file claim is a :class:`Conflict`; the holder's own
        write keeps the claim keys in its frontmatter (docs/memory.md)."""
        return self.files.write(path, content, actor, if_match, provenance, if_none_match)

    def append(
        self,
        path: str,
        content: bytes | str,
        actor: str | None = None,
        separator: str = "\n",
        if_match: str | None = None,
    ) -> WriteResult:
        return self.files.append(path, content, actor, separator, if_match)

    def delete(self, path: str, actor: str | None = None, if_match: str | None = None) -> str:
        """Delete a file; one under another holder's live claim (memory or file) is a
        :class:`Conflict`, and the holder's delete ends its claim."""
        return self.files.delete(path, actor, if_match)

    def bulk_write(
        self,
        files: Sequence[tuple[str, bytes | str]],
        actor: str | None = None,
        provenance: str | Provenance | None = None,
        message: str | None = None,
    ) -> list[WriteResult]:
        return self.files.bulk_write(files, actor, provenance, message)

    # -- history ----------------------------------------------------------------------------

    def versions(self, path: str) -> list[Version]:
        return self.history.versions(path)

    def version(self, path: str, rev: str) -> bytes:
        return self.history.version(path, rev)

    def diff(self, path: str, rev_from: str, rev_to: str) -> str:
        return self.history.diff(path, rev_from, rev_to)

    def changes(
        self, since: str | None = None, limit: int | None = None, *, path_prefix: str | None = None
    ) -> list[Change]:
        """Commits since ``since``, newest first (``limit``: 50 if not positive, at most 500, as
        KiwiFS); ``path_prefix``: those changing nothing outside it, filtered before the cut."""
        return self.history.changes(since, limit, path_prefix)

    # -- episodic memory --------------------------------------------------------------------

    def memory_report(
        self,
        prefix: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        use_index: bool = True,
        *,
        path_prefix: str | None = None,
        unmerged_only: bool = False,
    ) -> MemoryReport:
        """The consolidation queue: every episode no ``merged-from`` cites yet (``path_prefix``:
        only what lies under it). From the index (reconciled with the files first, unless a
        watcher keeps it current); ``use_index=False``, or no index possible, reads every file.
        ``unmerged_only``: the list of every episodic file is left empty (the counts stay), for
        a caller that shows only the unmerged ones: at a million episodes, making that list
        was most of a report's time.
        """
        return self.consolidation.report(
            prefix, limit, offset, use_index, path_prefix, unmerged_only
        )

    def memory_report_document(
        self,
        prefix: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        use_index: bool = True,
        *,
        path_prefix: str | None = None,
    ) -> ReportDocument:
        """:meth:`memory_report` as the JSON document to print, for large answers: printed by
        :func:`printed_json.dumps`, byte for byte ``memory_report(...).to_json()``, its episode
        lists the index's stored text rather than one object per episode."""
        return self.consolidation.report_document(prefix, limit, offset, use_index, path_prefix)

    def memory_report_text(
        self,
        prefix: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        use_index: bool = True,
        *,
        path_prefix: str | None = None,
    ) -> ReportText:
        """:meth:`memory_report` as ``kiwifs memory report`` prints it: the text, the warnings
        (for stderr) and the unmerged count. The whole report's text and JSON are kept in the
        index until a file row changes, so asking again costs a read, not a report."""
        return self.consolidation.report_text(prefix, limit, offset, use_index, path_prefix)

    # -- search and frontmatter queries -----------------------------------------------------

    # The search family (search, semantic_search, hybrid_search, brief) takes the query
    # positionally and its options by keyword, in one order: how much, then the filters they
    # share (same names, same defaults), then the method's own.

    def search(
        self,
        query: str,
        *,
        limit: int = SEARCH_LIMIT,
        offset: int = 0,
        path_prefix: str | None = None,
        scope: str | None = None,
        modified_after: str | None = None,
        include_superseded: bool = False,
        recency_weight: float | None = None,
    ) -> SearchResults:
        """Full-text search, BM25-ranked (optionally blended with recency, 0–1).

        Superseded pages are left out unless ``include_superseded``; ``scope`` is an exact match
        on the frontmatter ``scope``; ``modified_after`` is an RFC 3339 time (a bad one is a
        usage error). The filters apply before ranking and paging.
        """
        where = recall_filter(scope, None, modified_after, include_superseded)
        lookups = self.indexing.lookups
        return lookups.search(query, limit, offset, path_prefix, where, recency_weight)

    def meta(
        self,
        where: Sequence[str] | Mapping[str, Any] = (),
        or_: Sequence[str] = (),
        sort: str | None = None,
        order: str = "asc",
        limit: int = SEARCH_LIMIT,
        offset: int = 0,
        paths: Sequence[str] | None = None,
        include_superseded: bool = False,
        *,
        path_prefix: str | None = None,
    ) -> MetaResults:
        """Files whose frontmatter matches the filters (``where``: ``$.status=draft`` filters
        or a ``{field: value}`` mapping of equalities, all AND-ed), only those whose path starts
        with ``path_prefix`` (before paging); superseded ones only when asked."""
        from kiwifs.index.search.meta import equality_filters

        filters = equality_filters(where) if isinstance(where, Mapping) else list(where)
        return self.indexing.lookups.meta(
            filters, or_, sort, order, limit, offset, paths, include_superseded, path_prefix
        )

    def brief(
        self,
        query: str,
        *,
        budget_tokens: int = BRIEF_BUDGET,
        max_pages: int = BRIEF_MAX_PAGES,
        path_prefix: str | None = None,
        scope: str | None = None,
        include_superseded: bool = False,
    ) -> Brief:
        """A context pack: the best matching pages, whole, within ``budget_tokens`` and
        ``max_pages``, and a manifest of the ones left out (rules: :mod:`kiwifs.memory.brief`)."""
        where = recall_filter(scope, path_prefix, None, include_superseded)
        return self.briefing.brief(query, budget_tokens, max_pages, where)

    def semantic_search(
        self,
        query: str,
        *,
        limit: int | None = SEMANTIC_TOP_K,
        offset: int = 0,
        path_prefix: str | None = None,
        scope: str | None = None,
        modified_after: str | None = None,
        include_superseded: bool = False,
        threshold: float | None = None,
    ) -> SemanticResults:
        """Pages nearest ``query`` in meaning (cosine similarity of embeddings; docs/search.md).

        Filters apply before the top ``limit`` is cut; superseded pages are left out unless
        ``include_superseded``. :class:`~kiwifs.errors.Unavailable` when vectors are off.
        """
        where = recall_filter(scope, path_prefix, modified_after, include_superseded)
        return self.indexing.lookups.semantic(query, limit, offset, threshold, where)

    def hybrid_search(
        self,
        query: str,
        *,
        limit: int | None = None,
        offset: int = 0,
        path_prefix: str | None = None,
        scope: str | None = None,
        modified_after: str | None = None,
        include_superseded: bool = False,
    ) -> HybridResults:
        """Keyword and semantic ranks fused by reciprocal rank fusion, each result attributed
        (``both``, ``keyword only``, ``semantic only``); keyword-only when vectors are off."""
        where = recall_filter(scope, path_prefix, modified_after, include_superseded)
        return self.indexing.lookups.hybrid(query, limit, offset, where)

    def vector_status(self) -> VectorStatus:
        """Pages embedded, pending and failing (``{"enabled": false}`` when vectors are off)."""
        return self.indexing.lookups.vector_status()

    def prepare_vectors(self) -> None:
        """Load the embedder now when vectors are on (a server fails at start, not at query)."""
        if self.config.search.vector.enabled:
            self.indexing.recall()

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild the text index from the files; returns the number of files indexed. Stored
        vectors are kept (they belong to file contents, not rows); see :meth:`reindex_vectors`."""
        return self.indexing.reindex(progress)

    def reindex_or_reconcile(
        self, progress: Callable[[int, int], None] | None = None
    ) -> IndexRefresh:
        """What ``kiwifs reindex`` does: :meth:`reindex`, or, while a server (``kiwifs serve``,
        ``kiwifs mcp``) keeps this root's index current, a full :meth:`reconcile` in place of
        the rebuild, which would drop the tables under the server."""
        done = self.indexing.reindex_or_reconcile(progress)
        self.consolidation.keep_reports()
        return done

    def reindex_vectors(self, progress: Callable[[int, int], None] | None = None) -> EmbedRound:
        """Throw the stored vectors away and embed every page again."""
        return self.indexing.reindex_vectors(progress)

    def reconcile(self) -> ReconcileStats:
        """Bring the index up to date with the files (re-reads only what changed)."""
        return self.indexing.reconcile()

    # -- the integrity of consolidation: lineage by path or id, check ------------------------

    def memory_check(self, prefix: str | None = None, use_index: bool = True) -> MemoryCheck:
        """Integrity of consolidation (docs/memory.md): dangling ``merged-from`` entries,
        duplicate episode ids, double merges, the oldest unmerged episode, coverage per folder
        and per day. From the index when it answers reports, else by reading the files."""
        return self.integrity.check(prefix, use_index)

    # -- the consolidation queue: claims ----------------------------------------------------

    def claim_episodes(
        self,
        worker: str,
        limit: int = DEFAULT_CLAIM_LIMIT,
        lease: Any = None,
        prefix: str | None = None,
        with_content: bool = False,
    ) -> ClaimBatch:
        """Claim up to ``limit`` unmerged, unclaimed episodes for ``worker`` (lease default
        10 minutes); its live claims are renewed and count in the batch. No commit."""
        return self.claims.claim_episodes(worker, limit, lease, prefix, with_content)

    def release_episodes(self, worker: str, paths: Sequence[str] | None = None) -> list[str]:
        """End ``worker``'s memory claims (all of them without ``paths``)."""
        return self.claims.release_episodes(worker, paths)

    def claim(self, path: str, holder: str, lease_duration: Any = None) -> Claim:
        """KiwiFS's generic claim on one file (lease default 30 minutes), written into its
        frontmatter (``claimed-by``, ``claimed-at``, ``lease-expires``; one commit)."""
        return self.claims.claim_file(path, holder, lease_duration)

    def release(self, path: str, holder: str) -> str:
        """Release ``holder``'s claim on a file and remove its frontmatter keys."""
        return self.claims.release_file(path, holder)

    def claims_list(self) -> list[Claim]:
        """Every live claim, memory and file, by path."""
        return self.claims.live()

    def eligible(self, limit: int = 10, path_prefix: str | None = None) -> list[Task]:
        """Tasks (``status: todo``) no live claim holds, best ``priority`` first."""
        return self.claims.eligible(limit, path_prefix)

    def remember(
        self,
        content: str,
        episode_id: str | None = None,
        scope: str | None = None,
        tags: Sequence[str] | None = None,
        actor: str | None = None,
        provenance: str | Provenance | None = None,
        title: str | None = None,
    ) -> RememberResult:
        """Write a new episode (rules: :mod:`kiwifs.memory.lifecycle`); never overwrites.

        An ``episode_id`` that already identifies an episode anywhere in the root is a
        :class:`Conflict` and nothing is written. The check is one index lookup made under the
        write lock, so two agents choosing the same id cannot both succeed.
        """
        return self.memory_writes.remember(
            content, episode_id, scope, tags, actor, provenance, title
        )

    def forget(
        self,
        path: str,
        reason: str | None = None,
        superseded_by: str | None = None,
        actor: str | None = None,
        if_match: str | None = None,
    ) -> StatusResult:
        """Mark a page superseded: it leaves search, ``/meta`` and briefs, and an episode leaves
        the unmerged list; reading it by path still works. One commit; forgetting a page that
        is already superseded changes nothing (rules: :mod:`kiwifs.memory.lifecycle`).

        ``superseded_by`` names the page that replaces it: a path in the root, stored canonical.
        """
        return self.memory_writes.forget(path, reason, superseded_by, actor, if_match)

    def restore(
        self, path: str, actor: str | None = None, if_match: str | None = None
    ) -> StatusResult:
        """Undo :meth:`forget`: remove ``memory_status``, ``valid_until``, ``superseded_reason``
        and ``superseded_by``. One commit; a page that is not superseded is left as it is."""
        return self.memory_writes.restore(path, actor, if_match)

    # -- the consolidation picture ----------------------------------------------------------

    def lineage(
        self,
        path: str | None = None,
        *,
        episode_id: str | None = None,
        path_or_id: str | None = None,
        prefix: str | None = None,
    ) -> Lineage:
        """Both directions of a file's lineage: the pages whose ``merged-from`` cite it (for an
        episode), each of its own ``merged-from`` entries resolved to episode paths or flagged
        dangling, and its ``derived-from`` (docs/memory.md).

        The file is the one at ``path`` or the one episode whose id is ``episode_id`` (exactly
        one of the two, as REST and MCP take them: a usage error otherwise), or ``path_or_id``
        alone, as the CLI takes it: a file's path, else an episode id.
        """
        return self.integrity.find_lineage(path, episode_id, path_or_id, prefix)

    def queue(
        self, path_prefix: str = "", limit: int = 100, offset: int = 0, prefix: str | None = None
    ) -> QueuePage:
        """One page of the unmerged episodes whose path starts with ``path_prefix``."""
        return self.consolidation.queue(path_prefix, limit, offset, prefix)

    def overview(self, prefix: str | None = None) -> Overview:
        """The consolidation picture: the report's counts, coverage per top-level folder, the
        oldest unmerged episode, superseded episodes and the history per day.

        The history is replayed from git into the index (only commits not replayed yet) and the
        problems of ``memory check`` are the last stored result (configured prefix only): both
        kept by a server's background loops (:class:`~kiwifs.server.lifecycle.Serving`), else
        brought up to date here, before answering."""
        return self.consolidation.overview(prefix)

    def merge(
        self,
        page: str,
        entries: Iterable[MergeEntry],
        actor: str | None = None,
        if_match: str | None = None,
        worker: str | None = None,
        force: bool = False,
    ) -> MergeResult:
        """Record in ``page``'s ``merged-from`` that it consumed ``entries`` (idempotent).

        No episode is merged twice (docs/memory.md): citing an episode another holder claims
        under a live lease is a :class:`Conflict` and writes nothing; so is citing one whose
        claim by ``worker`` has expired, or one another page's ``merged-from`` already cites.
        ``force`` merges anyway. The worker's claims on the merged episodes end with the commit.
        Entries that cite nothing are written, and named in the result's ``warnings``.
        """
        return self.memory_writes.merge(page, entries, actor, if_match, worker, force)
