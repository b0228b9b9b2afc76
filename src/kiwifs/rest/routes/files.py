"""The REST routes of files and folders: read (conditional GET), write, append, delete, bulk
write, rename and the frontmatter patch under ``/api/kiwi/file``, ``/bulk`` and ``/rename``
(``/file/frontmatter``); the folder tree at
``/api/kiwi/tree``. Writes answer the new ETag, reads honour ``If-None-Match`` and
``If-Modified-Since``.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from kiwifs.base.limits import MAX_FILE_BYTES
from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import (
    KiwiJSONResponse,
    actor_of,
    body_actor,
    grant_of,
    quoted,
    read_body,
    read_json,
    read_model,
    run,
)
from kiwifs.rest.openapi import (
    ACTOR,
    IF_MATCH,
    IF_NONE_MATCH,
    PROVENANCE,
    errors,
    extra,
    header,
    json_body,
    raw_body,
    success,
)
from kiwifs.server.access import answer_prefix, check_path
from kiwifs.server.payloads import BulkRequest, FrontmatterPatchRequest, RenameRequest, parse
from kiwifs.writes.preconditions import etag_list

_BINARY = "application/octet-stream"
MERGE_PATCH = "application/merge-patch+json"  # a frontmatter patch sent bare, not in "fields"
# a body the core would refuse anyway, refused before it is read in full
_TOO_LARGE = f"the body is over the {MAX_FILE_BYTES >> 20} MiB limit for a file"


def file_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get(
        "/file",
        responses={
            **success("text/markdown", "application/octet-stream", "application/json"),
            304: {"description": "Not modified (`If-None-Match` / `If-Modified-Since`)."},
            **errors(400, 404),
        },
        openapi_extra=extra(
            header("If-None-Match", "304 when it is `*` or lists the current ETag."),
            header("If-Modified-Since", "304 when the file is not newer."),
        ),
    )
    async def get_file(
        request: Request, path: str = Query(...), metadata_only: bool = False
    ) -> Response:
        check_path(grant_of(request), path, root=kb.root)
        doc = await run(kb.read, path)
        headers = {
            "ETag": quoted(doc.etag),
            "Last-Modified": doc.last_modified,
            "Cache-Control": "no-cache",
        }
        if _not_modified(request, doc.etag, doc.mtime):
            return Response(status_code=304, headers=headers)
        if metadata_only:
            fm = await run(kb.frontmatter, path)
            return KiwiJSONResponse(fm, headers=headers)
        media = "text/markdown; charset=utf-8" if doc.path.endswith(".md") else _BINARY
        return Response(doc.content, media_type=media, headers=headers)

    @api.put(
        "/file",
        responses=errors(400, 409, 413),
        openapi_extra=extra(
            ACTOR, IF_MATCH, IF_NONE_MATCH, PROVENANCE, body=raw_body("The file's new content.")
        ),
    )
    async def put_file(request: Request, path: str = Query(...)) -> KiwiJSONResponse:
        check_path(grant_of(request), path, root=kb.root)
        body = await read_body(request, MAX_FILE_BYTES, _TOO_LARGE)
        result = await run(
            kb.write,
            path,
            body,
            actor=actor_of(request),
            if_match=request.headers.get("if-match"),
            provenance=request.headers.get("x-provenance"),
            if_none_match=request.headers.get("if-none-match"),
        )
        return KiwiJSONResponse(
            {"path": result.path, "etag": result.etag}, headers={"ETag": quoted(result.etag)}
        )

    @api.patch(
        "/file/frontmatter",
        responses=errors(400, 404, 409, 413),
        openapi_extra=extra(ACTOR, IF_MATCH, PROVENANCE, body=json_body(FrontmatterPatchRequest)),
    )
    async def patch_frontmatter(request: Request, path: str = Query(...)) -> KiwiJSONResponse:
        """KiwiFS's body ``{"fields": {...}}``; with ``Content-Type:
        application/merge-patch+json`` the whole body is the patch (RFC 7386's own type)."""
        check_path(grant_of(request), path, root=kb.root)
        body = await read_json(request)
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media == MERGE_PATCH:
            patch = body
        else:
            patch = parse(FrontmatterPatchRequest, body).fields
        result = await run(
            kb.patch_frontmatter,
            path,
            patch,
            actor=actor_of(request),
            if_match=request.headers.get("if-match"),
            provenance=request.headers.get("x-provenance"),
        )
        return KiwiJSONResponse(
            {"path": result.path, "etag": result.etag}, headers={"ETag": quoted(result.etag)}
        )

    @api.delete("/file", responses=errors(400, 404, 409), openapi_extra=extra(ACTOR, IF_MATCH))
    async def delete_file(request: Request, path: str = Query(...)) -> dict[str, str]:
        check_path(grant_of(request), path, root=kb.root)
        rel = await run(
            kb.delete, path, actor=actor_of(request), if_match=request.headers.get("if-match")
        )
        return {"deleted": rel}

    @api.post(
        "/file/append",
        responses=errors(400, 409, 413),
        openapi_extra=extra(ACTOR, IF_MATCH, body=raw_body("The text to append.")),
    )
    async def append_file(
        request: Request, path: str = Query(...), separator: str = "\n"
    ) -> KiwiJSONResponse:
        check_path(grant_of(request), path, root=kb.root)
        body = await read_body(request, MAX_FILE_BYTES, _TOO_LARGE)
        result = await run(
            kb.append,
            path,
            body,
            actor=actor_of(request),
            separator=separator,
            if_match=request.headers.get("if-match"),
        )
        return KiwiJSONResponse(
            {"path": result.path, "etag": result.etag}, headers={"ETag": quoted(result.etag)}
        )

    @api.post(
        "/bulk",
        responses=errors(400, 413),
        openapi_extra=extra(ACTOR, PROVENANCE, body=json_body(BulkRequest)),
    )
    async def bulk(request: Request) -> dict[str, Any]:
        body = await read_model(request, BulkRequest)
        check_path(grant_of(request), *(f.path for f in body.files), root=kb.root)
        results = await run(
            kb.bulk_write,
            [(f.path, f.content) for f in body.files],
            actor=body_actor(request, body.actor),
            provenance=request.headers.get("x-provenance"),
            message=body.message or None,
        )
        return {"count": len(results), "files": [{"path": r.path, "etag": r.etag} for r in results]}

    async def moved(request: Request, move: Any, update_links: bool) -> dict[str, Any]:
        """A rename's body read, both paths checked against the key, the move made; KiwiFS's
        answer, ``from`` (and a folder's ``to``) as the client sent them."""
        body = await read_model(request, RenameRequest)
        grant = grant_of(request)
        check_path(grant, body.from_, body.to, root=kb.root)
        prefix = answer_prefix(grant) or ""
        done = await run(move, body.from_, body.to, actor_of(request), update_links, prefix)
        return {**done.to_json(), "from": body.from_}

    @api.post(
        "/rename",
        responses=errors(400, 404, 409, 413),
        openapi_extra=extra(ACTOR, body=json_body(RenameRequest)),
    )
    async def rename(request: Request, update_links: bool = True) -> dict[str, Any]:
        """Move a file; the links to it are rewritten in the same commit unless
        ``update_links=false`` (``updated_links``: the files whose links were)."""
        return await moved(request, kb.rename, update_links)

    @api.post(
        "/rename-dir",
        responses=errors(400, 403, 404, 409, 413),
        openapi_extra=extra(ACTOR, body=json_body(RenameRequest)),
    )
    async def rename_dir(request: Request, update_links: bool = True) -> dict[str, Any]:
        """Move every file under the folder ``from`` to the new folder ``to``, one commit; the
        links to the moved files are rewritten (``update_links=false``: left)."""
        return await moved(request, kb.rename_dir, update_links)

    @api.get("/tree", responses=errors(400, 404))
    async def tree(request: Request, path: str = "/") -> dict[str, Any]:
        check_path(
            grant_of(request), path, root=kb.root
        )  # a prefixed key asks for its own folder's tree
        node = await run(kb.tree, path)
        return node.to_json()


def _not_modified(request: Request, etag: str, mtime: float) -> bool:
    inm = request.headers.get("if-none-match")
    if inm is not None:
        tags = etag_list(inm)
        return "*" in tags or etag in tags
    ims = request.headers.get("if-modified-since")
    if ims:
        try:
            since = parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError):
            return False
        return int(mtime) <= since
    return False
