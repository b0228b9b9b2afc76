"""The MCP tools: one method per tool, each a thin adapter over :class:`Knowledge`.

A method's signature *is* the tool's input schema (the SDK builds the JSON schema from the type
hints and ``Field`` descriptions) and its docstring is the description the model reads, so both
are written for the model. Each method parses, makes one ``Knowledge`` call and formats with
:mod:`kiwifs.mcp.render`; it raises :class:`KiwiError` on failure and never deals with the
protocol. The methods live in one module per kind of tool (``files``, ``graph``, ``recall``,
``history``, ``memory``, ``claims``; the argument types they share in ``common``), each a mixin that
:class:`Tools` binds to one root. This module holds the registry: :data:`SPECS`, the tools in the
order they are listed, with their hints and failure texts. :mod:`kiwifs.mcp.server` registers
them and maps the errors in one place. Structured arguments (a bulk write's files, a merge's
entries) are the models REST validates its bodies with (:mod:`kiwifs.server.payloads`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import NOT_FOUND_FILE, NOT_FOUND_FOLDER
from kiwifs.mcp.tools.claims import ClaimTools
from kiwifs.mcp.tools.files import FileTools
from kiwifs.mcp.tools.graph import GraphTools
from kiwifs.mcp.tools.history import HistoryTools
from kiwifs.mcp.tools.memory import MemoryTools
from kiwifs.mcp.tools.recall import RecallTools


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
    ToolSpec("kiwi_patch_frontmatter", read_only=False, not_found=NOT_FOUND_FILE),
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
    ToolSpec("kiwi_peek", read_only=True, not_found=NOT_FOUND_FILE),
    ToolSpec("kiwi_backlinks", read_only=True),
    # no not_found text: a missing heading is a NotFound too, and its message says which
    ToolSpec("kiwi_section", read_only=True),
    ToolSpec("kiwi_context", read_only=True, failure="Context failed: "),
    ToolSpec("kiwi_graph_walk", read_only=True, not_found="File not found at {path}."),
    ToolSpec("kiwi_graph_path", read_only=True, failure="Path finding failed: "),
    ToolSpec("kiwi_health_check", read_only=True, failure="Health check failed: "),
    ToolSpec("kiwi_search", read_only=True),
    ToolSpec("kiwi_search_semantic", read_only=True),
    ToolSpec("kiwi_search_hybrid", read_only=True),
    ToolSpec("kiwi_query_meta", read_only=True),
    ToolSpec("kiwi_changes", read_only=True),
    ToolSpec("kiwi_versions", read_only=True),
    ToolSpec("kiwi_blame", read_only=True, not_found=NOT_FOUND_FILE),
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


class Tools(FileTools, GraphTools, RecallTools, HistoryTools, MemoryTools, ClaimTools):
    """The tool methods, bound to one knowledge root."""

    def __init__(self, kb: Knowledge) -> None:
        self.kb = kb

    def method(self, name: str) -> Callable[..., str]:
        fn: Callable[..., str] = getattr(self, name)
        return fn
