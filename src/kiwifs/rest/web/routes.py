"""The read-only web interface of ``kiwifs serve`` at ``/`` (docs/web.md).

Server-rendered pages (Jinja2, autoescaped) over the same :class:`Knowledge` calls as every other
interface: the dashboard (:meth:`Knowledge.overview`), the queue (:meth:`Knowledge.queue`), a
file with its lineage (:meth:`Knowledge.lineage`) and history, the tree and search. The pages
change nothing. Two small endpoints feed the dashboard's live update: ``/ui/events`` (the change
events) and ``/ui/overview.json`` (the numbers to redraw).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiwifs import __version__
from kiwifs.base.text import shown
from kiwifs.errors import InvalidQuery, KiwiError, NotFound, TooManyRequests, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.rest.fallback import FallbackMount, allowed_methods
from kiwifs.rest.http import (
    error_response,
    event_stream,
    kiwi_error_response,
    optional_int,
    run,
)
from kiwifs.rest.statuses import STATUS
from kiwifs.rest.web import render
from kiwifs.rest.web.chart import timeline_svg
from kiwifs.rest.web.session import (
    LoginRequired,
    WebAuth,
    login_redirect,
    read_form,
    safe_next,
    same_origin,
    space_of,
)
from kiwifs.server.access import Gate
from kiwifs.server.auth import Sessions
from kiwifs.writes.events import CHECK_STORED, Event

if TYPE_CHECKING:
    from kiwifs.knowledge import HybridResults, SearchResults

HERE = Path(__file__).resolve().parent
QUEUE_PAGE = 100
SEARCH_PAGE = 20
WARNINGS_SHOWN = 1000
JSON_PATHS = ("/api/", "/ui/", "/mcp")  # paths under which a miss is answered in JSON
# Search modes the search box offers, by name; hybrid joins when the root has vectors on.
SEARCH_MODES: dict[str, str] = {"keyword": "keyword (BM25)"}
VECTOR_MODES: dict[str, str] = {"hybrid": "hybrid (keyword + meaning)"}

# Pages show only this site's own files: no inline script, no outside fetch, no framing.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def templates() -> Jinja2Templates:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html", "svg"]),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=page_text,
    )
    env.globals.update(
        file_url=render.file_url,
        browse_url=render.browse_url,
        diff_url=render.diff_url,
        raw_url=render.raw_url,
        age_text=render.age_text,
        highlighted=render.highlighted,
        value_text=render.value_text,
        is_entries=render.is_entries,
        percent=render.percent,
        version=__version__,
    )
    return Jinja2Templates(env=env)


def page_text(value: Any) -> Any:
    """Every value a page prints, a name that is not UTF-8 written by the name rule
    (:func:`~kiwifs.base.text.shown`): a lone surrogate cannot be encoded, and one name in a folder
    turned its whole page into a 500."""
    if isinstance(value, Markup):
        return Markup(shown(value))
    return shown(value) if isinstance(value, str) else value


class PageHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response of the web interface, and
    ``Server-Timing: app;dur=<ms>`` (the time until the response started: what bench/web.py
    measures)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                took = (time.perf_counter() - started) * 1000
                extra.append((b"server-timing", f"app;dur={took:.1f}".encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def web_app(
    kb: Knowledge,
    gate: Gate,
    sessions: Sessions,
    spaces: Callable[[], list[str]] | None = None,
) -> ASGIApp:
    """The web interface as an application to mount at ``/``; ``sessions``: the server's;
    ``spaces``: the names of the server's spaces, for the picker."""
    auth = WebAuth(gate, sessions, spaces=spaces)
    pages = templates()
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    page = [Depends(auth.page)]

    def show(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        signed_in = auth.signed_in(request)
        context.setdefault("auth_on", auth.enabled and signed_in)
        context.setdefault("space", space_of(request))
        context.setdefault("spaces", auth.reachable(request) if signed_in else [])
        return pages.TemplateResponse(request, name, context, status_code=status)

    @app.exception_handler(LoginRequired)
    async def on_login_required(_: Request, exc: LoginRequired) -> Response:
        return login_redirect(exc.target)

    @app.exception_handler(KiwiError)
    async def on_kiwi_error(request: Request, exc: KiwiError) -> Response:
        if request.url.path.startswith(JSON_PATHS):
            return kiwi_error_response(exc)
        status = STATUS.get(exc.code, 500)
        message = exc.message if status < 500 else "internal error (see the server log)"
        return show(request, "error.html", status, title="Error", message=message)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith(JSON_PATHS):  # an API client's typo stays JSON
            answer: Response = error_response(exc.status_code, str(exc.detail))
        else:
            message = str(exc.detail)
            answer = show(request, "error.html", exc.status_code, title="Error", message=message)
        answer.headers.update(exc.headers or {})
        allowed = allowed_methods(app.router.routes, request.url.path)
        if exc.status_code == 405 and allowed:  # every method of the path, not its first route's
            answer.headers["Allow"] = allowed
        return answer

    _session_routes(app, auth, show)
    _overview_routes(app, kb, auth, show, page)
    _file_routes(app, kb, show, page)
    _browse_routes(app, kb, show, page)
    return PageHeaders(app)


Show = Callable[..., HTMLResponse]
Deps = list[Any]


def _session_routes(app: FastAPI, auth: WebAuth, show: Show) -> None:
    @app.get("/login", response_model=None)
    async def login_form(request: Request, next: str | None = None) -> Response:  # noqa: A002
        if not auth.enabled or auth.signed_in(request):
            return RedirectResponse(safe_next(next), status_code=303)
        return show(request, "login.html", title="Sign in", next=safe_next(next), failed=False)

    @app.post("/login", response_model=None)
    async def login(request: Request) -> Response:
        if not same_origin(request):
            return show(request, "error.html", 403, title="Error", message="cross-site sign-in")
        form = await read_form(request)
        target = safe_next(form.get("next"))
        if not auth.enabled:
            return RedirectResponse(target, status_code=303)
        try:
            grant = auth.sign_in(request, form.get("key", ""))
        except TooManyRequests as exc:
            page = show(request, "login.html", 429, title="Sign in", next=target, limited=exc)
            page.headers["Retry-After"] = str(exc.retry_after)
            return page
        if grant is None:
            return show(request, "login.html", 401, title="Sign in", next=target, failed=True)
        response = RedirectResponse(target, status_code=303)
        auth.start_session(response, request, grant)
        if grant.space is not None and grant.space != space_of(request):
            auth.show_space(response, request, grant.space)  # a key for one space: its pages
        return response

    @app.post("/space", response_model=None)
    async def pick_space(request: Request) -> Response:
        """The space picker: the pages show the chosen space from now on."""
        if not same_origin(request):
            return show(request, "error.html", 403, title="Error", message="cross-site request")
        if not auth.signed_in(request):
            return login_redirect("/")
        form = await read_form(request)
        response = RedirectResponse("/", status_code=303)
        auth.choose_space(response, request, form.get("space", ""))
        return response

    @app.post("/logout", response_model=None)
    async def logout(request: Request) -> Response:
        if not same_origin(request):
            return show(request, "error.html", 403, title="Error", message="cross-site sign-out")
        response = RedirectResponse("/login", status_code=303)
        auth.end_session(response, request)
        return response


def _overview_routes(app: FastAPI, kb: Knowledge, auth: WebAuth, show: Show, page: Deps) -> None:
    @app.get("/", dependencies=page)
    async def dashboard(request: Request) -> HTMLResponse:
        overview = await run(kb.overview)
        return show(
            request,
            "dashboard.html",
            title="Dashboard",
            o=overview,
            now=overview.computed_at,
            chart=timeline_svg(overview.timeline),
        )

    @app.get("/ui/links.json", dependencies=[Depends(auth.fragment)])
    async def links_json() -> JSONResponse:
        """The broken-link count, fetched by the dashboard once it is shown: counting them
        costs ~0.8 s at 100k pages, which the dashboard itself must not wait for."""
        broken = await run(kb.broken_link_count)
        return JSONResponse({"broken": broken}, headers={"Cache-Control": "no-store"})

    @app.get("/ui/overview.json", dependencies=[Depends(auth.fragment)])
    async def overview_json() -> JSONResponse:
        overview = await run(kb.overview)
        return JSONResponse(overview.to_json(), headers={"Cache-Control": "no-store"})

    @app.get("/ui/events", dependencies=[Depends(auth.fragment)])
    async def events(request: Request) -> Response:
        return event_stream(request, kb.events, event_name)

    @app.get("/warnings", dependencies=page)
    async def warnings(request: Request) -> HTMLResponse:
        report = await run(kb.memory_report, None, 0)
        return show(
            request,
            "warnings.html",
            title="Warnings",
            warnings=report.warnings,
            prefix=report.episodes_prefix,
            shown=WARNINGS_SHOWN,
        )

    @app.get("/links/broken", dependencies=page)
    async def broken_links(request: Request) -> HTMLResponse:
        broken = await run(kb.broken_links)
        return show(
            request, "broken.html", title="Broken links", broken=broken, shown=WARNINGS_SHOWN
        )

    @app.get("/queue", dependencies=page)
    async def queue(request: Request, prefix: str = "", page: str | None = None) -> HTMLResponse:
        number = page_number(page)
        if number < 1:
            raise UsageError("page must be 1 or more")
        result = await run(kb.queue, prefix, QUEUE_PAGE, (number - 1) * QUEUE_PAGE)
        pages = max(1, -(-result.total // QUEUE_PAGE))
        return show(
            request, "queue.html", title="Queue", q=result, page=number, pages=pages, prefix=prefix
        )


def _file_routes(app: FastAPI, kb: Knowledge, show: Show, page: Deps) -> None:
    @app.get("/file/{path:path}", dependencies=page)
    async def file_page(request: Request, path: str, rev: str | None = None) -> HTMLResponse:
        shown_page = await run(kb.page, path, rev)
        current = shown_page.file
        lineage = None
        try:
            lineage = await run(kb.lineage, path)
        except NotFound:
            pass  # not a knowledge file the index holds (e.g. not .md): no lineage to show
        versions = await run(kb.versions, path)
        outbound = await run(kb.outbound_links, path)  # the links as indexed now
        backlinks = await run(kb.backlinks, path)
        text = shown_page.text
        is_md = current.path.endswith(".md")
        return show(
            request,
            "file.html",
            title=current.path,
            path=current.path,
            etag=current.etag,
            rev=rev,
            fm=shown_page.frontmatter,
            html=render.markdown_html(text, current.path) if is_md else None,
            text=text,
            lineage=lineage,
            versions=versions,
            outbound=outbound,
            backlinks=backlinks,
        )

    @app.get("/raw/{path:path}", dependencies=page)
    async def raw(path: str) -> Response:
        doc = await run(kb.read, path)
        return Response(
            doc.content,
            media_type=raw_type(doc.path),
            headers={"Content-Security-Policy": "sandbox; default-src 'none'"},
        )

    @app.get("/diff/{path:path}", dependencies=page)
    async def diff(request: Request, path: str) -> HTMLResponse:
        rev_from = request.query_params.get("from", "")
        rev_to = request.query_params.get("to", "")
        if not rev_from or not rev_to:
            raise UsageError("from and to are required")
        text = await run(kb.diff, path, rev_from, rev_to)
        return show(
            request,
            "diff.html",
            title=f"diff {path}",
            path=path.lstrip("/"),
            rev_from=rev_from,
            rev_to=rev_to,
            lines=render.diff_lines(text),
        )


def event_name(event: Event) -> str:
    """The dashboard's two kinds of event: ``check`` (a new stored check result: redraw the
    problems) and ``change`` (anything else: redraw the numbers)."""
    return CHECK_STORED if event.op == CHECK_STORED else "change"


def page_number(value: str | None) -> int:
    """The ``page`` query parameter: 1 when not given."""
    number = optional_int("page", value)
    return 1 if number is None else number


RAW_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def raw_type(path: str) -> str:
    """Images as themselves, everything else as plain text (never HTML a browser would run)."""
    suffix = Path(path).suffix.lower()
    return RAW_TYPES.get(suffix, "text/plain; charset=utf-8")


def _browse_routes(app: FastAPI, kb: Knowledge, show: Show, page: Deps) -> None:
    @app.get("/browse", dependencies=page)
    @app.get("/browse/{path:path}", dependencies=page)
    async def browse(request: Request, path: str = "") -> HTMLResponse:
        node = await run(kb.tree, path or "/", 1)
        return show(request, "browse.html", title=node.path or "/", node=node)

    @app.get("/search", dependencies=page)
    async def search(
        request: Request,
        q: str = "",
        prefix: str = "",
        mode: str = "",
        page: str | None = None,
    ) -> HTMLResponse:
        number = page_number(page)
        if number < 1:
            raise UsageError("page must be 1 or more")
        modes = search_modes(kb)
        mode = mode or next(iter(modes))
        if mode not in modes:
            raise UsageError(f"unknown search mode {mode!r} (this root offers {', '.join(modes)})")
        results: SearchResults | HybridResults | None = None
        problem = ""
        if q.strip():
            offset = (number - 1) * SEARCH_PAGE
            try:
                if mode == "hybrid":
                    results = await run(
                        kb.hybrid_search,
                        q,
                        limit=SEARCH_PAGE,
                        offset=offset,
                        path_prefix=prefix or None,
                    )
                else:
                    results = await run(
                        kb.search, q, limit=SEARCH_PAGE, offset=offset, path_prefix=prefix or None
                    )
            except InvalidQuery as exc:
                problem = exc.message
        return show(
            request,
            "search.html",
            400 if problem else 200,
            title="Search",
            search_query=q,  # the header's search box shows it; no other page sets it
            q=q,
            prefix=prefix,
            mode=mode,
            modes=modes,
            results=results,
            problem=problem,
            page=number,
            page_size=SEARCH_PAGE,
        )


def search_modes(kb: Knowledge) -> dict[str, str]:
    """The modes the search box offers, the default first: hybrid when the root has vectors on
    (keyword ranks fused with meaning; docs/search.md), keyword always."""
    if kb.config.search.vector.enabled:
        return {**VECTOR_MODES, **SEARCH_MODES}
    return dict(SEARCH_MODES)


def docs_html(title: str) -> HTMLResponse:
    """Swagger UI for ``/docs`` from the files shipped in the package (works offline)."""
    from fastapi.openapi.docs import get_swagger_ui_html

    base = "/static/vendor/swagger-ui/"
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title=title,
        swagger_js_url=base + "swagger-ui-bundle.js",
        swagger_css_url=base + "swagger-ui.css",
        swagger_favicon_url="/static/favicon.svg",
    )


def install(
    app: FastAPI,
    kb: Knowledge,
    gate: Gate,
    docs_guard: Callable[..., Awaitable[None]],
    sessions: Sessions,
    spaces: Callable[[], list[str]] | None = None,
) -> None:
    """Serve ``/docs`` from the package (behind ``docs_guard``, like ``/openapi.json``) and the
    web interface at ``/`` (mount it last: it answers every path the API and MCP do not);
    ``sessions``: the server's, which ``docs_guard`` also accepts; ``spaces``: the names of the
    server's spaces, for the picker."""

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(docs_guard)])
    async def docs() -> HTMLResponse:
        return docs_html(f"{app.title} API")

    web = web_app(kb, gate, sessions, spaces)  # a method a route lacks stays a 405 (FallbackMount)
    app.router.routes.append(FallbackMount("/", web, "web", app.router.routes))
