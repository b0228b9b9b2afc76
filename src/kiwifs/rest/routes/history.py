"""The REST routes of history: a file's versions, one version, a diff between two, who last
changed each line, and the changes feed of the whole root (``/api/kiwi/versions``,
``/version``, ``/diff``, ``/blame``, ``/changes``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import grant_of, optional_int, run
from kiwifs.rest.openapi import errors, success
from kiwifs.server.access import answer_prefix, check_path


def history_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get("/versions", responses=errors(400))
    async def versions(request: Request, path: str = Query(...)) -> dict[str, Any]:
        check_path(grant_of(request), path, root=kb.root)
        items = await run(kb.versions, path)
        return {
            "path": path.lstrip("/"),
            "versions": [
                {"hash": v.hash, "date": v.date, "author": v.author, "message": v.message}
                for v in items
            ],
        }

    @api.get("/version", responses={**success("text/markdown"), **errors(400, 404)})
    async def version(
        request: Request, path: str = Query(...), version: str = Query(...)
    ) -> Response:
        check_path(grant_of(request), path, root=kb.root)
        data = await run(kb.version, path, version)
        return Response(data, media_type="text/markdown; charset=utf-8")

    @api.get("/diff", responses={**success("text/plain"), **errors(400, 404)})
    async def diff(
        request: Request,
        path: str = Query(...),
        from_: str = Query(..., alias="from"),
        to: str = Query(...),
    ) -> PlainTextResponse:
        check_path(grant_of(request), path, root=kb.root)
        text = await run(kb.diff, path, from_, to)
        return PlainTextResponse(text)

    @api.get("/blame", responses=errors(400, 404))
    async def blame(request: Request, path: str = Query(...)) -> dict[str, Any]:
        """KiwiFS's answer, with ``total_lines`` and ``truncated`` for a file cut at the bound."""
        check_path(grant_of(request), path, root=kb.root)
        lines, total = await run(kb.blame, path)
        return {
            "path": path.lstrip("/"),
            "lines": [
                {"line": b.line, "author": b.author, "date": b.date, "hash": b.hash, "text": b.text}
                for b in lines
            ],
            "total_lines": total,
            "truncated": total > len(lines),
        }

    @api.get("/changes", responses=errors(400))
    async def changes(
        request: Request, since: str | None = None, limit: str | None = None
    ) -> dict[str, Any]:
        items = await run(
            kb.changes,
            since or None,
            optional_int("limit", limit),
            path_prefix=answer_prefix(grant_of(request)),
        )
        return {
            "changes": [
                {
                    "seq": c.seq,
                    "path": c.path,
                    "action": c.action,
                    "actor": c.actor,
                    "timestamp": c.timestamp,
                }
                for c in items
            ],
            "last_seq": items[0].seq if items else (since or ""),
        }
