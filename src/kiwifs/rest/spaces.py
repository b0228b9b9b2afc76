"""Spaces over REST: one ASGI app in front of one app per space.

Each space is served by the app :func:`kiwifs.rest.app.create_app` builds for its root, so every
route, the event stream, the web pages and ``/mcp`` work in a space as they do on a root alone.
:class:`SpacesApp` only picks the space of a request, as KiwiFS does, in this order:

1. the header ``X-Kiwi-Space: NAME``;
2. the path ``/api/kiwi/NAME/…``: the segment is removed and the rest is the usual route;
3. otherwise the default space.

A name that is no space is ``404 {"error": "unknown space: NAME"}``, never the default space:
KiwiFS falls back to it, so a typo would write into the wrong root. A path segment is a space
name only when it cannot be a route (``/api/kiwi/search`` is search, and no space may be named
``search``). The health probes and ``/api/spaces`` are the server's, answered by the default
space's app whatever the header says.

A space's app is built on its first request and kept on the open space
(:class:`~kiwifs.server.spaces.OpenSpace`), its lifespan run here; when the registry closes the
space, the app's lifespan is shut down first and the app dropped, and FastAPI's memo of its
endpoints forgotten (:func:`forget_endpoints`), or the dropped app and its root would stay in
memory. Opening, closing and the bound on open spaces are the registry's rules; this module
translates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING, Any

import anyio

from kiwifs.config import DEFAULT_SPACE
from kiwifs.errors import Forbidden, KiwiError
from kiwifs.rest.openapi import API_PREFIX
from kiwifs.rest.routes.spaces import SPACES_PREFIX
from kiwifs.rest.starting import PROBES, Lifespan, answer, header
from kiwifs.rest.statuses import STATUS
from kiwifs.server.access import MCP_PATH, REPLICATION_PATH, SPACE_KEY, Gate, reaches
from kiwifs.server.auth import SESSION_COOKIE, SPACE_COOKIE, Sessions
from kiwifs.server.spaces import OpenSpace, SpaceRegistry

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Receive, Scope, Send

    from kiwifs.knowledge import Knowledge

log = logging.getLogger("kiwifs.rest")
SPACE_HEADER = b"x-kiwi-space"
APP_KEY = "rest"  # where a space's app is kept on its OpenSpace
CLOSE_TIMEOUT = 30.0
PAGE = ""  # _target's answer for a web page: its space is the picker's (no space is named "")


def route_segments(app: FastAPI) -> frozenset[str]:
    """The first path segments of the routes under ``/api/kiwi`` (``file``, ``search``, …):
    read from the app itself, so a new route is reserved the day it is added."""
    found = set()
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith(API_PREFIX + "/"):
            found.add(path[len(API_PREFIX) + 1 :].split("/", 1)[0])
    return frozenset(found)


class SpacesApp:
    """The ASGI app of a server with spaces: ``default`` (the default space's app, which also
    serves ``/api/spaces``) and an app per other space, made by ``build(kb)``."""

    def __init__(
        self,
        default: FastAPI,
        registry: SpaceRegistry,
        build: Callable[[Knowledge], ASGIApp],
        gate: Gate | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self.default = default
        self.registry = registry
        self.build = build
        self.gate = gate or Gate()
        self.sessions = sessions  # the web pages' sessions, shared by every space's app
        registry.reserve(route_segments(default))
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] not in ("http", "websocket"):
            await self.default(scope, receive, send)
            return
        name, scope = _target(scope, self.registry.reserved)
        page = name == PAGE
        if page:
            name = self._picked(scope)
        elif name == DEFAULT_SPACE and self.gate.keyed and _mcp_unnamed(scope):
            name = self._space_of_key(scope)
        scope = {**scope, SPACE_KEY: name}
        if name == DEFAULT_SPACE:
            await self.default(scope, receive, send)
            return
        if scope["type"] == "http" and self.gate.keyed and not page:
            try:
                self._admit(scope, name)
            except KiwiError as exc:
                await _refuse(scope, send, name, exc)
                return
        try:
            space = await anyio.to_thread.run_sync(self.registry.acquire, name)
        except Exception as exc:  # noqa: BLE001 - answered, never a 500 (see _refuse)
            await _refuse(scope, send, name, exc)
            return
        try:
            try:
                app = await self._app_of(space)
            except Exception as exc:  # noqa: BLE001 - its config, its app's start-up
                await _refuse(scope, send, name, exc)
                return
            await app(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.registry.release, space)

    def _picked(self, scope: Scope) -> str:
        """The space a web page shows: the picker's cookie (a browser sends no header) when
        it names a space the page's session reaches; else the space the session's key is
        bound to; else the default space. A space picked once and deleted since is shown no
        more (the pages name the space they show), and a space the session does not reach
        is treated alike whether it exists or not, so a cookie set by hand learns nothing."""
        grant = None
        if self.sessions is not None and self.sessions.keyed:
            grant = self.sessions.grant(_cookie(scope, SESSION_COOKIE))
        picked = _cookie(scope, SPACE_COOKIE)
        if picked and self.registry.exists(picked) and (grant is None or reaches(grant, picked)):
            if grant is not None or self.sessions is None or not self.sessions.keyed:
                return picked
        if grant is not None and grant.space and self.registry.exists(grant.space):
            return grant.space
        return DEFAULT_SPACE

    def _space_of_key(self, scope: Scope) -> str:
        """``/mcp`` naming no space goes to the space its key is bound to (an MCP host is
        configured with a URL and a key, often no header); a key for every space, or none
        valid, stays with the default space, whose check answers it."""
        try:
            grant = self.gate.grant(_authorization(scope))
        except KiwiError:
            return DEFAULT_SPACE
        return grant.space or DEFAULT_SPACE

    def _admit(self, scope: Scope, name: str) -> None:
        """A key for another space is refused here, before the space is looked up: a key bound
        to space ``a`` gets the same 403 for ``b`` whether ``b`` exists or not, and a request
        with no valid key the same 401. The space's own app then checks the scope."""
        grant = self.gate.grant(_authorization(scope))
        if not reaches(grant, name):
            raise Forbidden(f"this key does not reach space {name}")

    # -- the lifespan: the default app's, with the spaces closed before it ends --------------

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._loop = asyncio.get_running_loop()

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.registry.start_sweeping()
            elif message["type"] == "lifespan.shutdown":
                await anyio.to_thread.run_sync(self.registry.close)
            return message

        await self.default(scope, receiving, send)

    # -- a space's app ----------------------------------------------------------------------

    async def _app_of(self, space: OpenSpace) -> ASGIApp:
        """The app of ``space``, built and started on its first request."""
        lock: asyncio.Lock = space.cache.setdefault("rest-lock", asyncio.Lock())
        async with lock:
            app: ASGIApp | None = space.cache.get(APP_KEY)
            if app is None:
                app = await anyio.to_thread.run_sync(self.build, space.kb)
                scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
                lifespan = Lifespan(app, scope)
                try:
                    await lifespan.startup()
                except BaseException:
                    forget_endpoints()  # the app is dropped: let it go
                    raise
                space.on_close(self._stopper(lifespan))
                space.cache[APP_KEY] = app
        return app

    def _stopper(self, lifespan: Lifespan) -> Callable[[], None]:
        """How the registry, from its own thread, shuts the app down before closing the space."""
        loop = self._loop or asyncio.get_running_loop()

        def stop() -> None:
            try:
                if not loop.is_closed():
                    future = asyncio.run_coroutine_threadsafe(lifespan.shutdown(), loop)
                    future.result(CLOSE_TIMEOUT)
            finally:
                forget_endpoints()  # the registry drops the app next

        return stop


