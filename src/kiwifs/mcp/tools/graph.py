"""The MCP tools of graph navigation over the link index, with KiwiFS's names and answers:
``kiwi_graph_walk`` (one hop from a page, JSON), ``kiwi_graph_path`` (the shortest chain of links
between two pages, text) and ``kiwi_health_check`` (one page's health, text). Superseded pages
are marked in each. MCP refuses keys with a prefix (:func:`kiwifs.server.access.mcp_refusal`),
so these read the whole root.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import render_graph_path, render_health
from kiwifs.mcp.tools.common import Path_


class GraphTools:
    """Tools over the link graph of one root (``kb``, set by :class:`kiwifs.mcp.tools.Tools`)."""

    kb: Knowledge

    def kiwi_graph_walk(
        self,
        path: Path_,
        include_siblings: Annotated[
            bool,
            Field(
                description="Include folder siblings and tag siblings (default true). Set "
                "false for a faster answer when you only need links."
            ),
        ] = True,
    ) -> str:
        """One-hop knowledge graph traversal from a page: where its links lead (links_out),
        who links to it (links_in), sibling pages (same folder or shared tags), its hub score
        and degrees, its broken links, and which of these pages are superseded, as JSON. Use it
        to explore connections."""
        found = self.kb.graph_walk(path, include_siblings)
        return json.dumps(found.to_json(), indent=2, ensure_ascii=False)

    def kiwi_graph_path(
        self,
        from_: Annotated[str, Field(alias="from", description="Source page path.")],
        to: Annotated[str, Field(description="Target page path.")],
    ) -> str:
        """Find the shortest path between two pages following their links (wiki, markdown,
        typed and memory links). Returns the sequence of pages from source to target. Use it to
        understand how knowledge connects."""
        found = self.kb.graph_path(from_, to)
        return render_graph_path(from_, to, found.path, set(found.superseded))

    def kiwi_health_check(self, path: Path_) -> str:
        """Health of one page: word count, link count, backlink count, days since update,
        quality score, and any issues (empty page, missing owner/status, stale, no review
        date, broken links, decision language, orphan, duplicate title, contradiction,
        superseded)."""
        return render_health(self.kb.health_check(path).to_json())
