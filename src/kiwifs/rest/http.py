"""Request and response plumbing of the REST adapter, kept apart from the routes.

Error responses by the one table mapping core error codes to HTTP statuses
(:data:`kiwifs.rest.statuses.STATUS`) with KiwiFS's ``{"error": "…"}`` body, the exception
handlers that use it, bounded body reading, JSON body validated against the shared request models
(:mod:`kiwifs.server.payloads`), query numbers where empty means "not given", and the bearer-auth
dependency.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiwifs.base.limits import MAX_BULK_BYTES
from kiwifs.base.text import SHOWN_JSON
from kiwifs.config import DEFAULT_SPACE
from kiwifs.errors import (
    Conflict,
    KiwiError,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
    UsageError,
)
from kiwifs.frontmatter.provenance import DEFAULT_ACTOR as ANONYMOUS
from kiwifs.frontmatter.provenance import sanitize_actor
from kiwifs.rest.fallback import allowed_methods
from kiwifs.rest.statuses import STATUS, json_bytes
from kiwifs.server.access import GRANT_KEY, SPACE_KEY, Gate, check_request
from kiwifs.server.auth import SESSION_COOKIE, Sessions, check_browser
from kiwifs.server.grants import Grant
from kiwifs.server.payloads import field_name, parse
from kiwifs.writes.events import Event, EventBus

log = logging.getLogger("kiwifs.rest")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

KEEPALIVE_SECONDS = 15.0
MAX_JSON_BYTES = MAX_BULK_BYTES  # the largest request: a bulk write's


class KiwiJSONResponse(JSONResponse):
    """JSON whose text is always valid UTF-8 (:func:`~kiwifs.rest.statuses.json_bytes`)."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def json_reply(content: Any) -> KiwiJSONResponse:
    """``content`` (JSON types only: dicts, lists, strings, numbers) as the response as it is.
    A route returning a plain value has FastAPI walk and copy all of it first
    (``jsonable_encoder``): 1.4 ms for a page of 50 search hits, ten times their encoding."""
    return KiwiJSONResponse(content)


def error_response(status: int, message: str) -> JSONResponse:
    return KiwiJSONResponse({"error": message}, status_code=status)


def kiwi_error_response(exc: KiwiError) -> JSONResponse:
    """The response for a core error: 4xx and 503 keep the message, a 500 hides it."""
    status = STATUS.get(exc.code, 500)
    if status == 503:
        log.warning("unavailable: %s", exc.message)
    elif status >= 500:
        log.error("internal error: %s", exc.message, exc_info=exc)
        return error_response(status, "internal server error")
    resp = error_response(status, exc.message)
    if status == 401:
        resp.headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, Conflict) and exc.etag:
        resp.headers["ETag"] = quoted(exc.etag)  # the current version, to re-read and retry
    if isinstance(exc, TooManyRequests):
        resp.headers["Retry-After"] = str(exc.retry_after)
    return resp


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a synchronous core call in a worker thread."""
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def quoted(etag: str) -> str:
    return f'"{etag}"'


def grant_of(request: Request) -> Grant:
    """The grant the route's auth dependency found (:func:`auth_dependency`). A route reached
    without one is refused, never served as if the server were open."""
    grant = request.scope.get(GRANT_KEY)
    if not isinstance(grant, Grant):
        raise Unauthorized("invalid API key")
    return grant


def key_actor(request: Request) -> str | None:
    """The actor of the request's key, which wins over anything the request says: a key with
    an actor is that author, whatever ``X-Actor`` or a body claims."""
    grant = request.scope.get(GRANT_KEY)
    return grant.actor if isinstance(grant, Grant) and grant.actor else None


def actor_of(request: Request) -> str:
    return key_actor(request) or sanitize_actor(request.headers.get("x-actor"), ANONYMOUS)


def body_actor(request: Request, actor: str | None) -> str:
    """The body's ``actor`` (sanitised); when that leaves nothing, the ``X-Actor`` header; the
    key's actor before both."""
    chosen = key_actor(request) or sanitize_actor(actor)
    return actor_of(request) if chosen == ANONYMOUS else chosen


