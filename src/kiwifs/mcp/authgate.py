"""The bearer-key gate in front of ``/mcp``: one class for both places MCP is served over HTTP.

``kiwifs mcp --http`` (:mod:`kiwifs.mcp.server`) and the lazy mount inside ``kiwifs serve``
(:mod:`kiwifs.mcp.lazy`) put the same gate before the SDK's app. It lives apart from both so
that each imports it downward: the lazy mount loads the server module only once the SDK is wanted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from kiwifs.errors import Forbidden, Unauthorized
from kiwifs.server.access import GRANT_KEY, mcp_refusal

Auth = Callable[[Request], Awaitable[None]]


class AuthGate:
    """Refuse HTTP requests that fail ``check`` with 401 ``{"error": …}`` (fails closed), or
    403 when the key may not use this space or its scope is too low, or when its grant is one
    the tools cannot honour (:func:`kiwifs.server.access.mcp_refusal`)."""

    def __init__(self, app: ASGIApp, check: Auth) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                await self.check(Request(scope))
            except Unauthorized as exc:
                response = JSONResponse(
                    {"error": exc.message}, 401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
            except Forbidden as exc:
                await JSONResponse({"error": exc.message}, 403)(scope, receive, send)
                return
            refusal = mcp_refusal(scope.get(GRANT_KEY))
            if refusal:
                await JSONResponse({"error": refusal}, 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)
