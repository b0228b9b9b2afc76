"""The MCP tools of episodic memory: the report, merge, remember, forget and restore, the
consolidation queue (claim and release a batch of episodes), the check and lineage. Each answers
text, or with ``format="json"`` the same JSON as REST.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from kiwifs.base.limits import MCP_CLAIM_LIMIT
from kiwifs.knowledge import Knowledge, StatusResult
from kiwifs.mcp.tools.common import (
    MCP_ACTOR,
    NUMBER,
    Actor,
    IfMatch,
    Offset,
    Path_,
    Provenance_,
    Worker_,
    in_format,
    number,
    read_lease,
    report_limit,
)
from kiwifs.memory.queue import DEFAULT_LEASE_TEXT, Released
from kiwifs.memory.render import (
    render_batch,
    render_check,
    render_lineage,
    render_mcp,
    render_released,
)
from kiwifs.server.payloads import MergeItem


class MemoryTools:
    """Tools over one root's episodic memory (``kb``, set by :class:`kiwifs.mcp.tools.Tools`)."""

    kb: Knowledge

    def kiwi_memory_report(
        self,
        episodes_prefix: Annotated[
            str | None, Field(description="Folder of episodic files (default from config).")
        ] = None,
        limit: Annotated[
            int | None,
            BeforeValidator(report_limit),
            NUMBER,
            Field(description="Page size for the file lists (default: all; 0: counts only)."),
        ] = None,
        offset: Offset = 0,
        format: Annotated[  # noqa: A002 - the argument name clients send
            Literal["text", "json"], Field(description="'text' (default) or 'json'.")
        ] = "text",
    ) -> str:
        """The consolidation queue: episodic files that no page's merged-from cites yet.
        Consolidate them into a concept page, then record it with kiwi_memory_merge."""
        report = self.kb.memory_report(episodes_prefix or None, limit, offset)
        return in_format(report, format, lambda: render_mcp(report))

    def kiwi_memory_merge(
        self,
        path: Annotated[str, Field(description="The page that consolidated the episodes.")],
        entries: Annotated[
            list[MergeItem],
            Field(description="What it consumed: objects with id (episode_id) or path."),
        ],
        actor: Actor = MCP_ACTOR,
        if_match: IfMatch = None,
        worker: Annotated[
            str | None,
            Field(description="Your worker name from kiwi_memory_claim: ends your claims."),
        ] = None,
        force: Annotated[
            bool,
            Field(
                description="Merge even an episode another worker holds or another page"
                " already merged (a deliberate double merge)."
            ),
        ] = False,
    ) -> str:
        """Record in a page's merged-from frontmatter that it consolidated these episodes, so
        they leave the memory report. Idempotent; creates the page if it does not exist.
        Refused if another worker has claimed one of the episodes, or another page already
        merged one (unless force). Entries that cite nothing are recorded with a warning."""
        result = self.kb.merge(
            path,
            [e.to_entry() for e in entries],
            actor,
            if_match,
            worker=worker or None,
            force=force,
        )
        if not result.added:
            lines = [
                f"Nothing to merge: {result.path} already cites every entry (ETag: {result.etag})"
            ]
        else:
            verb = "Created" if result.created else "Updated"
            lines = [
                f"{verb} {result.path}: merged {len(result.added)} entr"
                f"{'y' if len(result.added) == 1 else 'ies'} (ETag: {result.etag})"
            ]
            lines += [f"  - {e.type} {e.id or e.path}" for e in result.added]
        lines += [f"Warning: {w}" for w in result.warnings]
        return "\n".join(lines)

    def kiwi_remember(
        self,
        content: Annotated[str, Field(description="What happened, in markdown.")],
        episode_id: Annotated[
            str | None,
            Field(description="Id to use (letters, digits, . _ -); a new UUID if absent."),
        ] = None,
        scope: Annotated[
            str | None, Field(description="What the episode is about (e.g. a project).")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Tags for the episode.")] = None,
        actor: Actor = MCP_ACTOR,
        provenance: Provenance_ = None,
        title: Annotated[str | None, Field(description="Short title of the episode.")] = None,
    ) -> str:
        """Record a new episode (raw experience) as episodes/<date>/<episode_id>.md with
        memory_kind: episodic. It shows in kiwi_memory_report until a page merges it.
        An episode_id that is already taken is refused."""
        result = self.kb.remember(content, episode_id, scope, tags, actor, provenance, title)
        return f"Remembered {result.path} (episode_id: {result.episode_id}, ETag: {result.etag})"

    def kiwi_forget(
        self,
        path: Path_,
        reason: Annotated[str | None, Field(description="Why it is no longer true.")] = None,
        superseded_reason: Annotated[
            str | None,
            Field(description="The same as reason (KiwiFS's name); wins if both are given."),
        ] = None,
        superseded_by: Annotated[
            str | None, Field(description="Path of the page that replaces it, if any.")
        ] = None,
        actor: Actor = MCP_ACTOR,
        if_match: IfMatch = None,
    ) -> str:
        """Retire a memory that is no longer true: the page is marked memory_status:
        superseded and leaves search, kiwi_query_meta and kiwi_brief (an episode also leaves the
        memory report's unmerged list). It can still be read by path; kiwi_restore undoes it."""
        why = superseded_reason or reason or None
        result = self.kb.forget(path, why, superseded_by, actor, if_match)
        if not result.changed:
            return _status_text(result)
        text = f"Forgot {result.path} (memory_status: superseded, ETag: {result.etag})"
        return f"{text} reason: {why}" if why else text

    def kiwi_restore(self, path: Path_, actor: Actor = MCP_ACTOR, if_match: IfMatch = None) -> str:
        """Bring back a page retired with kiwi_forget (removes memory_status, valid_until,
        superseded_reason and superseded_by)."""
        return _status_text(self.kb.restore(path, actor, if_match))

    def kiwi_memory_claim(
        self,
        worker: Worker_,
        limit: Annotated[
            int,
            number(MCP_CLAIM_LIMIT),
            NUMBER,
            Field(description="How many episodes to hold (default 20, max 1000; 0: only renew)."),
        ] = MCP_CLAIM_LIMIT.default,
        lease: Annotated[
            str | int | None,
            BeforeValidator(read_lease),
            Field(description="How long you keep them: '90s', '10m', '2h', or seconds (1m-24h)."),
        ] = DEFAULT_LEASE_TEXT,
        episodes_prefix: Annotated[
            str | None, Field(description="Folder of episodic files (default from config).")
        ] = None,
        with_content: Annotated[bool, Field(description="Include each episode's text.")] = False,
        format: Annotated[  # noqa: A002 - the argument name clients send
            Literal["text", "json"], Field(description="'text' (default) or 'json'.")
        ] = "text",
    ) -> str:
        """Claim a batch of unmerged episodes to consolidate, so that no other worker takes
        them. Claiming again renews your lease. Consolidate them into a page, then record it
        with kiwi_memory_merge passing the same worker (that ends your claims)."""
        batch = self.kb.claim_episodes(worker, limit, lease, episodes_prefix or None, with_content)
        return in_format(batch, format, lambda: render_batch(batch))

    def kiwi_memory_release(
        self,
        worker: Worker_,
        paths: Annotated[
            list[str], Field(description="Episodes to give back; empty: all of yours.")
        ] = [],  # noqa: B006 - pydantic copies defaults
    ) -> str:
        """Give claimed episodes back to the queue without merging them."""
        released = self.kb.release_episodes(worker, paths or None)
        return render_released(Released.of(worker, released))

    def kiwi_memory_check(
        self,
        episodes_prefix: Annotated[
            str | None, Field(description="Folder of episodic files (default from config).")
        ] = None,
        format: Annotated[  # noqa: A002 - the argument name clients send
            Literal["text", "json"], Field(description="'text' (default) or 'json'.")
        ] = "text",
    ) -> str:
        """Check consolidation: merged-from entries that cite nothing, duplicate episode ids,
        episodes merged by more than one page, the oldest unmerged episode, coverage."""
        check = self.kb.memory_check(episodes_prefix or None)
        return in_format(check, format, lambda: render_check(check))

    def kiwi_memory_lineage(
        self,
        path: Annotated[str | None, Field(description="A file path.")] = None,
        episode_id: Annotated[str | None, Field(description="Or an episode id.")] = None,
        episodes_prefix: Annotated[
            str | None, Field(description="Folder of episodic files (default from config).")
        ] = None,
        format: Annotated[  # noqa: A002 - the argument name clients send
            Literal["text", "json"], Field(description="'text' (default) or 'json'.")
        ] = "text",
    ) -> str:
        """Where a file comes from and where it went: for an episode, the pages that merged
        it; for a page, the episodes it consolidated (dangling ones flagged); for any file,
        its derived-from provenance."""
        lineage = self.kb.lineage(path, episode_id=episode_id, prefix=episodes_prefix or None)
        return in_format(lineage, format, lambda: render_lineage(lineage))


def _status_text(result: StatusResult) -> str:
    """What a forget or restore answers: what happened, or that nothing needed doing."""
    if result.superseded:
        head = f"Forgot {result.path}" if result.changed else f"Already forgotten: {result.path}"
    else:
        head = f"Restored {result.path}" if result.changed else f"Not forgotten: {result.path}"
    return f"{head} (ETag: {result.etag})"
