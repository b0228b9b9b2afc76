"""The MCP tools of recall: full-text search, semantic and hybrid search, frontmatter queries
and the brief (a context pack within a token budget). Forgotten pages are left out unless a
call asks for them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kiwifs.base.limits import (
    MCP_BRIEF_BUDGET,
    MCP_BRIEF_PAGES,
    MCP_HYBRID_LIMIT,
    MCP_META_LIMIT,
    MCP_SEARCH_LIMIT,
    MCP_SEMANTIC_LIMIT,
)
from kiwifs.errors import UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import render_hybrid, render_meta, render_search, render_semantic
from kiwifs.mcp.tools.common import (
    NUMBER,
    IncludeSuperseded,
    ModifiedAfter,
    Offset,
    PathPrefix,
    Scope,
    fraction,
    in_format,
    number,
)
from kiwifs.memory.render import render_brief

MetaValue = str | int | float | bool | None


class RecallTools:
    """Tools that find pages in one root (``kb``, set by :class:`kiwifs.mcp.tools.Tools`)."""

    kb: Knowledge

    def kiwi_search(
        self,
        query: Annotated[str, Field(description="Words to look for (full-text, ranked).")],
        limit: Annotated[
            int,
            number(MCP_SEARCH_LIMIT),
            NUMBER,
            Field(description="Results per page (default 20, max 50)."),
        ] = MCP_SEARCH_LIMIT.default,
        offset: Offset = 0,
        path_prefix: PathPrefix = None,
        scope: Scope = None,
        recency_weight: Annotated[
            float | None,
            fraction(0.0, 1.0),
            Field(description="0-1: how much newer files rank higher (0: relevance only)."),
        ] = None,
        modified_after: ModifiedAfter = None,
        modifiedAfter: ModifiedAfter = None,  # noqa: N803 - the name KiwiFS clients send
        include_superseded: IncludeSuperseded = False,
    ) -> str:
        """Full-text search over every markdown file, best matches first. Forgotten pages are
        left out unless include_superseded."""
        if not query.strip():
            raise UsageError("query is required")
        found = self.kb.search(
            query,
            limit=limit + 1,
            offset=offset,
            path_prefix=path_prefix,
            scope=scope,
            modified_after=modified_after or modifiedAfter,
            include_superseded=include_superseded,
            recency_weight=recency_weight,
        )
        return render_search(found.results, limit, offset, path_prefix)

    def kiwi_search_semantic(
        self,
        query: Annotated[str, Field(description="What you are looking for, in plain words.")],
        limit: Annotated[
            int,
            number(MCP_SEMANTIC_LIMIT),
            NUMBER,
            Field(description="How many pages (default 5, max 50)."),
        ] = MCP_SEMANTIC_LIMIT.default,
        threshold: Annotated[
            float | None,
            fraction(-1.0, 1.0),
            Field(description="Minimum similarity (cosine, -1 to 1), e.g. 0.3."),
        ] = None,
        scope: Scope = None,
        path_prefix: PathPrefix = None,
        include_superseded: IncludeSuperseded = False,
    ) -> str:
        """Find pages by meaning rather than exact words (vector similarity of embeddings).
        Needs [search.vector] enabled in the knowledge base's config."""
        if not query.strip():
            raise UsageError("query is required")
        found = self.kb.semantic_search(
            query,
            limit=limit,
            path_prefix=path_prefix,
            scope=scope,
            include_superseded=include_superseded,
            threshold=threshold,
        )
        return render_semantic(found)

    def kiwi_search_hybrid(
        self,
        query: Annotated[str, Field(description="Words or a question to look for.")],
        limit: Annotated[
            int,
            number(MCP_HYBRID_LIMIT),
            NUMBER,
            Field(description="How many pages (default 15, max 50)."),
        ] = MCP_HYBRID_LIMIT.default,
        path_prefix: PathPrefix = None,
        scope: Scope = None,
        include_superseded: IncludeSuperseded = False,
    ) -> str:
        """Keyword and semantic search combined (reciprocal rank fusion); each result says
        whether both, the keyword side only or the semantic side only found it."""
        if not query.strip():
            raise UsageError("query is required")
        found = self.kb.hybrid_search(
            query,
            limit=limit,
            path_prefix=path_prefix,
            scope=scope,
            include_superseded=include_superseded,
        )
        return render_hybrid(found)

    def kiwi_query_meta(
        self,
        filters: Annotated[
            list[str] | dict[str, MetaValue],
            Field(
                description="AND filters like '$.status=draft' or '$.tags[*]=ml', or an object "
                "{field: value} of equalities."
            ),
        ] = [],  # noqa: B006 - pydantic copies defaults
        or_: Annotated[
            list[str], Field(alias="or", description="Filters of which at least one must match.")
        ] = [],  # noqa: B006
        paths: Annotated[
            list[str], Field(description="Only these files (filters are then ignored).")
        ] = [],  # noqa: B006
        sort: Annotated[str | None, Field(description="Field to sort by, e.g. '$.date'.")] = None,
        order: Annotated[Literal["asc", "desc"], Field(description="Sort order.")] = "asc",
        limit: Annotated[
            int,
            number(MCP_META_LIMIT),
            NUMBER,
            Field(description="Files per page (default 20, max 200)."),
        ] = MCP_META_LIMIT.default,
        offset: Offset = 0,
        include_superseded: IncludeSuperseded = False,
    ) -> str:
        """Find files by frontmatter values; lists each file with its frontmatter. Forgotten
        pages are left out unless include_superseded."""
        found = self.kb.meta(
            where=filters,
            or_=or_,
            sort=sort,
            order=order,
            limit=limit,
            offset=offset,
            paths=paths or None,
            include_superseded=include_superseded,
        )
        return render_meta(found)

    def kiwi_brief(
        self,
        query: Annotated[str, Field(description="What the agent needs context about.")],
        budget_tokens: Annotated[
            int,
            number(MCP_BRIEF_BUDGET),
            NUMBER,
            Field(description="Token budget of the pack (default 4000; 1 token ~ 4 characters)."),
        ] = MCP_BRIEF_BUDGET.default,
        max_pages: Annotated[
            int,
            number(MCP_BRIEF_PAGES),
            NUMBER,
            Field(description="At most this many pages (default 20, max 100)."),
        ] = MCP_BRIEF_PAGES.default,
        path_prefix: PathPrefix = None,
        scope: Scope = None,
        include_superseded: IncludeSuperseded = False,
        format: Annotated[  # noqa: A002 - the argument name clients send
            Literal["text", "json"], Field(description="'text' (default) or 'json'.")
        ] = "text",
    ) -> str:
        """A context pack for your prompt: the best matching pages, whole, best first, within a
        token budget, then a list of the pages left out (with their token cost) to read by path
        if needed. Forgotten pages are left out unless include_superseded."""
        brief = self.kb.brief(
            query,
            budget_tokens=budget_tokens,
            max_pages=max_pages,
            path_prefix=path_prefix,
            scope=scope,
            include_superseded=include_superseded,
        )
        hint = "read them with kiwi_read if needed"
        return in_format(brief, format, lambda: render_brief(brief, hint))
