"""Git over HTTP: each space's repository served read-only with git's smart HTTP protocol, the
transport of replicas (a replica is a git clone that follows its primary).

``/api/kiwi/git/…`` is the default space's repository, ``/api/kiwi/NAME/git/…`` space NAME's
(the spaces' routing strips ``/NAME`` as for every route), so ``git clone
http://HOST:PORT/api/kiwi/git`` clones the default root. Behind the same keys as every route:
the fetch's ``POST git-upload-pack`` only reads (:data:`kiwifs.server.access.READ_POSTS`), a key
with a prefix is refused (:func:`kiwifs.server.access.check_clone`). What is served and how git
runs is :mod:`kiwifs.server.gitserve`'s; this module only translates HTTP to CGI and back. Not
in the OpenAPI document: git's protocol is no JSON API (docs/rest.md describes it).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import grant_of
from kiwifs.server import gitserve
from kiwifs.server.access import check_clone

GIT_PREFIX = "/git"


def git_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.api_route(GIT_PREFIX + "/{path:path}", methods=["GET", "POST"], include_in_schema=False)
    async def git(request: Request, path: str) -> StreamingResponse:
        check_clone(grant_of(request))
        answer = await gitserve.answer(
            kb.root,
            request.method,
            path,
            request.url.query,
            request.headers,
            request.client.host if request.client else None,
            request.stream(),
        )
        return StreamingResponse(
            answer.body(), status_code=answer.status, headers=dict(answer.headers)
        )
