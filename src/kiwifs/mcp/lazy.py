"""MCP at ``/mcp`` inside ``kiwifs serve``, loaded once the server is up.

The MCP SDK and its schema types are most of the server's import time (seconds on a busy
machine), and many servers never see an MCP request. So ``serve`` imports only this module; the
SDK is imported in a worker thread after the server starts answering, and its session manager
then runs inside the REST app's lifespan (the SDK runs its request tasks in a task group it
owns), behind the REST app's own auth check. An MCP request that arrives before that waits
for it; one that arrives after a failed load gets a 503 with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.authgate import Auth, AuthGate


def lazy_mount_mcp(kb: Knowledge, host: str = "127.0.0.1") -> Callable[[Any, Auth], None]:
    """An ``extra_mounts`` hook for :func:`kiwifs.rest.app.create_app` that loads MCP late."""

    def mount(app: Any, auth: Auth) -> None:
        late = LateApp(kb, host)
        gate = AuthGate(late, auth)  # refused requests never wait for the SDK
        previous = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(a: Any) -> AsyncIterator[Any]:
            # the REST app's own shutdown (which commits what is pending) runs after, and
            # outside, the cancelled scope that stops MCP
            async with previous(a) as state:
                async with anyio.create_task_group() as group:
                    late.ready = anyio.Event()
                    group.start_soon(late.run)
                    yield state
                    group.cancel_scope.cancel()

        app.router.lifespan_context = lifespan
        app.router.routes.append(Route("/mcp", endpoint=gate, include_in_schema=False))
        app.router.routes.append(Route("/mcp/", endpoint=gate, include_in_schema=False))

    return mount


class LateApp:
    """The MCP endpoint until and after the SDK is loaded."""

    def __init__(self, kb: Knowledge, host: str) -> None:
        self.kb = kb
        self.host = host
        self.ready: anyio.Event | None = None
        self.app: ASGIApp | None = None
        self.error = ""

    def _load(self) -> Any:
        from kiwifs.mcp.server import mcp_asgi_app

        return mcp_asgi_app(self.kb, self.host)

    async def run(self) -> None:
        """Load the SDK off the event loop, then run its session manager until cancelled."""
        assert self.ready is not None
        try:
            http = await anyio.to_thread.run_sync(self._load)
        except Exception as exc:  # noqa: BLE001 - reported to every MCP request instead
            self.error = f"MCP is unavailable: {exc}"
            self.ready.set()
            return
        async with http.lifespan():
            self.app = http.app
            self.ready.set()
            await anyio.sleep_forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.ready is not None:
            await self.ready.wait()
        if self.app is None:
            response = JSONResponse({"error": self.error or "MCP is not running"}, 503)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
