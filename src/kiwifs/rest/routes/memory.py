"""The REST routes of episodic memory under ``/api/kiwi/memory/``: the report, merge, remember,
forget and restore, the consolidation queue (claim and release a batch of episodes), the check
and lineage. Bodies are read into the models of :mod:`kiwifs.server.payloads`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from kiwifs.knowledge import Knowledge
from kiwifs.memory.queue import Released
from kiwifs.rest.http import (
    KiwiJSONResponse,
    actor_of,
    body_actor,
    grant_of,
    optional_int,
    quoted,
    read_model,
    run,
)
from kiwifs.rest.openapi import ACTOR, IF_MATCH, PROVENANCE, errors, extra, json_body
from kiwifs.server.access import answer_prefix, check_path, refuse_prefixed
from kiwifs.server.payloads import (
    ForgetRequest,
    MemoryClaimRequest,
    MemoryReleaseRequest,
    MergeRequest,
    RememberRequest,
    RestoreRequest,
)


def memory_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get("/memory/report", responses=errors(400))
    async def memory_report(
        request: Request,
        episodes_prefix: str | None = None,
        limit: str | None = None,
        offset: str | None = None,
    ) -> KiwiJSONResponse:
        # an empty value (``?limit=&offset=``) means "not given", like an empty prefix
        report = await run(
            kb.memory_report,
            episodes_prefix or None,
            optional_int("limit", limit),
            optional_int("offset", offset) or 0,
            path_prefix=answer_prefix(grant_of(request)),
        )
        return KiwiJSONResponse(report.to_json())

    @api.post(
        "/memory/merge",
        responses=errors(400, 409, 413),
        openapi_extra=extra(ACTOR, IF_MATCH, body=json_body(MergeRequest)),
    )
    async def memory_merge(request: Request) -> KiwiJSONResponse:
        body = await read_model(request, MergeRequest)
        refuse_prefixed(grant_of(request), "merge")  # it cites episodes by id, anywhere
        result = await run(
            kb.merge,
            body.path,
            body.merge_entries(),
            actor=actor_of(request),
            if_match=request.headers.get("if-match"),
            worker=body.worker,
            force=body.force,
        )
        return KiwiJSONResponse(result.to_json(), headers={"ETag": quoted(result.etag)})

    @api.post(
        "/memory/remember",
        status_code=201,
        responses=errors(400, 409, 413),
        openapi_extra=extra(ACTOR, PROVENANCE, body=json_body(RememberRequest)),
    )
    async def memory_remember(request: Request) -> KiwiJSONResponse:
        body = await read_model(request, RememberRequest)
        refuse_prefixed(grant_of(request), "remember")  # the core picks the episode's path
        result = await run(
            kb.remember,
            body.content,
            episode_id=body.episode_id,
            scope=body.scope,
            tags=body.tags,
            actor=body_actor(request, body.actor),
            provenance=body.provenance or request.headers.get("x-provenance"),
            title=body.title,
        )
        payload = {"path": result.path, "episode_id": result.episode_id, "etag": result.etag}
        return KiwiJSONResponse(payload, status_code=201, headers={"ETag": quoted(result.etag)})

    @api.post(
        "/memory/forget",
        responses=errors(400, 404, 409, 413),
        openapi_extra=extra(ACTOR, IF_MATCH, body=json_body(ForgetRequest)),
    )
    async def memory_forget(request: Request) -> KiwiJSONResponse:
        body = await read_model(request, ForgetRequest)
        check_path(grant_of(request), body.path, root=kb.root)
        if body.superseded_by:
            check_path(grant_of(request), body.superseded_by, root=kb.root)
        result = await run(
            kb.forget,
            body.path,
            body.reason,
            body.superseded_by,
            actor=actor_of(request),
            if_match=request.headers.get("if-match"),
        )
        return KiwiJSONResponse(result.to_json(), headers={"ETag": quoted(result.etag)})

    @api.post(
        "/memory/restore",
        responses=errors(400, 404, 409, 413),
        openapi_extra=extra(ACTOR, IF_MATCH, body=json_body(RestoreRequest)),
    )
    async def memory_restore(request: Request) -> KiwiJSONResponse:
        body = await read_model(request, RestoreRequest)
        check_path(grant_of(request), body.path, root=kb.root)
        result = await run(
            kb.restore,
            body.path,
            actor=actor_of(request),
            if_match=request.headers.get("if-match"),
        )
        return KiwiJSONResponse(result.to_json(), headers={"ETag": quoted(result.etag)})

    @api.post(
        "/memory/claim",
        responses=errors(400, 413),
        openapi_extra=extra(body=json_body(MemoryClaimRequest)),
    )
    async def memory_claim(request: Request) -> KiwiJSONResponse:
        body = await read_model(request, MemoryClaimRequest)
        refuse_prefixed(grant_of(request), "the consolidation queue")
        batch = await run(
            kb.claim_episodes,
            body.worker,
            body.limit,
            body.lease,
            body.episodes_prefix or None,
            body.with_content,
        )
        return KiwiJSONResponse(batch.to_json())

    @api.post(
        "/memory/release",
        responses=errors(400, 404, 409, 413),
        openapi_extra=extra(body=json_body(MemoryReleaseRequest)),
    )
    async def memory_release(request: Request) -> dict[str, Any]:
        body = await read_model(request, MemoryReleaseRequest)
        refuse_prefixed(grant_of(request), "the consolidation queue")
        released = await run(kb.release_episodes, body.worker, body.paths)
        return Released.of(body.worker, released).to_json()

    @api.get("/memory/check", responses=errors(400))
    async def memory_check(
        request: Request, episodes_prefix: str | None = None
    ) -> KiwiJSONResponse:
        refuse_prefixed(grant_of(request), "memory check")
        check = await run(kb.memory_check, episodes_prefix or None)
        return KiwiJSONResponse(check.to_json())

    @api.get("/memory/lineage", responses=errors(400, 404))
    async def memory_lineage(
        request: Request,
        path: str | None = None,
        episode_id: str | None = None,
        episodes_prefix: str | None = None,
    ) -> KiwiJSONResponse:
        refuse_prefixed(grant_of(request), "lineage")  # it names pages anywhere
        lineage = await run(kb.lineage, path, episode_id=episode_id, prefix=episodes_prefix or None)
        return KiwiJSONResponse(lineage.to_json())
