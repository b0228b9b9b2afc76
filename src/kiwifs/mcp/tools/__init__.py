"""The MCP tools themselves: one method per tool, each a thin adapter over :class:`Knowledge`.

A method's signature *is* the tool's input schema (the SDK builds the JSON schema from the type
hints and ``Field`` descriptions) and its docstring is the description the model reads, so both
are written for the model. Each method parses, makes one ``Knowledge`` call and formats with
:mod:`kiwifs.mcp.render`; it raises :class:`KiwiError` on failure and never deals with the
protocol. :mod:`kiwifs.mcp.server` registers them and maps the errors in one place. Structured
arguments (a bulk write's files, a merge's entries) are the models REST validates its bodies
with (:mod:`kiwifs.requests`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from kiwifs.errors import UsageError
from kiwifs.knowledge import Knowledge, StatusResult
from kiwifs.mcp.render import NOT_FOUND_FILE, NOT_FOUND_FOLDER, render_eligible
from kiwifs.memory.queue import DEFAULT_LEASE_TEXT, Released
from kiwifs.memory.queue import DEFAULT_LIMIT as DEFAULT_CLAIM_LIMIT
from kiwifs.memory.render import (
    render_batch,
    render_check,
    render_claims,
    render_lineage,
    render_mcp,
    render_released,
)
from kiwifs.requests import MergeItem

from .common import MCP_ACTOR, Actor, IfMatch, Path_, Provenance_, Worker_, in_format
from .files import FileTools
from .history import HistoryTools
from .recall import RecallTools


@dataclass(frozen=True)
class ToolSpec:
    """How a tool is registered: its hints and the texts of its expected failures."""

    name: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = True
    not_found: str | None = None  # formatted with the call's arguments
    failure: str | None = None  # prefix for every error message ("Memory report failed: …")


SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("kiwi_read", read_only=True, not_found=NOT_FOUND_FILE),
    ToolSpec("kiwi_write", read_only=False, destructive=True),
    ToolSpec("kiwi_append", read_only=False, idempotent=False),
    ToolSpec("kiwi_delete", read_only=False, destructive=True, not_found=NOT_FOUND_FILE),
    ToolSpec("kiwi_bulk_write", read_only=False, destructive=True),
    ToolSpec(
        "kiwi_rename",
        read_only=False,
        destructive=True,
        idempotent=False,
        not_found=NOT_FOUND_FILE.replace("{path}", "{from_}"),
    ),
    ToolSpec("kiwi_tree", read_only=True, not_found=NOT_FOUND_FOLDER),
    ToolSpec("kiwi_search", read_only=True),
    ToolSpec("kiwi_search_semantic", read_only=True),
    ToolSpec("kiwi_search_hybrid", read_only=True),
    ToolSpec("kiwi_query_meta", read_only=True),
    ToolSpec("kiwi_changes", read_only=True),
    ToolSpec("kiwi_versions", read_only=True),
    ToolSpec("kiwi_memory_report", read_only=True, failure="Memory report failed: "),
    ToolSpec("kiwi_memory_merge", read_only=False),
    ToolSpec("kiwi_remember", read_only=False, idempotent=False),
    ToolSpec("kiwi_forget", read_only=False, not_found=NOT_FOUND_FILE),
    ToolSpec("kiwi_restore", read_only=False, not_found=NOT_FOUND_FILE),
    ToolSpec("kiwi_brief", read_only=True),
    ToolSpec("kiwi_memory_claim", read_only=False, idempotent=False),
    ToolSpec("kiwi_memory_release", read_only=False),
    ToolSpec("kiwi_memory_check", read_only=True, failure="Memory check failed: "),
    ToolSpec("kiwi_memory_lineage", read_only=True),
    ToolSpec("kiwi_claim", read_only=False, failure="Claim failed: "),
    ToolSpec("kiwi_release", read_only=False, failure="Release failed: "),
    ToolSpec("kiwi_claims_list", read_only=True),
    ToolSpec("kiwi_eligible", read_only=True, failure="Eligible query failed: "),
)

# Argument names that are Python keywords: the schema says ``from``/``or``, the methods ``from_``.
ALIASES = {"from": "from_", "or": "or_"}


class Tools(FileTools, RecallTools, HistoryTools):
    """The tool methods, bound to one knowledge root."""

    def __init__(self, kb: Knowledge) -> None:
        self.kb = kb

    def method(self, name: str) -> Callable[..., str]:
        fn: Callable[..., str] = getattr(self, name)
        return fn

    # -- episodic memory --------------------------------------------------------------------

    def kiwi_memory_report(
        self,
        episodes_prefix: Annotated[
            str | None, Field(description="Folder of episodic files (default from config).")
        ] = None,
        limit: Annotated[
            int | None, Field(description="Page size for the file lists (default: all).")
        ] = None,
        offset: Annotated[int, Field(description="Page start.")] = 0,
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
    ) -> str:
        """Record in a page's merged-from frontmatter that it consolidated these episodes, so
        they leave the memory report. Idempotent; creates the page if it does not exist.
        Refused if another worker has claimed one of the episodes."""
        result = self.kb.merge(
            path, [e.to_entry() for e in entries], actor, if_match, worker=worker or None
        )
        if not result.added:
            return (
                f"Nothing to merge: {result.path} already cites every entry (ETag: {result.etag})"
            )
        verb = "Created" if result.created else "Updated"
        lines = [
            f"{verb} {result.path}: merged {len(result.added)} entr"
            f"{'y' if len(result.added) == 1 else 'ies'} (ETag: {result.etag})"
        ]
        lines += [f"  - {e.type} {e.id or e.path}" for e in result.added]
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
        return f"Remembered episode {result.episode_id} at {result.path} (ETag: {result.etag})"

    def kiwi_forget(
        self,
        path: Path_,
        reason: Annotated[str | None, Field(description="Why it is no longer true.")] = None,
        superseded_by: Annotated[
            str | None, Field(description="Path of the page that replaces it, if any.")
        ] = None,
        actor: Actor = MCP_ACTOR,
        if_match: IfMatch = None,
    ) -> str:
        """Retire a memory that is no longer true: the page is marked memory_status:
        superseded and leaves search, kiwi_query_meta and kiwi_brief (an episode also leaves the
        memory report's unmerged list). It can still be read by path; kiwi_restore undoes it."""
        return _status_text(self.kb.forget(path, reason, superseded_by, actor, if_match))

    def kiwi_restore(self, path: Path_, actor: Actor = MCP_ACTOR, if_match: IfMatch = None) -> str:
        """Bring back a page retired with kiwi_forget (removes memory_status, valid_until,
        superseded_reason and superseded_by)."""
        return _status_text(self.kb.restore(path, actor, if_match))

    # -- the consolidation queue ------------------------------------------------------------

    def kiwi_memory_claim(
        self,
        worker: Worker_,
        limit: Annotated[
            int, Field(description="How many episodes to hold (0: only renew).")
        ] = DEFAULT_CLAIM_LIMIT,
        lease: Annotated[
            str | float,
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
        if (path is None) == (episode_id is None):
            raise UsageError("give either path or episode_id")
        if path is not None:
            lineage = self.kb.lineage(path, episodes_prefix or None)
        else:
            lineage = self.kb.episode_lineage(episode_id or "", episodes_prefix or None)
        return in_format(lineage, format, lambda: render_lineage(lineage))

    # -- generic claims (KiwiFS's) ----------------------------------------------------------

    def kiwi_claim(
        self,
        path: Annotated[str, Field(description="Path to the task file.")],
        actor: Annotated[
            str, Field(description="Your agent identity (unique session id or name).")
        ],
        lease_duration: Annotated[
            str, Field(description="How long the claim lasts: '15m', '1h' (1m to 24h).")
        ] = "30m",
    ) -> str:
        """Claim a task file for exclusive work; fails if another agent holds it. Claiming
        again renews your lease. The claim is written into the file's frontmatter."""
        claim = self.kb.claim(path, actor, lease_duration)
        return json.dumps(claim.to_json(), ensure_ascii=False)

    def kiwi_release(
        self,
        path: Annotated[str, Field(description="Path to the task file.")],
        actor: Annotated[str, Field(description="The identity you claimed it with.")],
    ) -> str:
        """Release a claimed task so other agents can work on it."""
        rel = self.kb.release(path, actor)
        return f"Released claim on {rel}"

    def kiwi_claims_list(self) -> str:
        """Every active claim (tasks and episodes): which path, who holds it, until when."""
        return render_claims(self.kb.claims_list())

    def kiwi_eligible(
        self,
        limit: Annotated[int, Field(description="Max results (1-200).")] = 10,
        path_prefix: Annotated[
            str | None, Field(description="Only under this folder, e.g. 'tasks/'.")
        ] = None,
    ) -> str:
        """Tasks ready to claim: files with status todo that nobody holds, best priority
        first (lowest number)."""
        return render_eligible(self.kb.eligible(limit, path_prefix))


def _status_text(result: StatusResult) -> str:
    """What a forget or restore answers: what happened, or that nothing needed doing."""
    if result.superseded:
        head = f"Forgot {result.path}" if result.changed else f"Already forgotten: {result.path}"
    else:
        head = f"Restored {result.path}" if result.changed else f"Not forgotten: {result.path}"
    return f"{head} (ETag: {result.etag})"
