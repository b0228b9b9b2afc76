"""The OpenAPI document of the REST interface: what each route really takes and answers.

The routes read their bodies and headers themselves (bounded reads, raw bytes, the request
models of :mod:`kiwifs.server.payloads`), so FastAPI cannot see them; and FastAPI would announce a
``422`` that kiwifs never sends (a validation failure is a ``400``). This module states per route
the request body, the headers, the content types of a success and the error statuses, each with
the one error body ``{"error": "…"}``, and removes the ``422``. A client generator, or a fuzzer
checking answers against the document, then sees the server as it is. The document sits behind
the API key (or a web session) like every route that is not a health check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from kiwifs.base.limits import MAX_BULK_BYTES, MAX_FILE_BYTES

OPENAPI_URL = "/openapi.json"
API_PREFIX = "/api/kiwi"
# What the core accepts, written as JSON Schema patterns (documentation only: the core checks)
ORDER_PATTERN = r"^(\s*([Aa][Ss][Cc]|[Dd][Ee][Ss][Cc])\s*)?$"  # /meta's order; empty: asc
NOT_BLANK = r"\S"  # a value that must hold more than spaces (a search query)


class ErrorBody(BaseModel):
    """Every error answer: a message saying what to fix (5xx: ``internal server error``)."""

    error: str


ERROR_TEXTS: dict[int, str] = {
    400: "Malformed or refused input: parameter, body, path, header or frontmatter.",
    401: "An API key is set and the request does not carry it (`Authorization: Bearer <key>`).",
    403: "Sent from a web page of another origin, or to a host name that is not this server.",
    404: "The file, folder or version does not exist.",
    409: "`If-Match` / `If-None-Match` failed, or the target already exists.",
    413: f"Over the size limit: a file a write would leave over {MAX_FILE_BYTES >> 20} MiB, "
    f"or a bulk write (or JSON body) over {MAX_BULK_BYTES >> 20} MiB.",
    500: "A server fault (details in the server log).",
    503: "Unavailable for now: the index is busy, commits are failing, semantic search is not "
    "enabled, or too many event subscribers.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entries of a route for these error statuses."""
    return {s: {"model": ErrorBody, "description": ERROR_TEXTS[s]} for s in statuses}


def success(*media_types: str) -> dict[int | str, Any]:
    """A ``200`` answered with these content types: JSON is an object, anything else text."""

    def schema(media: str) -> dict[str, Any]:
        return {"type": "object"} if media == "application/json" else {"type": "string"}

    return {200: {"content": {m: {"schema": schema(m)} for m in media_types}}}


def header(name: str, description: str) -> dict[str, Any]:
    """An optional header parameter (the routes read their headers themselves)."""
    out: dict[str, Any] = {"name": name, "in": "header", "required": False}
    out["schema"] = {"type": "string"}
    out["description"] = description
    return out


def query(name: str, kind: str, description: str) -> dict[str, Any]:
    """An optional query parameter, for routes that read their query string themselves."""
    out: dict[str, Any] = {"name": name, "in": "query", "required": False}
    out["schema"] = {"type": kind}
    out["description"] = description
    return out


ACTOR = header("X-Actor", "Who writes: the commit author (default `anonymous`).")
IF_MATCH = header("If-Match", "Write only if the file's ETag is one of these (409 otherwise).")
IF_NONE_MATCH = header("If-None-Match", "`*`: create only; ETags: not over one of these.")
PROVENANCE = header("X-Provenance", "`type:id` recorded in `derived-from` and the commit.")


def extra(*headers: dict[str, Any], body: dict[str, Any] | None = None) -> dict[str, Any]:
    """``openapi_extra`` of a route: its header parameters and its request body."""
    out: dict[str, Any] = {}
    if headers:
        out["parameters"] = list(headers)
    if body is not None:
        out["requestBody"] = body
    return out


def raw_body(description: str) -> dict[str, Any]:
    """A request body of raw bytes (a file's content)."""
    media = {"schema": {"type": "string", "format": "binary"}}
    return {
        "description": description,
        "required": False,
        "content": {"application/octet-stream": media, "text/markdown": media},
    }


def json_body_schema(properties: dict[str, Any], description: str) -> dict[str, Any]:
    """A JSON request body of optional fields (a route that reads its body itself)."""
    schema = {"type": "object", "properties": properties, "description": description}
    return {"required": False, "content": {"application/json": {"schema": schema}}}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """A JSON request body: the shared request model's schema, written out in full."""
    schema = _non_empty_required(_inline(model.model_json_schema()))
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _non_empty_required(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``minLength: 1`` on each required string field (nested ones included):
    the core refuses every one of them empty (``path is required``, ``content is required``…),
    so a schema allowing ``""`` would describe requests the server never takes."""
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        field = properties.get(name, {})
        if field.get("type") == "string":
            field.setdefault("minLength", 1)
    for field in properties.values():
        for nested in (field, field.get("items", {})):
            if nested.get("type") == "object":
                _non_empty_required(nested)
    return schema


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its local ``$defs`` references replaced by the definitions.

    Inside an OpenAPI document a ``#/$defs/…`` reference would be read from the document's
    root, where it does not exist; the request models have no recursive types.
    """
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "description": 'Commits are failing: `{"status": "degraded", "commits": {…}}`.',
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    **errors(403),
}
PROBE_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "description": 'Not ready yet: `{"status": "not-ready"}`.',
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    **errors(403),
}


def install_openapi(app: FastAPI, guard: Callable[[Request], Awaitable[None]], keyed: bool) -> None:
    """Serve the document at ``/openapi.json`` behind ``guard`` and without the ``422``.

    ``keyed``: an API key is set, so the document names the bearer scheme on the API routes.
    (``/docs`` shows it with the Swagger UI the web interface ships.)
    """

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = _required_parameters_non_empty(
                _without_422(get_openapi(title=app.title, version=app.version, routes=app.routes))
            )
            app.openapi_schema = _with_bearer(schema) if keyed else schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]

    @app.get(OPENAPI_URL, include_in_schema=False, dependencies=[Depends(guard)])
    async def openapi_json() -> JSONResponse:
        return JSONResponse(document())


def _without_422(schema: dict[str, Any]) -> dict[str, Any]:
    """The document without FastAPI's validation answer, which this server never gives."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema


def _required_parameters_non_empty(schema: dict[str, Any]) -> dict[str, Any]:
    """``minLength: 1`` on every required string parameter: the core refuses each of them empty
    (``path is required``, ``q is required``, ``invalid version: ''``)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                kind = parameter.get("schema", {})
                if parameter.get("required") and kind.get("type") == "string":
                    kind.setdefault("minLength", 1)
    return schema


def _with_bearer(schema: dict[str, Any]) -> dict[str, Any]:
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes["bearer"] = {"type": "http", "scheme": "bearer"}
    for path, operations in schema.get("paths", {}).items():
        if path.startswith((API_PREFIX, "/api/spaces")):
            for operation in operations.values():
                operation["security"] = [{"bearer": []}]
    return schema
