"""A synchronous HTTP client for an ASGI app served in-process, with its lifespan running.

httpx's ``ASGITransport`` calls the app directly (no socket, no server process); asgi-lifespan
runs the app's startup and shutdown as a server would (here: the index watcher, then closing the
root). Both live on an event loop in a background thread (an anyio blocking portal), so tests call
``client.get(...)`` synchronously, from any thread, as they would an ``httpx.Client``.

The transport hands back a response once the app has finished it, so endless responses (the SSE
stream) are tested against a real server instead.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from asgi_lifespan import LifespanManager
from starlette.types import ASGIApp

BASE_URL = "http://kiwifs.test"


class AppClient:
    """``get``/``put``/``post``/``delete``/``request`` like ``httpx.Client``, in-process."""

    def __init__(
        self, portal: BlockingPortal, client: httpx.AsyncClient, headers: dict[str, str]
    ) -> None:
        self._portal = portal
        self._client = client
        self._headers = headers

    @property
    def cookies(self) -> httpx.Cookies:
        """The cookies the client keeps and sends, as a browser does (shared by
        :meth:`with_headers` copies)."""
        return self._client.cookies

    def with_headers(self, **headers: str) -> AppClient:
        return AppClient(self._portal, self._client, {**self._headers, **headers})

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        content = kwargs.get("content")
        if content is not None and not isinstance(content, (bytes, str)):
            kwargs["content"] = _async(content)  # a sync generator: stream it, chunk by chunk
        headers = {**self._headers, **(kwargs.pop("headers", None) or {})}
        call = functools.partial(self._client.request, method, url, headers=headers, **kwargs)
        return self._portal.call(call)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


async def _async(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@contextmanager
def serve_in_process(app: ASGIApp) -> Iterator[AppClient]:
    """Run ``app``'s lifespan and yield a client for it; shutdown runs on exit."""
    with start_blocking_portal() as portal, _in_loop(portal, app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        client_cm = httpx.AsyncClient(transport=transport, base_url=BASE_URL)
        with portal.wrap_async_context_manager(client_cm) as client:
            yield AppClient(portal, client, {})


@contextmanager
def app_on(root: Path, **options: Any) -> Iterator[AppClient]:
    """A client of the REST app (``create_app(kb, **options)``) on ``root``, opened here and
    closed when the block ends (the app's shutdown closes it too, as a server's does)."""
    from kiwifs.knowledge import Knowledge
    from kiwifs.rest.app import create_app

    with Knowledge.open(root) as kb, serve_in_process(create_app(kb, **options)) as client:
        yield client


@contextmanager
def _in_loop(portal: BlockingPortal, app: ASGIApp) -> Iterator[LifespanManager]:
    """The lifespan, run by a manager made on the portal's loop (it detects the loop there)."""

    async def make() -> LifespanManager:
        return LifespanManager(app, startup_timeout=None, shutdown_timeout=None)

    with portal.wrap_async_context_manager(portal.call(make)) as manager:
        yield manager
