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
from typing import Annotated

from pydantic import Field

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import NOT_FOUND_FILE, NOT_FOUND_FOLDER, render_eligible
from kiwifs.memory.render import render_claims

from .files import FileTools
from .history import HistoryTools
from .memory import MemoryTools
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


class Tools(FileTools, RecallTools, HistoryTools, MemoryTools):
    """The tool methods, bound to one knowledge root."""

    def __init__(self, kb: Knowledge) -> None:
        self.kb = kb

    def method(self, name: str) -> Callable[..., str]:
        fn: Callable[..., str] = getattr(self, name)
        return fn

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