async def read_body(request: Request, limit: int, what: str) -> bytes:
    """The request body, refusing more than ``limit`` bytes without reading it all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(what)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(what)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request) -> dict[str, Any]:
    body = await read_body(
        request, MAX_JSON_BYTES, f"the request body is over the {MAX_JSON_BYTES >> 20} MiB limit"
    )
    try:
        value = json.loads(body)
    except RecursionError:
        raise UsageError("invalid JSON body: nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"invalid JSON body: not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    except ValueError as exc:  # bad syntax, or an integer over 4300 digits (keep the first clause)
        raise UsageError(f"invalid JSON body: {str(exc).split(';')[0]}") from None
    if not isinstance(value, dict):
        raise UsageError("the JSON body must be an object")
    return value


async def read_model(request: Request, model: type[M]) -> M:
    """The JSON body validated as ``model`` (a shared request model); bad input is a 400."""
    return parse(model, await read_json(request))


def auth_dependency(gate: Gate) -> Callable[[Request], Awaitable[None]]:
    """A dependency finding the request's grant (401 without a valid key, fails closed) and
    asking :func:`kiwifs.server.access.check_request` whether it reaches the request's space at the
    scope the route needs (403). The grant is kept on the request for the route (its prefix,
    its actor: :func:`grant_of`, :func:`actor_of`)."""

    async def check(request: Request) -> None:
        grant = gate.grant(request.headers.get("authorization"))
        space = request.scope.get(SPACE_KEY, DEFAULT_SPACE)
        check_request(grant, space, request.method, request.scope["path"])
        request.scope[GRANT_KEY] = grant

    return check


def description_dependency(gate: Gate, sessions: Sessions) -> Callable[[Request], Awaitable[None]]:
    """The guard of the API's description (``/openapi.json``, ``/docs``): a valid key, or a
    signed-in web session, since a browser showing ``/docs`` cannot send a bearer header."""

    async def check(request: Request) -> None:
        try:
            gate.grant(request.headers.get("authorization"))
        except Unauthorized:
            if not sessions.valid(request.cookies.get(SESSION_COOKIE)):
                raise

    return check


class ServerFaults:
    """ASGI middleware answering an unexpected exception with a logged JSON 500.

    Starlette's outermost handler answers such an exception in plain text and then re-raises it,
    and uvicorn closes the connection on a re-raised exception: the client's next keep-alive
    request failed. Here the traceback goes to the log, the client gets
    ``{"error": "internal server error"}``, and the connection stays usable.

    A client that goes away while its body is being read (Starlette's :class:`ClientDisconnect`)
    is no fault: there is nobody to answer and nothing to log. Logging a traceback for each one
    let a few dozen aborted uploads stall the server.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except ClientDisconnect:
            return
        except Exception:
            log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
            if started:  # too late for another answer; the server closes the connection
                raise
            await error_response(500, "internal server error")(scope, receive, send)


class BrowserGuard:
    """ASGI middleware applying :func:`kiwifs.server.auth.check_browser` to every HTTP request."""

    def __init__(self, app: ASGIApp, loopback: bool) -> None:
        self.app = app
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            try:
                check_browser(headers.get("host"), headers.get("origin"), self.loopback)
            except KiwiError as exc:
                await kiwi_error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_middleware(ServerFaults)

    @app.exception_handler(KiwiError)
    async def on_kiwi_error(_: Request, exc: KiwiError) -> JSONResponse:
        return kiwi_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        resp = error_response(exc.status_code, str(exc.detail))
        resp.headers.update(exc.headers or {})
        allowed = allowed_methods(app.router.routes, request.url.path)
        if exc.status_code == 405 and allowed:  # every method of the path, not its first route's
            resp.headers["Allow"] = allowed
        return resp


def validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        name = field_name([x for x in err.get("loc", ()) if x not in ("query", "body", "header")])
        if err.get("type") == "missing":
            parts.append(f"{name} is required")
        else:
            parts.append(f"{name}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request"


def optional_int(name: str, value: str | None) -> int | None:
    """A whole-number query parameter where an empty value means "not given"."""
    if value is None or not value.strip():
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise UsageError(f"{name} must be a whole number, got {value!r}") from None


def event_stream(
    request: Request,
    bus: EventBus,
    name_of: Callable[[Event], str],
    keep: Callable[[Event], bool] = lambda _: True,
) -> StreamingResponse:
    """Server-sent events: one ``event: <name_of(e)>`` with the event's JSON per change that
    ``keep`` keeps, a keep-alive comment every 15 s, until the client goes away (503 when the bus
    is full or the server is stopping), or until the server stops (:meth:`EventBus.close`)."""
    try:
        sub = bus.subscribe()
    except OverflowError as exc:
        return error_response(503, str(exc))  # type: ignore[return-value]

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield b": connected\n\n"
            idle = 0.0
            while not bus.closed and not await request.is_disconnected():
                event = await run(sub.get, 0.5)
                if event is None:
                    idle += 0.5
                    if idle >= KEEPALIVE_SECONDS:
                        idle = 0.0
                        yield b":keep-alive\n\n"
                    continue
                idle = 0.0
                if not keep(event):
                    continue
                data = json.dumps(event.to_json(), ensure_ascii=False)
                # a name that is not UTF-8 by the name rule (kiwifs.base.text), as every JSON answer
                yield f"event: {name_of(event)}\ndata: {data}\n\n".encode("utf-8", SHOWN_JSON)
        except asyncio.CancelledError:
            raise
        finally:
            sub.close()

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
