"""The MCP server (``kiwifs mcp``, and ``/mcp`` inside ``kiwifs serve``) over :class:`Knowledge`.

The tools live in :mod:`kiwifs.mcp.tools` as plain methods; this module is the protocol plumbing:
registration with the official SDK, the resources, the stdio and streamable-HTTP transports and
the mount used by the REST server. Failures are mapped in one place, :func:`failure_text`: a
:class:`KiwiError` becomes a tool error carrying its message (a model can act on "file not
found", "conflict" or "invalid path"); anything unexpected becomes a generic tool error with the
traceback on stderr, so no tool can take the server down. stdout carries only the protocol.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from kiwifs import __version__
from kiwifs.base.text import shown
from kiwifs.config import DEFAULT_MCP_PORT
from kiwifs.errors import ConfigError, Conflict, Forbidden, KiwiError, NotFound
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.authgate import AuthGate
from kiwifs.mcp.render import render_tree
from kiwifs.mcp.replicas import forward, held_until, with_commit
from kiwifs.mcp.tools import ALIASES, SPECS, Tools, ToolSpec
from kiwifs.server.access import GRANT_KEY, tool_call
from kiwifs.server.auth import LOOPBACK_HOSTS, api_key_for, check_bearer
from kiwifs.server.keys import PERSPACE
from kiwifs.server.lifecycle import Serving
from kiwifs.server.replica import follower_of

DEFAULT_HTTP_PORT = DEFAULT_MCP_PORT
TREE_RESOURCE_DEPTH = 3
INSTRUCTIONS = """\
kiwifs is a knowledge base of markdown files with YAML frontmatter, versioned in git.
Read with kiwi_tree, kiwi_search (kiwi_search_semantic and kiwi_search_hybrid find pages by
meaning when vectors are on), kiwi_query_meta and kiwi_read; write with kiwi_write,
kiwi_append or kiwi_bulk_write (pass the ETag from kiwi_read as if_match to avoid lost updates).
Memory loop: record raw experience with kiwi_remember; recall what matters for a task within a
token budget with kiwi_brief; retire what is no longer true with kiwi_forget (kiwi_restore undoes
it). kiwi_memory_report lists episodes not yet consolidated; write or update a concept page that
distils them, then record that with kiwi_memory_merge so they leave the report. With several
consolidators at once, take a batch with kiwi_memory_claim first and pass the same worker to
kiwi_memory_merge. SCHEMA.md (resource kiwi://schema) describes the conventions of this
knowledge base."""


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the one error mapping


def failure_text(exc: BaseException, spec: ToolSpec | None, args: dict[str, Any]) -> str:
    """The message a model reads for a failed call (tools and resources alike).

    Expected failures keep the core's message, with the tool's own wording for "not found"
    (KiwiFS's ``File not found at <path>. Use kiwi_tree …``) and its prefix where it has one; a
    failed ``if_match`` names the file's current ETag, so the model can re-read and retry.
    Anything else is reported generically; the traceback goes to stderr, never to the model.
    """
    if not isinstance(exc, KiwiError):
        name = spec.name if spec else "resource"
        _log(f"kiwifs-mcp: unexpected error in {name}:")
        traceback.print_exception(exc, file=sys.stderr)
        return f"internal error in {name} (details are in the server log)"
    text = exc.message
    if isinstance(exc, Conflict) and exc.etag:
        text += f" (current ETag: {exc.etag})"
    if isinstance(exc, NotFound) and spec is not None and spec.not_found:
        try:
            text = spec.not_found.format(**args)
        except (KeyError, IndexError, ValueError):
            text = exc.message
    if spec is not None and spec.failure:
        text = spec.failure + text
    return text


def tool_error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=shown(text))], is_error=True)


def adapt(
    spec: ToolSpec, fn: Callable[..., str], kb: Knowledge | None = None
) -> Callable[..., str | CallToolResult]:
    """Wrap a tool method: rename keyword aliases, map failures, log one line per call.

    The text goes out by the name rule (:func:`~kiwifs.base.text.shown`): a name that is not UTF-8
    would otherwise be a lone surrogate, which no transport can encode (over stdio the writer
    died with the whole server; over HTTP the call failed).
    """

    @functools.wraps(fn)
    def call(**kwargs: Any) -> str | CallToolResult:
        args = {ALIASES.get(k, k): v for k, v in kwargs.items()}
        started = time.perf_counter()
        failed = True
        try:
            text = shown(fn(**args))
            failed = False
            if kb is not None and not spec.read_only:
                return with_commit(kb, text)  # its commit named, as REST's X-Kiwi-Commit
            return text
        except Exception as exc:  # noqa: BLE001 - mapped to a tool error, never a crash
            return tool_error(failure_text(exc, spec, args))
        finally:
            ms = (time.perf_counter() - started) * 1000
            _log(f"kiwifs-mcp: tool={spec.name} duration={ms:.2f}ms error={str(failed).lower()}")

    return call


def annotations_of(spec: ToolSpec) -> ToolAnnotations:
    if spec.read_only:
        return ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    return ToolAnnotations(
        read_only_hint=False,
        destructive_hint=spec.destructive,
        idempotent_hint=spec.idempotent,
        open_world_hint=False,
    )


# ---------------------------------------------------------------------------------------------
# the server


class KiwiMCP(MCPServer[Any]):
    """The SDK server, accepting ``kiwi://file/a/b.md`` as well as ``kiwi://file/a%2Fb.md``,
    and calling each tool as the request's key allows.

    A ``{path}`` template variable does not match ``/`` under RFC 6570, yet clients write
    nested paths literally; the path part is re-encoded before the template is matched.
    Over HTTP inside ``kiwifs serve`` a request carries the grant of its key (put there by the
    REST auth check): a ``read`` key's calls of tools that write are tool errors, and a key with
    an actor authors its writes (:func:`kiwifs.server.access.tool_call`).
    """

    takes_actor: frozenset[str] = frozenset()  # the tools with an ``actor`` argument
    kb: Knowledge | None = None  # the root served (replicas: see kiwifs.mcp.replicas)

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None) -> Any:
        return await super().read_resource(encode_nested(str(uri)), context)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        spec = SPEC_BY_NAME.get(name)
        if spec is not None:
            try:
                arguments = tool_call(
                    _grant_of(context), name, spec.read_only, arguments, name in self.takes_actor
                )
            except Forbidden as exc:
                return tool_error(exc.message)
        kb = self.kb
        if kb is not None and spec is not None:
            arguments = dict(arguments)
            min_commit = arguments.pop("min_commit", None)
            if min_commit is not None and (why := await held_until(kb, min_commit)):
                return tool_error(why)
            follower = follower_of(kb)
            if follower is not None and not spec.read_only:
                return await forward(kb, follower, name, arguments, _request_of(context))
        return await super().call_tool(name, arguments, context)


SPEC_BY_NAME = {spec.name: spec for spec in SPECS}


def _request_of(context: Context[Any, Any] | None) -> Any:
    """The HTTP request behind a call (``None`` over stdio, or in-process)."""
    try:
        return context.request_context.request if context is not None else None
    except (AttributeError, ValueError):  # no request context: a call made in-process
        return None


def _grant_of(context: Context[Any, Any] | None) -> object:
    """The grant of the HTTP request behind a call (``None`` over stdio, or with no key)."""
    request = _request_of(context)
    scope = getattr(request, "scope", None)
    return scope.get(GRANT_KEY) if isinstance(scope, dict) else None


def encode_nested(uri: str) -> str:
    for scheme in ("kiwi://file/", "kiwi://tree/"):
        if uri.startswith(scheme):
            return scheme + quote(uri[len(scheme) :], safe="%")
    return uri


def build_server(kb: Knowledge) -> KiwiMCP:
    """An MCP server exposing every tool and resource of ``kb``."""
    server = KiwiMCP("kiwifs", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    tools = Tools(kb)
    server.takes_actor = frozenset(
        spec.name
        for spec in SPECS
        if "actor" in inspect.signature(tools.method(spec.name)).parameters
    )
    server.kb = kb
    for spec in SPECS:
        server.add_tool(
            adapt(spec, tools.method(spec.name), kb),
            name=spec.name,
            annotations=annotations_of(spec),
            structured_output=False,
        )
    _add_resources(server, kb)
    return server


def _resource_call(what: str, fn: Callable[[], str]) -> str:
    """Run a resource read, turning failures into the SDK's resource errors; text by the name
    rule, as a tool's."""
    try:
        return shown(fn())
    except NotFound as exc:
        raise ResourceNotFoundError(shown(f"{what}: {exc.message}")) from exc
    except Exception as exc:  # noqa: BLE001 - mapped, never a crash
        raise ResourceError(shown(failure_text(exc, None, {}))) from exc


def _add_resources(server: KiwiMCP, kb: Knowledge) -> None:
    @server.resource(
        "kiwi://schema",
        name="schema",
        description="SCHEMA.md: the conventions of this knowledge base.",
        mime_type="text/markdown",
    )
    def schema() -> str:
        def read() -> str:
            try:
                return kb.read("SCHEMA.md").text
            except NotFound as exc:
                raise NotFound("no SCHEMA.md found") from exc

        return _resource_call("kiwi://schema", read)

    @server.resource(
        "kiwi://file/{path}",
        name="file",
        description="A markdown file by path, e.g. kiwi://file/concepts/x.md.",
        mime_type="text/markdown",
    )
    def file(path: str) -> str:
        return _resource_call(f"kiwi://file/{path}", lambda: kb.read(path).text)

    @server.resource(
        "kiwi://tree/{path}",
        name="tree",
        description="The folder tree under a path (three levels); kiwi://tree/ for the root.",
        mime_type="text/plain",
    )
    def tree(path: str) -> str:
        return _resource_call(
            f"kiwi://tree/{path}",
            lambda: render_tree(kb.tree(path or None, TREE_RESOURCE_DEPTH)),
        )


# ---------------------------------------------------------------------------------------------
# transports


def run_stdio(kb: Knowledge) -> None:
    """Serve MCP over stdin/stdout until the client closes the stream."""
    server = build_server(kb)
    serving = Serving(kb)
    serving.start(dashboard=False)
    try:
        anyio.run(server.run_stdio_async)
    except KeyboardInterrupt:
        pass
    finally:
        serving.stop()  # stops the watcher, commits what is pending, writes the git index


def transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for a loopback bind; other binds rely on the API key."""
    if host not in LOOPBACK_HOSTS:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


@dataclass
class McpHttp:
    """The streamable-HTTP endpoint of one server: an ASGI app and the lifespan it needs.

    ``app`` answers at whatever path it is routed to; ``lifespan()`` must be entered (once) for
    the app's lifetime, because the SDK runs its request tasks in a task group it owns.
    """

    server: KiwiMCP
    app: ASGIApp

    def lifespan(self) -> Any:
        return self.server.session_manager.run()


def mcp_asgi_app(kb: Knowledge, host: str = "127.0.0.1") -> McpHttp:
    """Stateless streamable HTTP (as KiwiFS), JSON responses, for ``kb``."""
    server = build_server(kb)
    server.streamable_http_app(
        streamable_http_path="/",
        stateless_http=True,
        json_response=True,
        transport_security=transport_security(host),
        host=host,
    )
    return McpHttp(server, StreamableHTTPASGIApp(server.session_manager))


def bearer_check(api_key: str | None) -> Callable[[Request], Awaitable[None]]:
    """The gate's check: :func:`kiwifs.server.auth.check_bearer` on the request's header."""

    async def check(request: Request) -> None:
        check_bearer(request.headers.get("authorization"), api_key)

    return check


def standalone_key(kb: Knowledge) -> str | None:
    """The key of ``kiwifs mcp --http``: the root's ``apikey``. Scoped keys are enforced by
    ``kiwifs serve`` (its ``/mcp``), not here: refused at start, never served open."""
    if kb.config.auth.type.strip().lower() == PERSPACE:
        raise ConfigError(
            '[auth] type = "perspace" is enforced by kiwifs serve (its /mcp), '
            "not by kiwifs mcp --http"
        )
    return api_key_for(kb.config)


def http_app(kb: Knowledge, host: str = "127.0.0.1") -> Starlette:
    """The standalone app of ``kiwifs mcp --http``: ``/mcp`` and ``GET /health``."""
    http = mcp_asgi_app(kb, host)
    started = time.monotonic()
    gate = AuthGate(http.app, bearer_check(standalone_key(kb)))
    serving = Serving(kb)

    async def health(_: Request) -> JSONResponse:
        uptime = int(time.monotonic() - started)
        return JSONResponse({"status": "ok", "transport": "http", "uptime_seconds": uptime})

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(lambda: serving.start(dashboard=False))
        try:
            async with http.lifespan():
                yield
        finally:
            # uvicorn re-raises SIGTERM after shutdown, so code after uvicorn.run never runs
            await anyio.to_thread.run_sync(serving.stop)

    routes = [
        Route("/mcp", endpoint=gate),
        Route("/mcp/", endpoint=gate),
        Route("/health", endpoint=health, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def run_http(kb: Knowledge, sock: socket.socket, http: type[asyncio.Protocol]) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` on the bound ``sock`` until
    interrupted (binding first lets a busy port fail before anything is announced).

    ``http`` is uvicorn's HTTP protocol, chosen by the command as for ``kiwifs serve`` (the
    one closing a client that never finishes its headers), so MCP imports nothing of REST."""
    host, port = sock.getsockname()[:2]
    app = http_app(kb, host)
    _log(f"kiwifs-mcp: streamable HTTP on http://{_url_host(host)}:{port}/mcp")
    config = uvicorn.Config(app, log_level="warning", access_log=False, http=http)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        kb.close()  # an interrupt before start-up finished


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
