"""The REST routes of the navigation reads, as KiwiFS answers them: ``GET /api/kiwi/peek`` (a
glance at a page), ``GET /api/kiwi/section`` (one heading's section) and ``GET /api/kiwi/context``
(what an agent reads first), and the link index's answers: ``GET /api/kiwi/backlinks``,
``GET /api/kiwi/links/broken`` and ``GET /api/kiwi/links/orphans``. Peek, section and backlinks
are path routes: a key with a prefix reads only under it, and the link answers (a peek's
``links_in`` too) are filtered by the prefix inside the index, so such a key never learns of a
link source or target outside it. The context is made of root files (``SCHEMA.md``,
``index.md``, ``.kiwi/``), which no prefix holds, so a key with a prefix is refused it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import grant_of, run
from kiwifs.rest.openapi import errors
from kiwifs.server.access import answer_prefix, check_path, refuse_prefixed


def navigation_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get("/peek", responses=errors(400, 403, 404))
    async def peek(request: Request, path: str = Query(...)) -> dict[str, Any]:
        grant = grant_of(request)
        check_path(grant, path, root=kb.root)
        return (await run(kb.peek, path, answer_prefix(grant) or "")).to_json()

    @api.get("/backlinks", responses=errors(400, 403))
    async def backlinks(request: Request, path: str = Query(...)) -> dict[str, Any]:
        """The pages linking to ``path``, one entry per source and kind of link."""
        grant = grant_of(request)
        check_path(grant, path, root=kb.root)
        found = await run(kb.backlinks, path, answer_prefix(grant) or "")
        return {"path": path, "backlinks": [link.to_json() for link in found]}

    @api.get("/links/broken", responses=errors(403))
    async def broken_links(request: Request) -> dict[str, Any]:
        """Every link that resolves to no file (ours; KiwiFS reports them in its analytics)."""
        found = await run(kb.broken_links, answer_prefix(grant_of(request)) or "")
        return {"broken": [link.to_json() for link in found], "count": len(found)}

    @api.get("/links/orphans", responses=errors(403))
    async def orphans(request: Request) -> dict[str, Any]:
        """The pages no other file links to, episodes left out (ours)."""
        found = await run(kb.orphans, answer_prefix(grant_of(request)) or "")
        return {"orphans": found, "count": len(found)}

    @api.get("/section", responses=errors(400, 403, 404))
    async def section(
        request: Request,
        path: str = Query(...),
        heading: str | None = None,
        index: int | None = None,
    ) -> dict[str, Any]:
        check_path(grant_of(request), path, root=kb.root)
        return (await run(kb.section, path, heading or None, index)).to_json()

    @api.get("/context", responses=errors(403))
    async def context(request: Request) -> dict[str, Any]:
        refuse_prefixed(grant_of(request), "the context (root files)")
        return (await run(kb.context)).to_json()
