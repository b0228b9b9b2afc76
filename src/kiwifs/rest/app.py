"""The REST interface (``kiwifs serve``): KiwiFS's routes over :class:`Knowledge`, assembled.

:func:`create_app` builds the FastAPI app: its lifespan, error handlers, browser guard and
OpenAPI document, the health probes, and the routes under ``/api/kiwi`` behind the key, added
by the modules of :mod:`kiwifs.rest.routes` (one per kind of resource). Each route parses its
query, headers and body, makes one call on ``Knowledge`` in a worker thread (the core is
synchronous) and formats the answer. Errors from the core are mapped to HTTP in one table,
:data:`kiwifs.rest.statuses.STATUS`, with KiwiFS's ``{"error": "…"}`` body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, FastAPI, Request

from kiwifs import __version__
from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import (
    BrowserGuard,
    KiwiJSONResponse,
    auth_dependency,
    description_dependency,
    install_error_handlers,
    run,
)
from kiwifs.rest.openapi import API_PREFIX, errors, install_openapi
from kiwifs.rest.probes import Probes
from kiwifs.rest.replication import ReplicationMiddleware, replication_routes
from kiwifs.rest.routes.claims import claim_routes
from kiwifs.rest.routes.events import event_routes
from kiwifs.rest.routes.files import file_routes
from kiwifs.rest.routes.gitserve import git_routes
from kiwifs.rest.routes.graph import graph_routes
from kiwifs.rest.routes.health import health_routes
from kiwifs.rest.routes.history import history_routes
from kiwifs.rest.routes.memory import memory_routes
from kiwifs.rest.routes.navigation import navigation_routes
from kiwifs.rest.routes.recall import recall_routes
from kiwifs.server.access import Gate
from kiwifs.server.auth import LOOPBACK_HOSTS, Sessions
from kiwifs.server.lifecycle import Serving

if TYPE_CHECKING:
    from kiwifs.server.spaces import SpaceRegistry


def create_app(
    kb: Knowledge,
    api_key: str | None = None,
    extra_mounts: Callable[[FastAPI, Callable[[Request], Awaitable[None]]], None] | None = None,
    web: bool = True,
    host: str | None = None,
    probes: Probes | None = None,
    serving: Serving | None = None,
    spaces: SpaceRegistry | None = None,
    background: bool = True,
    gate: Gate | None = None,
    sessions: Sessions | None = None,
    space_names: Callable[[], list[str]] | None = None,
) -> FastAPI:
    """The FastAPI application serving ``kb``; ``api_key`` enables bearer auth (and the web
    interface's sign-in); ``web`` serves the web interface at ``/``.

    ``host`` is the address the server binds: on a loopback address, requests must also name a
    loopback host (see :func:`kiwifs.server.auth.check_browser`); ``None`` (in-process use) skips
    that. ``probes``: the health probes of a server that already answered them while this app was
    built (:mod:`kiwifs.rest.starting`), so that ``/healthz`` counts the uptime from its start.
    ``serving``: the background work the lifespan starts and stops (``Serving(kb)`` if none);
    ``background=False``: someone else starts and stops it (the space registry, for a space's
    app). ``spaces``: the registry whose management routes (``/api/spaces``) this app serves
    (the default space's app, see :mod:`kiwifs.rest.spaces`). ``gate``: the server's keys
    (:class:`~kiwifs.server.access.Gate`), which a space's app shares; ``None``: ``kb``'s own
    configuration and ``api_key``. ``sessions``: the web sessions, shared by every space's app
    of a server whose keys hold in every space (a session signed in once shows each space its
    key reaches); ``space_names``: the server's spaces, for the web pages' picker.
    """
    gate = gate or Gate.of(kb.config, kb.root, api_key)
    auth = auth_dependency(gate)
    # the web interface's sessions, which also open /docs and /openapi.json
    sessions = sessions or Sessions(gate.api_key, keyed=gate.keyed)
    described = description_dependency(gate, sessions)
    work = serving or Serving(kb)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not background:
            yield
            return
        await run(work.start, dashboard=web)
        try:
            yield
        finally:
            # uvicorn re-raises SIGTERM after shutdown, so atexit hooks never run: close here
            # (stops the watcher, writes the git index file)
            await run(work.stop)

    # /docs is served from the package's own Swagger UI files (see rest/web), never a CDN;
    # /openapi.json by install_openapi, behind the key like /docs
    app = FastAPI(
        title="kiwifs",
        version=__version__,
        lifespan=lifespan,
        default_response_class=KiwiJSONResponse,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    # replication: a replica forwards writes to its primary; X-Kiwi-(Min-)Commit either way
    app.add_middleware(ReplicationMiddleware, kb=kb, serving=work)
    app.add_middleware(BrowserGuard, loopback=host in LOOPBACK_HOSTS)
    install_openapi(app, described, keyed=gate.keyed)
    health_routes(app, probes or Probes(kb))

    api = APIRouter(
        prefix=API_PREFIX,
        dependencies=[Depends(auth)],
        responses=errors(401, 403, 500, 503),
        default_response_class=KiwiJSONResponse,
    )
    file_routes(api, kb)
    navigation_routes(api, kb)
    graph_routes(api, kb)
    history_routes(api, kb)
    recall_routes(api, kb)
    memory_routes(api, kb)
    claim_routes(api, kb)
    event_routes(api, kb)
    git_routes(api, kb)  # the space's repository over git's smart HTTP, read-only
    # The router's routes are complete (prefix, key check, responses): added as they are. FastAPI's
    # include_router would build every route a second time on the app's first request (~50 ms).
    app.router.routes.extend(api.routes)
    if spaces is not None:
        from kiwifs.rest.routes.spaces import space_routes  # a server's default space only

        space_routes(app, spaces, auth)
    if background:  # the server's own root (a space's app is not asked for its role)
        replication_routes(app, kb, work, auth)
    if extra_mounts is not None:
        extra_mounts(app, auth)
    if web:
        from kiwifs.rest.web import (
            install,  # Jinja2 and the templates load only with the web interface
        )

        install(app, kb, gate, described, sessions, space_names)
    return app
