"""The REST routes that manage a server's spaces (KiwiFS's shapes): list them
(``GET /api/spaces``), show one (``GET /api/spaces/NAME``), make one (``POST /api/spaces``, 201)
and delete one (``DELETE /api/spaces/NAME``). Every rule is the registry's
(:mod:`kiwifs.server.spaces`); these routes only translate. They sit on the default space's app,
behind its API key, under ``/api/spaces`` rather than ``/api/kiwi`` as KiwiFS has them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request

from kiwifs.rest.http import KiwiJSONResponse, grant_of, read_model, run
from kiwifs.rest.openapi import errors, extra, json_body
from kiwifs.server.access import decide, reaches, refuse_prefixed
from kiwifs.server.auth import bearer_key
from kiwifs.server.grants import Scope
from kiwifs.server.payloads import SpaceRequest
from kiwifs.server.replica import Role, check_primary_url
from kiwifs.server.spaces import SpaceRegistry

SPACES_PREFIX = "/api/spaces"
_ENTRY: dict[str, Any] = {"content": {"application/json": {"schema": {"type": "object"}}}}


def space_routes(
    app: FastAPI, registry: SpaceRegistry, auth: Callable[[Request], Awaitable[None]]
) -> None:
    """Add the management routes to ``app`` (the default space's), behind ``auth``."""
    api = APIRouter(
        prefix=SPACES_PREFIX,
        dependencies=[Depends(auth)],
        responses=errors(401, 403, 500, 503),
        default_response_class=KiwiJSONResponse,
    )

    @api.get("", responses={200: {"description": "Every space.", **_ENTRY}})
    async def list_spaces(request: Request) -> dict[str, Any]:
        grant = grant_of(request)
        found = await run(registry.listing)  # only the spaces the key reaches are shown
        return {"spaces": [info.to_json() for info in found if reaches(grant, info.name)]}

    @api.get("/{name}", responses={200: {"description": "The space.", **_ENTRY}, **errors(404)})
    async def get_space(request: Request, name: str) -> dict[str, Any]:
        decide(grant_of(request), name, Scope.ADMIN)  # 403 before 404: existence stays hidden
        return (await run(registry.info, name)).to_json()

    @api.post(
        "",
        status_code=201,
        responses={201: {"description": "The new space.", **_ENTRY}, **errors(400, 409, 413)},
        openapi_extra=extra(body=json_body(SpaceRequest)),
    )
    async def create_space(request: Request) -> dict[str, Any]:
        body = await read_model(request, SpaceRequest)
        grant = grant_of(request)
        decide(grant, body.name, Scope.ADMIN)
        refuse_prefixed(grant, "creating a space")
        role = None
        if body.replica_of is not None:
            key = body.replica_key or bearer_key(request.headers.get("authorization"))
            role = Role(check_primary_url(body.replica_of), key, space=body.name)
        return (await run(registry.create, body.name, body.root, role)).to_json()

    deleted: dict[int | str, dict[str, Any]] = {
        200: {"description": 'Deleted: `{"deleted": NAME}`.', **_ENTRY}
    }

    @api.delete("/{name}", responses={**deleted, **errors(400, 404)})
    async def delete_space(request: Request, name: str) -> dict[str, str]:
        grant = grant_of(request)
        decide(grant, name, Scope.ADMIN)
        refuse_prefixed(grant, "deleting a space")
        await run(registry.delete, name)
        return {"deleted": name}

    app.router.routes.extend(api.routes)
