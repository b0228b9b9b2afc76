"""The OpenAPI document describes the server as it answers, and sits behind the API key.

It once listed only ``200`` and ``422`` while the server answers 400/404/409/413 and never 422.
test_fuzz.py checks real answers against the document; these tests pin its shape.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app

pytestmark = pytest.mark.anyio
KEY = "s3cret-key"
DOC_ROUTES = ("/openapi.json", "/docs")
Client = Callable[..., httpx.AsyncClient]  # the client_for fixture
PROBES = {("get /health", "503"), ("get /readyz", "503")}  # their own bodies, not ErrorBody
# statuses each route must document, beyond 200 (every /api/kiwi route also has 401 and 500)
REQUIRED = {
    "get /api/kiwi/file": {304, 400, 404},
    "put /api/kiwi/file": {400, 409, 413},
    "delete /api/kiwi/file": {400, 404, 409},
    "post /api/kiwi/file/append": {400, 413},
    "post /api/kiwi/bulk": {400, 413},
    "post /api/kiwi/rename": {400, 404, 409, 413},
    "get /api/kiwi/tree": {400, 404},
    "get /api/kiwi/version": {400, 404},
    "get /api/kiwi/diff": {400, 404},
    "get /api/kiwi/meta": {400},
    "post /api/kiwi/memory/merge": {400, 409, 413},
    "post /api/kiwi/memory/remember": {400, 409, 413},
    "get /api/kiwi/events": {503},
    "get /health": {403, 503},
    "get /readyz": {403, 503},
    "post /api/kiwi/memory/forget": {400, 404, 409, 413},
    "post /api/kiwi/memory/restore": {400, 404, 409, 413},
    "get /api/kiwi/search/semantic": {400},
    "post /api/kiwi/search/semantic": {400, 413},
    "get /api/kiwi/search/hybrid": {400},
    "get /api/kiwi/brief": {400},
    "post /api/kiwi/memory/claim": {400, 413},
    "post /api/kiwi/memory/release": {400, 404, 409, 413},
    "get /api/kiwi/memory/lineage": {400, 404},
    "post /api/kiwi/claim": {400, 404, 409, 413},
    "delete /api/kiwi/claim": {400, 404, 409},
}
CREATED = {"post /api/kiwi/memory/remember"}  # answers 201, not 200
BODIES = {
    "put /api/kiwi/file": "application/octet-stream",
    "post /api/kiwi/file/append": "application/octet-stream",
    "post /api/kiwi/bulk": "application/json",
    "post /api/kiwi/rename": "application/json",
    "post /api/kiwi/memory/merge": "application/json",
    "post /api/kiwi/memory/remember": "application/json",
    "post /api/kiwi/memory/forget": "application/json",
    "post /api/kiwi/memory/restore": "application/json",
    "post /api/kiwi/search/semantic": "application/json",
    "post /api/kiwi/memory/claim": "application/json",
    "post /api/kiwi/memory/release": "application/json",
    "post /api/kiwi/claim": "application/json",
}


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Path:
    """One root for the module (the knowledge template), and below one open and one keyed app on
    it: the tests only read (the document, the docs pages, a meta listing), and an app costs
    ~0.15 CPU-s to build and route its first request. Each test still makes its own client (its
    own cookies)."""
    path = tmp_path_factory.mktemp("openapi") / "kb"
    Knowledge.init(path)
    return path


@pytest.fixture(scope="module")
def apps(shared_root: Path) -> Iterator[dict[str | None, FastAPI]]:
    """The app without a key and the app with ``KEY``, by key."""
    with Knowledge.open(shared_root) as kb:
        yield {None: create_app(kb), KEY: create_app(kb, api_key=KEY)}


@pytest.fixture
def client_for(apps: dict[str | None, FastAPI]) -> Callable[..., httpx.AsyncClient]:
    def make(api_key: str | None = None) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=apps[api_key])
        return httpx.AsyncClient(transport=transport, base_url="http://kiwi")

    return make


@pytest.fixture
async def document(
    client_for: Callable[..., httpx.AsyncClient],
) -> AsyncIterator[dict[str, Any]]:
    async with client_for() as client:
        resp = await client.get("/openapi.json")
        assert resp.status_code == 200
        yield resp.json()


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{method} {path}": op
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    }


async def test_no_route_announces_a_422(document: dict[str, Any]) -> None:
    assert all("422" not in op["responses"] for op in operations(document).values())
    assert "HTTPValidationError" not in document["components"]["schemas"]


async def test_every_error_answer_is_the_error_body(document: dict[str, Any]) -> None:
    assert document["components"]["schemas"]["ErrorBody"] == {
        "properties": {"error": {"title": "Error", "type": "string"}},
        "required": ["error"],
        "title": "ErrorBody",
        "type": "object",
        "description": document["components"]["schemas"]["ErrorBody"]["description"],
    }
    for name, op in operations(document).items():
        for status, response in op["responses"].items():
            if int(status) >= 400 and (name, status) not in PROBES:
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (name, status)


async def test_routes_document_their_real_statuses(document: dict[str, Any]) -> None:
    ops = operations(document)
    for name, op in ops.items():
        statuses = {int(s) for s in op["responses"]}
        if " /api/kiwi/" in name:
            assert {201 if name in CREATED else 200, 401, 403, 500, 503} <= statuses, name
        assert REQUIRED.get(name, set()) <= statuses, name
    assert set(REQUIRED) <= set(ops)


async def test_health_describes_its_degraded_answer(document: dict[str, Any]) -> None:
    degraded = document["paths"]["/health"]["get"]["responses"]["503"]
    assert "degraded" in degraded["description"]
    assert degraded["content"]["application/json"]["schema"] == {"type": "object"}


async def test_bodies_and_headers_are_described(document: dict[str, Any]) -> None:
    ops = operations(document)
    for name, media in BODIES.items():
        assert media in ops[name]["requestBody"]["content"], name
    headers = {p["name"] for p in ops["put /api/kiwi/file"]["parameters"] if p["in"] == "header"}
    assert headers == {"X-Actor", "If-Match", "If-None-Match", "X-Provenance"}


ORDERS = [("asc", 200), ("DESC", 200), (" desc ", 200), ("", 200), ("sideways", 400), (" ", 400)]


async def test_meta_order_is_asc_or_desc(client_for: Client, document: dict[str, Any]) -> None:
    """The document once said ``enum: [asc, desc]`` while the server also takes ``""`` (asc) and
    any case: its pattern must accept exactly what the server accepts."""
    (order,) = [
        p for p in operations(document)["get /api/kiwi/meta"]["parameters"] if p["name"] == "order"
    ]
    pattern = re.compile(order["schema"]["pattern"])
    async with client_for() as client:
        for value, status in ORDERS:
            resp = await client.get("/api/kiwi/meta", params={"order": value})
            assert resp.status_code == status, (value, resp.text)
            assert (pattern.search(value) is not None) == (status == 200), value


# (operation, where, name, a request refusing it empty): each required string the server refuses
# empty must say minLength 1 in the document
EMPTY_REFUSED = [
    ("get /api/kiwi/file", "query", "path", ("GET", "/api/kiwi/file", {"path": ""}, None)),
    ("put /api/kiwi/file", "query", "path", ("PUT", "/api/kiwi/file", {"path": ""}, None)),
    ("delete /api/kiwi/file", "query", "path", ("DELETE", "/api/kiwi/file", {"path": ""}, None)),
    (
        "post /api/kiwi/file/append",
        "query",
        "path",
        ("POST", "/api/kiwi/file/append", {"path": ""}, None),
    ),
    ("get /api/kiwi/versions", "query", "path", ("GET", "/api/kiwi/versions", {"path": ""}, None)),
    (
        "get /api/kiwi/version",
        "query",
        "path",
        ("GET", "/api/kiwi/version", {"path": "", "version": "HEAD"}, None),
    ),
    (
        "get /api/kiwi/version",
        "query",
        "version",
        ("GET", "/api/kiwi/version", {"path": "index.md", "version": ""}, None),
    ),
    (
        "get /api/kiwi/diff",
        "query",
        "path",
        ("GET", "/api/kiwi/diff", {"path": "", "from": "HEAD", "to": "HEAD"}, None),
    ),
    (
        "get /api/kiwi/diff",
        "query",
        "from",
        ("GET", "/api/kiwi/diff", {"path": "index.md", "from": "", "to": "HEAD"}, None),
    ),
    (
        "get /api/kiwi/diff",
        "query",
        "to",
        ("GET", "/api/kiwi/diff", {"path": "index.md", "from": "HEAD", "to": ""}, None),
    ),
    ("get /api/kiwi/search", "query", "q", ("GET", "/api/kiwi/search", {"q": ""}, None)),
    ("delete /api/kiwi/claim", "query", "path", ("DELETE", "/api/kiwi/claim", {"path": ""}, None)),
    (
        "post /api/kiwi/memory/remember",
        "body",
        "content",
        ("POST", "/api/kiwi/memory/remember", None, {"content": ""}),
    ),
    (
        "post /api/kiwi/memory/claim",
        "body",
        "worker",
        ("POST", "/api/kiwi/memory/claim", None, {"worker": ""}),
    ),
    (
        "post /api/kiwi/memory/release",
        "body",
        "worker",
        ("POST", "/api/kiwi/memory/release", None, {"worker": ""}),
    ),
    (
        "post /api/kiwi/bulk",
        "body",
        "files.path",
        ("POST", "/api/kiwi/bulk", None, {"files": [{"path": ""}]}),
    ),
]


def schema_of(op: dict[str, Any], where: str, name: str) -> dict[str, Any]:
    if where == "query":
        (param,) = [p for p in op["parameters"] if p["name"] == name and p["in"] == "query"]
        assert param["required"]
        return dict(param["schema"])
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    *outer, last = name.split(".")
    for part in outer:
        schema = schema["properties"][part]["items"]
    assert last in schema["required"]
    return dict(schema["properties"][last])


@pytest.mark.parametrize(("op", "where", "name", "request_"), EMPTY_REFUSED)
async def test_required_strings_the_server_refuses_empty_say_so(
    client_for: Client, document: dict[str, Any], op: str, where: str, name: str, request_: Any
) -> None:
    """27 operations refused empty required strings the document allowed."""
    assert schema_of(operations(document)[op], where, name).get("minLength") == 1
    method, url, params, body = request_
    async with client_for() as client:
        resp = await client.request(method, url, params=params, json=body)
    assert resp.status_code == 400, resp.text


async def test_every_required_string_in_the_document_is_non_empty(document: dict[str, Any]) -> None:
    for name, op in operations(document).items():
        for param in op.get("parameters", []):
            if param["required"] and param["schema"].get("type") == "string":
                assert param["schema"].get("minLength") == 1, (name, param["name"])


@pytest.mark.parametrize("web", [True, False], ids=["with-web", "api-only"])
async def test_a_method_a_path_lacks_is_405_with_allow(tmp_path: Path, web: bool) -> None:
    """TRACE of an API path was answered 404 by the web interface's mount at ``/``."""
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    with Knowledge.open(root) as kb:
        transport = httpx.ASGITransport(app=create_app(kb, web=web))
        async with httpx.AsyncClient(transport=transport, base_url="http://kiwi") as client:
            for method, path, allow in [
                ("TRACE", "/api/kiwi/file", "GET, PUT, DELETE"),
                ("PATCH", "/api/kiwi/file", "GET, PUT, DELETE"),
                ("POST", "/api/kiwi/tree", "GET"),
                ("DELETE", "/health", "GET"),
                ("TRACE", "/openapi.json", "GET"),
            ]:
                resp = await client.request(method, path)
                assert resp.status_code == 405, (method, path, resp.text)
                assert resp.headers["allow"] == allow and resp.json() == {
                    "error": "Method Not Allowed"
                }
            assert (await client.request("TRACE", "/api/kiwi/nope")).status_code == 404
            if web:
                page = await client.request("TRACE", "/queue")
                assert page.status_code == 405 and page.headers["allow"] == "GET"


