"""The app ``kiwifs serve`` listens with: the health probes answered from the first instant,
the full REST app built once the socket is open.

Importing FastAPI and pydantic and building the routes takes longer than everything else
``serve`` does before it can answer (most of a second on a busy machine). So ``serve`` opens the
root (crash repairs included), binds, and runs uvicorn with this small ASGI app, which imports
neither. Once uvicorn runs, the full app is built in a worker thread, then its lifespan starts
(the index watcher, the timeline keeper, MCP). Until the full app is there:

* ``GET`` and ``HEAD`` of ``/health``, ``/healthz`` and ``/readyz`` are answered here, by the
  same rules as the routes (:class:`~kiwifs.rest.probes.Probes`, the browser guard):
  ``/readyz`` says not ready, as it does until the watcher's first reconcile is done;
* every other request waits for the full app, then is handed to it.

When the build or the full app's start-up fails, the error is logged, waiting requests get a 503
naming it, and the server is asked to stop (``serve`` then exits with the error).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from kiwifs.errors import KiwiError
from kiwifs.knowledge import Knowledge
from kiwifs.rest.probes import Answer, Probes
from kiwifs.rest.statuses import STATUS, json_bytes
from kiwifs.server.auth import check_browser

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("kiwifs.rest")

PROBES = frozenset({"/health", "/healthz", "/readyz"})


class StartingApp:
    """The ASGI app served from the start; ``build(probes)`` makes the full app (in a thread).

    ``loopback``: the server binds a loopback address (the browser guard's rule, see
    :func:`kiwifs.server.auth.check_browser`). ``on_failure`` is called when the full app cannot
    start.
    """

    def __init__(
        self,
        kb: Knowledge,
        build: Callable[[Probes], ASGIApp],
        loopback: bool,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.kb = kb
        self.probes = Probes(kb)
        self.loopback = loopback
        self.app: ASGIApp | None = None
        self.error = ""
        self._build = build
        self._on_failure = on_failure
        self._settled = asyncio.Event()
        self._lifespan: Lifespan | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(scope, receive, send)
            return
        if self.app is None and _is_probe(scope):
            await self._probe(scope, send)
            return
        await self._settled.wait()
        if self.app is None:
            if scope["type"] == "http":
                await answer(scope, send, 503, {"error": self.error})
            return
        await self.app(scope, receive, send)

    # -- the lifespan: ours is quick, the full app's follows in the background ----------------

    async def _serve_lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        starting = asyncio.create_task(self._start(scope))
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await starting  # a build in progress cannot be interrupted: it ends within a second
        await self._stop()
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self, scope: Scope) -> None:
        try:
            app = await asyncio.to_thread(self._build, self.probes)
            self._lifespan = Lifespan(app, scope)
            await self._lifespan.startup()
            self.app = app
        except Exception as exc:  # noqa: BLE001 - reported to the log, the requests and serve
            log.error("the server failed to start", exc_info=exc)
            self.error = f"the server failed to start: {exc}"
            self._on_failure()
        finally:
            self._settled.set()

    async def _stop(self) -> None:
        if self.app is not None and self._lifespan is not None:
            await self._lifespan.shutdown()  # the full app's shutdown closes the root
        else:
            await asyncio.to_thread(self.kb.close)

    # -- the probes before the full app is there ----------------------------------------------

    async def _probe(self, scope: Scope, send: Send) -> None:
        headers = _headers(scope)
        reply: Answer
        try:
            check_browser(headers.get("host"), headers.get("origin"), self.loopback)
            if scope["path"] == "/healthz":
                reply = 200, self.probes.alive()
            elif scope["path"] == "/health":
                reply = await asyncio.to_thread(self.probes.health)
            else:
                reply = await asyncio.to_thread(self.probes.ready)
        except KiwiError as exc:  # the browser guard's refusal (a 4xx)
            reply = STATUS.get(exc.code, 500), {"error": exc.message}
        except Exception:  # noqa: BLE001 - answered as the full app's fault middleware does
            log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
            reply = 500, {"error": "internal server error"}
        await answer(scope, send, *reply)


class Lifespan:
    """Drives an ASGI app's lifespan from outside: its start-up now, its shutdown later."""

    def __init__(self, app: ASGIApp, scope: Scope) -> None:
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(app, scope))

    async def _run(self, app: ASGIApp, scope: Scope) -> None:
        try:
            await app(scope, self._to_app.get, self._from_app.put)
        except Exception as exc:  # noqa: BLE001 - the step waiting for an answer raises it
            await self._from_app.put({"type": "lifespan.error", "message": str(exc)})

    async def _step(self, name: str) -> None:
        await self._to_app.put({"type": f"lifespan.{name}"})
        reply = await self._from_app.get()
        if reply["type"] != f"lifespan.{name}.complete":
            raise RuntimeError(reply.get("message") or f"{name} failed")

    async def startup(self) -> None:
        await self._step("startup")

    async def shutdown(self) -> None:
        await self._step("shutdown")
        await self._task


def _is_probe(scope: Scope) -> bool:
    return (
        scope["type"] == "http" and scope["path"] in PROBES and scope["method"] in ("GET", "HEAD")
    )


def header(scope: Scope, name: str) -> str | None:
    """One request header of an ASGI ``scope`` by lower-case ``name`` (the first of repeated
    ones, as Starlette), for the ASGI layers that run before any route: ``None`` if absent."""
    wanted = name.encode("latin-1")
    for key, value in scope["headers"]:
        if key.lower() == wanted:
            return str(value.decode("latin-1"))
    return None


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of repeated ones, as Starlette)."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


async def answer(
    scope: Scope,
    send: Send,
    status: int,
    body: MutableMapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> None:
    """A JSON answer as the full app's responses are made (``HEAD``: the headers only)."""
    payload = json_bytes(body)
    more = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-length", str(len(payload)).encode()),
                (b"content-type", b"application/json"),
                *more,
            ],
        }
    )
    head = scope["method"] == "HEAD"
    await send({"type": "http.response.body", "body": b"" if head else payload})