# FastAPI's memo of "is this endpoint or dependency a coroutine, a generator, an async
# generator?": module-level lru_caches (4,096 entries each) keyed by the callable itself.
_ENDPOINT_MEMOS = (
    "_is_coroutine_callable_cached",
    "_is_gen_callable_cached",
    "_is_async_gen_callable_cached",
)


def forget_endpoints() -> None:
    """Empty FastAPI's memo of endpoints, so a space's dropped app can be freed.

    A space's routes are closures over its :class:`Knowledge`, and FastAPI (0.165) keeps
    every endpoint and dependency it has classified in module-level caches, holding them
    strongly. So a closed space's app, its root, its index's Python objects and its MCP tools
    stayed in memory until 4,096 newer callables had pushed them out (about 49 per space's
    app with the web pages, 36 without: 80 to 110 closed spaces, ~2.4 MB each). The caches
    cannot drop one app's entries, so they are emptied whole; the open apps' entries are
    classified again on their next request (a few ``inspect`` calls each). A FastAPI without
    these caches has nothing to forget.
    """
    from fastapi.dependencies import models  # loaded with any app this module serves

    for name in _ENDPOINT_MEMOS:
        memo = getattr(models, name, None)
        clear = getattr(memo, "cache_clear", None)
        if clear is not None:
            clear()


def _authorization(scope: Scope) -> str | None:
    return header(scope, "authorization")


