"""The REST routes of KiwiFS's file claims: claim a task file (``POST /api/kiwi/claim``), release
it (``DELETE``), list every live claim (``GET /api/kiwi/claims``, episodes' claims included).
A claim without a holder is the request's actor's.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import actor_of, grant_of, read_model, run
from kiwifs.rest.openapi import ACTOR, errors, extra, json_body
from kiwifs.server.access import check_path
from kiwifs.server.grants import path_allowed
from kiwifs.server.payloads import ClaimRequest


def claim_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.post(
        "/claim",
        responses=errors(400, 404, 409, 413),
        openapi_extra=extra(ACTOR, body=json_body(ClaimRequest)),
    )
    async def claim(request: Request) -> dict[str, str]:
        body = await read_model(request, ClaimRequest)
        check_path(grant_of(request), body.path, root=kb.root)
        holder = body.holder if body.holder and body.holder.strip() else actor_of(request)
        made = await run(kb.claim, body.path, holder, body.lease_duration)
        return made.to_json()

    @api.delete("/claim", responses=errors(400, 404, 409), openapi_extra=extra(ACTOR))
    async def release(
        request: Request, path: str = Query(...), holder: str | None = None
    ) -> dict[str, str]:
        check_path(grant_of(request), path, root=kb.root)
        who = holder if holder and holder.strip() else actor_of(request)
        rel = await run(kb.release, path, who)
        return {"released": rel, "holder": who.strip()}

    @api.get("/claims")
    async def claims(request: Request) -> dict[str, Any]:
        grant = grant_of(request)
        live = await run(kb.claims_list)  # every live claim, no cut: filtering here is whole
        return {"claims": [c.to_json() for c in live if path_allowed(grant, c.path)]}
