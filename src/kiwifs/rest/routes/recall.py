"""The REST routes of recall: keyword search, frontmatter queries, the brief, and semantic and
hybrid search, with KiwiFS's parameter names.

``GET /api/kiwi/search`` (FTS5), ``GET /api/kiwi/meta`` (frontmatter filters) and
``GET /api/kiwi/brief`` (a context pack within a token budget) take typed query parameters.
``GET|POST /api/kiwi/search/semantic`` takes ``q`` or ``query``, ``topK`` (default 10),
``offset``, ``modifiedAfter`` (or ``modified_after``) and ours: ``scope``, ``path_prefix`` (or
``pathPrefix``), ``threshold``, ``include_superseded``; POST takes the same names in a JSON
body. ``GET /api/kiwi/search/hybrid`` takes ``q``, ``limit``, ``offset``, ``scope``,
``path_prefix``, ``modifiedAfter`` and ``include_superseded``. One parser reads both the query
string and the body, so GET and POST cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from kiwifs.base.limits import BRIEF_BUDGET, BRIEF_MAX_PAGES, SEARCH_LIMIT
from kiwifs.errors import UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import grant_of, json_reply, read_json, run
from kiwifs.rest.openapi import NOT_BLANK, ORDER_PATTERN, errors, json_body_schema, query
from kiwifs.server.access import answer_prefix, listing_prefix, refuse_prefixed

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


_COMMON = [
    query("q", "string", "What to look for (or `query`)."),
    query("offset", "integer", "Results to skip."),
    query("scope", "string", "Only pages with this `scope`."),
    query("path_prefix", "string", "Only pages under this folder (or `pathPrefix`)."),
    query("modifiedAfter", "string", "Only pages modified after this date (or `modified_after`)."),
    query("include_superseded", "boolean", "Include superseded pages."),
]
_SEMANTIC = [
    *_COMMON,
    query("topK", "integer", "How many results (default 10; or `top_k`, `limit`)."),
    query("threshold", "number", "The least similarity to return."),
]
_SEMANTIC_BODY = json_body_schema(
    {p["name"]: p["schema"] for p in _SEMANTIC}, "The same fields as the query parameters."
)


def recall_routes(api: APIRouter, kb: Knowledge) -> None:
    _keyword_routes(api, kb)
    _vector_routes(api, kb)


def _keyword_routes(api: APIRouter, kb: Knowledge) -> None:
    """Keyword search, frontmatter queries and the brief, answered by the index."""

    @api.get("/search", responses=errors(400), response_model=dict[str, Any])
    async def search(
        request: Request,
        q: str = Query(..., json_schema_extra={"pattern": NOT_BLANK}),
        limit: int = SEARCH_LIMIT,
        offset: int = 0,
        path_prefix: str | None = None,
        pathPrefix: str | None = None,  # noqa: N803 - the name KiwiFS clients send
        scope: str | None = None,
        recency_weight: float | None = None,
        modified_after: str | None = None,
        modifiedAfter: str | None = None,  # noqa: N803
        include_superseded: bool = False,
    ) -> Response:
        if not q.strip():
            raise UsageError("q is required")
        within = listing_prefix(grant_of(request), path_prefix or pathPrefix)
        if within is None:  # the request's prefix and the key's are disjoint
            refuse_prefixed(grant_of(request), "a search outside the key's prefix")
        result = await run(
            kb.search,
            q,
            limit=limit,
            offset=offset,
            path_prefix=within or None,
            scope=scope,
            modified_after=modified_after or modifiedAfter,
            include_superseded=include_superseded,
            recency_weight=recency_weight,
        )
        return json_reply(result.to_json())

    @api.get("/meta", responses=errors(400))
    async def meta(
        request: Request,
        where: list[str] = Query(default=[]),
        or_: list[str] = Query(default=[], alias="or"),
        sort: str | None = None,
        order: str = Query(
            "asc",
            description="`asc` or `desc`, in any case; empty means `asc`.",
            json_schema_extra={"pattern": ORDER_PATTERN},
        ),
        limit: int = 50,
        offset: int = 0,
        path: list[str] = Query(default=[]),
        include_superseded: bool = False,
    ) -> dict[str, Any]:
        result = await run(
            kb.meta,
            where,
            or_,
            sort,
            order,
            limit,
            offset,
            path or None,
            include_superseded,
            path_prefix=answer_prefix(grant_of(request)),
        )
        return result.to_json()

    @api.get("/brief", responses=errors(400))
    async def brief(
        request: Request,
        q: str | None = None,
        query: str | None = None,
        budget_tokens: int = BRIEF_BUDGET,
        max_pages: int = BRIEF_MAX_PAGES,
        path_prefix: str | None = None,
        pathPrefix: str | None = None,  # noqa: N803
        scope: str | None = None,
        include_superseded: bool = False,
    ) -> dict[str, Any]:
        text = q if q is not None else query
        if text is None or not text.strip():
            raise UsageError("q is required")
        within = listing_prefix(grant_of(request), path_prefix or pathPrefix)
        if within is None:  # the request's prefix and the key's are disjoint
            refuse_prefixed(grant_of(request), "a brief outside the key's prefix")
        result = await run(
            kb.brief,
            text,
            budget_tokens=budget_tokens,
            max_pages=max_pages,
            path_prefix=within or None,
            scope=scope,
            include_superseded=include_superseded,
        )
        return result.to_json()


def _vector_routes(api: APIRouter, kb: Knowledge) -> None:
    """Semantic and hybrid search: the vector side, with its own lenient parameter parser."""

    @api.get("/search/semantic", responses=errors(400), openapi_extra={"parameters": _SEMANTIC})
    async def semantic_get(request: Request) -> dict[str, Any]:
        return await _semantic(kb, request, request.query_params)

    @api.post(
        "/search/semantic",
        responses=errors(400, 413),
        openapi_extra={"parameters": _SEMANTIC, "requestBody": _SEMANTIC_BODY},
    )
    async def semantic_post(request: Request) -> dict[str, Any]:
        body = await read_json(request)
        return await _semantic(kb, request, {**request.query_params, **body})

    @api.get(
        "/search/hybrid",
        responses=errors(400),
        openapi_extra={"parameters": [*_COMMON, query("limit", "integer", "How many results.")]},
    )
    async def hybrid(request: Request) -> dict[str, Any]:
        p = request.query_params
        within = listing_prefix(grant_of(request), _str(p, "path_prefix", "pathPrefix"))
        if within is None:
            refuse_prefixed(grant_of(request), "a search outside the key's prefix")
        found = await run(
            kb.hybrid_search,
            _query(p),
            limit=_int(p, "limit"),
            offset=_int(p, "offset") or 0,
            path_prefix=within or None,
            scope=_str(p, "scope"),
            modified_after=_str(p, "modifiedAfter", "modified_after"),
            include_superseded=_bool(p, "include_superseded"),
        )
        return found.to_json()


async def _semantic(kb: Knowledge, request: Request, p: Mapping[str, Any]) -> dict[str, Any]:
    top_k = _int(p, "topK", "top_k", "limit")
    within = listing_prefix(grant_of(request), _str(p, "path_prefix", "pathPrefix"))
    if within is None:
        refuse_prefixed(grant_of(request), "a search outside the key's prefix")
    found = await run(
        kb.semantic_search,
        _query(p),
        limit=10 if top_k is None else top_k,
        offset=_int(p, "offset") or 0,
        path_prefix=within or None,
        scope=_str(p, "scope"),
        modified_after=_str(p, "modifiedAfter", "modified_after"),
        include_superseded=_bool(p, "include_superseded"),
        threshold=_float(p, "threshold"),
    )
    return found.to_json()


def _pick(p: Mapping[str, Any], *names: str) -> tuple[str, Any]:
    for name in names:
        value = p.get(name)
        if value is not None:
            return name, value
    return names[0], None


def _query(p: Mapping[str, Any]) -> str:
    name, value = _pick(p, "q", "query")
    if not isinstance(value, str) or not value.strip():
        raise UsageError("q is required")
    return value


def _str(p: Mapping[str, Any], *names: str) -> str | None:
    name, value = _pick(p, *names)
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string")
    return value or None


def _int(p: Mapping[str, Any], *names: str) -> int | None:
    name, value = _pick(p, *names)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{name} must be a whole number, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} must be a whole number, got {value!r}") from None


def _float(p: Mapping[str, Any], *names: str) -> float | None:
    name, value = _pick(p, *names)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise UsageError(f"{name} must be a finite number, got {value!r}")
    return number


def _bool(p: Mapping[str, Any], *names: str) -> bool:
    name, value = _pick(p, *names)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
        return value.strip().lower() in TRUE
    raise UsageError(f"{name} must be true or false, got {value!r}")