async def test_a_file_that_is_not_markdown_is_sent_as_bytes(
    shared_root: Path, client_for: Client
) -> None:
    (shared_root / "data.bin").write_bytes(b"\x00\x01")
    async with client_for() as client:
        resp = await client.get("/api/kiwi/file", params={"path": "data.bin"})
    assert resp.headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize("route", DOC_ROUTES)
async def test_the_document_and_its_pages_need_the_key(client_for: Client, route: str) -> None:
    async with client_for(KEY) as client:
        refused = await client.get(route)
        assert refused.status_code == 401
        assert refused.json() == {"error": "invalid API key"}
        allowed = await client.get(route, headers={"Authorization": f"Bearer {KEY}"})
        assert allowed.status_code == 200
        assert (await client.get("/health")).status_code == 200


@pytest.mark.parametrize("route", DOC_ROUTES)
async def test_without_a_key_the_document_is_open(client_for: Client, route: str) -> None:
    async with client_for() as client:
        assert (await client.get(route)).status_code == 200


async def test_a_keyed_document_names_the_bearer_scheme(client_for: Client) -> None:
    async with client_for(KEY) as client:
        resp = await client.get("/openapi.json", headers={"Authorization": f"Bearer {KEY}"})
    doc = resp.json()
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for name, op in operations(doc).items():
        assert (op.get("security") == [{"bearer": []}]) == (" /api/kiwi/" in name), name


async def test_a_web_session_opens_the_docs_but_not_the_api(client_for: Client) -> None:
    """A browser cannot send a bearer header: signed in at /login, it may read /docs."""
    async with client_for(KEY) as client:
        login = await client.post("/login", data={"key": KEY, "next": "/"})
        assert login.status_code in (302, 303) and "kiwifs_session" in client.cookies
        for route in DOC_ROUTES:
            assert (await client.get(route)).status_code == 200, route
        assert (await client.get("/api/kiwi/tree")).status_code == 401


async def test_redoc_is_not_served(client_for: Client) -> None:
    async with client_for() as client:
        assert (await client.get("/redoc")).status_code == 404
