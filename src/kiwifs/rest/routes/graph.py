"""The REST routes of graph navigation over the link index, as KiwiFS names them:
``GET /api/kiwi/graph`` (pages and links, bounded by ``path_prefix`` and ``limit``),
``GET /api/kiwi/graph/walk`` (one hop from a page), ``GET /api/kiwi/graph/path`` (the shortest
chain of links between two pages) and ``GET /api/kiwi/health-check`` (one page's health).

A key with a prefix never learns of a node, edge or step outside it: its prefix (narrowed by a
request's ``path_prefix``) is passed down to the SQL, and every path the request names is
checked against it first. Each route makes one ``Knowledge`` call and answers its ``to_json``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import grant_of, run
from kiwifs.rest.openapi import errors
from kiwifs.server.access import answer_prefix, check_path, listing_prefix


def graph_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get("/graph", responses=errors(400, 403))
    async def graph(
        request: Request, path_prefix: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """The pages under ``path_prefix`` (the first ``limit`` in walk order) and the links
        between them."""
        within = listing_prefix(grant_of(request), path_prefix)
        if within is None:  # the request's prefix and the key's are disjoint: nothing to show
            return {"nodes": [], "edges": [], "truncated": False}
        return (await run(kb.graph, within, limit)).to_json()

    @api.get("/graph/walk", responses=errors(400, 403, 404))
    async def graph_walk(
        request: Request, path: str = Query(...), include_siblings: bool = True
    ) -> dict[str, Any]:
        """One hop from a page: links out, links in and (by default) its siblings."""
        grant = grant_of(request)
        check_path(grant, path, root=kb.root)
        found = await run(kb.graph_walk, path, include_siblings, answer_prefix(grant) or "")
        return found.to_json()

    @api.get("/graph/path", responses=errors(400, 403, 404))
    async def graph_path(
        request: Request,
        from_: str = Query(..., alias="from"),
        to: str = Query(...),
    ) -> dict[str, Any]:
        """The shortest chain of links from ``from`` to ``to``; 404 when there is none."""
        grant = grant_of(request)
        check_path(grant, from_, to, root=kb.root)
        found = await run(kb.graph_path, from_, to, answer_prefix(grant) or "")
        return found.to_json()

    @api.get("/health-check", responses=errors(400, 403, 404))
    async def health_check(request: Request, path: str = Query(...)) -> dict[str, Any]:
        """One page's health: counts, days since its last change, and its issues."""
        grant = grant_of(request)
        check_path(grant, path, root=kb.root)
        return (await run(kb.health_check, path, answer_prefix(grant) or "")).to_json()
