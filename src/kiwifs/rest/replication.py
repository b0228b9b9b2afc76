"""Replication over REST: ``GET /api/replication``, writes on a replica forwarded to its
primary, ``X-Kiwi-Commit`` on every write answer and ``X-Kiwi-Min-Commit`` on reads.

The rules are the core's (:mod:`kiwifs.server.replica`: what is applied, what a replica is) and
the access table's (:func:`kiwifs.server.access.needed_scope`: which requests write); this
module translates them to HTTP:

* on a **replica**, a request that writes (scope ``write`` or more under ``/api/kiwi``) is sent
  to the primary as it came (method, path, query, body and every header but the hop-by-hop
  ones, the caller's ``Authorization`` included); the primary's answer is returned once its
  ``X-Kiwi-Commit`` is applied here (at most ``Tuning.apply_wait`` seconds), so the caller reads its
  own write on this replica at once;
* on a **primary**, a write's 2xx answer carries ``X-Kiwi-Commit``: the commit HEAD names once
  the write returned, which holds it (with ``--async-commit`` a write returns before its commit,
  and the header is left out while commits are pending);
* a request with ``X-Kiwi-Min-Commit: SHA`` waits until that commit is applied on this node (at
  most ``Tuning.min_commit_wait`` seconds), else ``503`` with ``Retry-After``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiwifs.errors import UsageError
from kiwifs.rest.http import KiwiJSONResponse, read_model, run
from kiwifs.rest.openapi import API_PREFIX, errors, extra, json_body
from kiwifs.rest.starting import answer, header
from kiwifs.server.access import REPLICATION_PATH, needed_scope
from kiwifs.server.auth import bearer_key
from kiwifs.server.grants import Scope as KeyScope
from kiwifs.server.payloads import AckRequest, DemoteRequest, PromoteRequest
from kiwifs.server.replica import committed_head, follower_of, reached

if TYPE_CHECKING:
    from kiwifs.knowledge import Knowledge
    from kiwifs.server.lifecycle import Serving
    from kiwifs.server.replica import Follower

COMMIT_HEADER = b"x-kiwi-commit"
MIN_COMMIT_HEADER = b"x-kiwi-min-commit"
FORWARD_TIMEOUT = 60.0
MAX_FORWARD_BODY = 64 * 1024 * 1024
# reads only the primary can answer: the claims live in its .kiwi/state, never in git
PRIMARY_READS = frozenset({API_PREFIX + "/claims"})
# headers of one connection, not of the request: never forwarded either way
_HOP = frozenset(
    {
        b"host",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authorization",
        b"content-length",
    }
)


def replication_routes(
    app: FastAPI,
    kb: Knowledge,
    serving: Serving,
    auth: Callable[[Request], Awaitable[None]],
) -> None:
    """``GET /api/replication``: this node's role, its primary, the commit applied and the lag;
    ``POST /api/replication/promote`` (admin): a replica becomes the primary."""
    api = APIRouter(
        prefix=REPLICATION_PATH,
        dependencies=[Depends(auth)],
        responses=errors(401, 403, 500, 503),
        default_response_class=KiwiJSONResponse,
    )

    @api.post(
        "/promote", responses=errors(400), openapi_extra=extra(body=json_body(PromoteRequest))
    )
    async def promote(request: Request) -> KiwiJSONResponse:
        empty = request.headers.get("content-length", "0") == "0"  # no body: none needed
        body = PromoteRequest() if empty else await read_model(request, PromoteRequest)
        await run(serving.promote, body.url)
        return KiwiJSONResponse(await replication())

    @api.post(
        "/demote", responses=errors(400, 503), openapi_extra=extra(body=json_body(DemoteRequest))
    )
    async def demote(request: Request) -> KiwiJSONResponse:
        """A primary told by the node promoted in its place to follow it."""
        body = await read_model(request, DemoteRequest)
        key = bearer_key(request.headers.get("authorization"))
        await run(serving.demote, body.primary, key)
        return KiwiJSONResponse(await replication())

    @api.post("/ack", responses=errors(400, 413), openapi_extra=extra(body=json_body(AckRequest)))
    async def ack(request: Request) -> dict[str, Any]:
        """A replica reports the newest commit it holds (what ``acks = 1`` waits for)."""
        body = await read_model(request, AckRequest)
        if serving.follower is not None:
            raise UsageError("this node is a replica: acknowledgements go to the primary")
        serving.acks.ack(body.replica, body.commit)
        return {"acknowledged": body.commit}

    @api.get("")
    async def replication() -> dict[str, Any]:
        follower = serving.follower
        if follower is not None:
            return follower.status()
        fence = serving.step_down.status() if serving.step_down is not None else {}
        head = await run(lambda: kb.git.head() if kb.git is not None else None)
        return {
            "role": "primary",
            "primary": None,
            "applied_commit": head,
            "primary_commit": head,
            "lag_seconds": 0.0,
            "state": "primary",
            "acks": kb.config.replication.acks,
            "replicas": serving.acks.replicas(),
            **fence,
        }

    app.router.routes.extend(api.routes)


class ReplicationMiddleware:
    """Forwards a replica's writes, stamps a primary's, holds reads for ``X-Kiwi-Min-Commit``."""

    def __init__(self, app: ASGIApp, kb: Knowledge, serving: Serving) -> None:
        self.app = app
        self.kb = kb
        self.serving = serving

    @property
    def follower(self) -> Follower | None:
        """The root's follower while it is a replica (a promotion ends it; a space's is the
        registry's, not this app's ``Serving``)."""
        return follower_of(self.kb)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        writes = needed_scope(scope["method"], scope["path"]) >= KeyScope.WRITE
        if self.follower is not None and (writes or scope["path"] in PRIMARY_READS):
            await self._forward(scope, receive, send)
            return
        wanted = header(scope, MIN_COMMIT_HEADER.decode())
        if wanted is not None and not await self._reached(wanted.strip().lower()):
            await answer(
                scope,
                send,
                503,
                {"error": f"commit {wanted.strip()} is not applied on this node yet"},
                {"Retry-After": "1"},
            )
            return
        if writes:
            await self.app(scope, receive, self._stamping(send))
            return
        await self.app(scope, receive, send)

    # -- a primary: X-Kiwi-Commit ------------------------------------------------------------

    def _stamping(self, send: Send) -> Send:
        replaced = False  # the answer became a 503: the app's own body is dropped

        async def stamped(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                head = await anyio.to_thread.run_sync(self._committed_head)
                if head is not None:
                    if not await self._replicated(head.decode()):
                        replaced = True
                        await _unreplicated(send, head)
                        return
                    message["headers"] = [*message.get("headers", []), (COMMIT_HEADER, head)]
            await send(message)

        return stamped

    async def _replicated(self, commit: str) -> bool:
        """With ``[replication] acks = 1``: whether a replica came to hold ``commit`` within
        ``Tuning.ack_wait`` seconds (always true without)."""
        if self.kb.config.replication.acks < 1:
            return True
        return await anyio.to_thread.run_sync(
            self.serving.acks.wait, commit, self.kb.tuning.ack_wait
        )

    def _committed_head(self) -> bytes | None:
        head = committed_head(self.kb)
        return head.encode() if head else None

    # -- X-Kiwi-Min-Commit ---------------------------------------------------------------------

    async def _reached(self, commit: str) -> bool:
        wait = self.kb.tuning.min_commit_wait
        return await anyio.to_thread.run_sync(reached, self.kb, commit, wait)

    # -- a replica: writes forwarded -------------------------------------------------------

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        import httpx

        follower = self.follower
        assert follower is not None
        body = await _read_body(receive)
        if body is None:
            await answer(scope, send, 413, {"error": "request body too large to forward"})
            return
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.lower() not in _HOP
        ]
        url = follower.role.api + scope["path"].removeprefix(API_PREFIX)
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT) as client:
                resp = await client.request(
                    scope["method"],
                    url + (f"?{query}" if query else ""),
                    headers=headers,
                    content=body,
                )
        except httpx.HTTPError as exc:
            await answer(
                scope,
                send,
                503,
                {"error": f"the primary {follower.role.primary} did not answer: {exc}"},
                {"Retry-After": "1"},
            )
            return
        commit = resp.headers.get("x-kiwi-commit")
        if commit and 200 <= resp.status_code < 300:
            await anyio.to_thread.run_sync(follower.wait_for, commit, self.kb.tuning.apply_wait)
        out = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in resp.headers.multi_items()
            if k.lower().encode() not in _HOP and k.lower() != "content-encoding"
        ]
        out.append((b"content-length", str(len(resp.content)).encode()))
        await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
        await send({"type": "http.response.body", "body": resp.content})


async def _unreplicated(send: Send, commit: bytes) -> None:
    """The answer to a write no replica came to hold in time, under ``acks = 1``: it is on the
    primary (its commit named), not acknowledged; a retry of the same write is harmless."""
    body = json.dumps(
        {"error": "written on the primary, but no replica holds it yet: not acknowledged"}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (COMMIT_HEADER, commit),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (``None``: over :data:`MAX_FORWARD_BODY`)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Any = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORWARD_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
