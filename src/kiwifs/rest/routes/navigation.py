"""The REST routes of the navigation reads, as KiwiFS answers them: ``GET /api/kiwi/peek`` (a
glance at a page), ``GET /api/kiwi/section`` (one heading's section) and ``GET /api/kiwi/context``
(what an agent reads first). Peek and section are path routes: a key with a prefix reads only
under it. The context is made of root files (``SCHEMA.md``, ``index.md``, ``.kiwi/``), which no
prefix holds, so a key with a prefix is refused it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import grant_of, run
from kiwifs.rest.openapi import errors
from kiwifs.server.access import check_path, refuse_prefixed


def navigation_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get("/peek", responses=errors(400, 403, 404))
    async def peek(request: Request, path: str = Query(...)) -> dict[str, Any]:
        check_path(grant_of(request), path, root=kb.root)
        return (await run(kb.peek, path)).to_json()

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