def _named_space(scope: Scope) -> str | None:
    """The space ``X-Kiwi-Space`` names: its first value that is not blank (``None``: none)."""
    for key, value in scope["headers"]:
        if key.lower() == SPACE_HEADER and value.strip():
            return str(value.decode("latin-1").strip())
    return None


def _mcp_unnamed(scope: Scope) -> bool:
    """Whether the request is for ``/mcp`` and names no space by header."""
    return scope["path"].rstrip("/") == MCP_PATH and _named_space(scope) is None


def _cookie(scope: Scope, name: str) -> str | None:
    """The value of cookie ``name`` of a request (``None``: not sent, or unreadable)."""
    for key, value in scope["headers"]:
        if key.lower() == b"cookie":
            cookies: SimpleCookie = SimpleCookie()
            with contextlib.suppress(CookieError):
                cookies.load(value.decode("latin-1"))
            found = cookies.get(name)
            if found is not None:
                return str(found.value)
    return None


def _servers(path: str, prefix: str) -> bool:
    """Whether ``path`` is one of the server's own routes under ``prefix`` (not a space's)."""
    return path == prefix or path.startswith(prefix + "/")


def _target(scope: Scope, reserved: frozenset[str]) -> tuple[str, Scope]:
    """The space a request is for, and the request as that space's app must see it;
    :data:`PAGE` for a web page named by no header (the picker's choice, see
    :meth:`SpacesApp._picked`)."""
    path: str = scope["path"]
    if path in PROBES or _servers(path, SPACES_PREFIX) or _servers(path, REPLICATION_PATH):
        return DEFAULT_SPACE, scope
    named = _named_space(scope)
    if named is not None:
        return named, scope
    if not path.startswith(API_PREFIX + "/"):
        return (DEFAULT_SPACE if path.rstrip("/") == MCP_PATH else PAGE), scope
    segment, _, rest = path[len(API_PREFIX) + 1 :].partition("/")
    if not segment or segment in reserved:
        return DEFAULT_SPACE, scope
    inner = dict(scope)
    inner["path"] = f"{API_PREFIX}/{rest}" if rest else API_PREFIX
    raw = scope.get("raw_path")
    lead = f"{API_PREFIX}/{segment}".encode()
    if isinstance(raw, bytes) and raw.startswith(lead):
        inner["raw_path"] = API_PREFIX.encode() + raw[len(lead) :]
    else:
        inner.pop("raw_path", None)
    return segment, inner


async def _refuse(scope: Scope, send: Send, name: str, exc: Exception) -> None:
    """A refusal as the apps answer: ``{"error": …}`` with the table's status. A space that
    cannot open (its config, its lock, its disk) is a 503 naming why, never a 500."""
    if scope["type"] != "http":
        return
    if isinstance(exc, KiwiError) and exc.code in STATUS:
        status, message = STATUS[exc.code], exc.message
        if status == 401:
            await answer(scope, send, status, {"error": message}, {"WWW-Authenticate": "Bearer"})
            return
    else:
        log.error("space %s cannot open", name, exc_info=exc)
        status, message = 503, f"space {name} cannot open: {exc}"
    await answer(scope, send, status, {"error": message})


def create_spaces_app(
    kb: Knowledge,
    registry: SpaceRegistry,
    mounts: Callable[[Knowledge], Any] | None = None,
    **options: Any,
) -> SpacesApp:
    """The app of a server with spaces: ``create_app(kb, spaces=registry, **options)`` for the
    default space and, on first use, ``create_app(space_kb, **options)`` for each other one,
    whose background work the registry runs. ``mounts(kb)``: the ``extra_mounts`` of a root's
    app (MCP at ``/mcp``). ``probes`` and ``serving`` apply to the default space only."""
    from kiwifs.rest.app import create_app
    from kiwifs.server.access import Gate

    gate = options.pop("gate", None) or Gate.of(kb.config, kb.root, options.pop("api_key", None))
    options.pop("api_key", None)
    shared = {k: v for k, v in options.items() if k not in ("probes", "serving")}
    shared["space_names"] = registry.names
    if gate.keyed:  # the server's keys hold in every space; else a space's own [auth] applies
        shared["gate"] = gate
        # and so do its web sessions: signed in once, the pages show each space the key reaches
        shared["sessions"] = Sessions(gate.api_key, keyed=True)
    default = create_app(
        kb,
        spaces=registry,
        extra_mounts=mounts(kb) if mounts else None,
        **{**options, **shared, "gate": gate},
    )

    def build(space_kb: Knowledge) -> ASGIApp:
        extra = mounts(space_kb) if mounts else None
        return create_app(space_kb, extra_mounts=extra, background=False, **shared)

    return SpacesApp(default, registry, build, gate, shared.get("sessions"))
