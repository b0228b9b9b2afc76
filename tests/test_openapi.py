"""The OpenAPI document describes the server as it answers, and sits behind the API key.

It once listed only ``200`` and ``422`` while the server answers 400/404/409/413 and never 422.
test_fuzz.py checks real answers against the document; these tests pin its shape.
"""

from __future__ import annotations

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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Path:
    """One blank root for the module, and below one open and one keyed app on it: the tests only
    read (the document, the docs pages, a meta listing), and an app costs ~0.15 CPU-s to build
    and route its first request. Each test still makes its own client (its own cookies)."""
    path = tmp_path_factory.mktemp("openapi") / "kb"
    Knowledge.init(path)
    return path


@pytest.fixture(scope="module")
def apps(root: Path) -> Iterator[dict[str | None, FastAPI]]:
    """The app without a key and the app with ``KEY``, by key."""
    with Knowledge.open(root) as kb:
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
    order = [p for p in ops["get /api/kiwi/meta"]["parameters"] if p["name"] == "order"]
    assert order[0]["schema"]["enum"] == ["asc", "desc"]


async def test_meta_order_is_asc_or_desc(client_for: Client) -> None:
    async with client_for() as client:
        for order, status in [("asc", 200), ("DESC", 200), ("", 200), ("sideways", 400)]:
            resp = await client.get("/api/kiwi/meta", params={"order": order})
            assert resp.status_code == status, (order, resp.text)


async def test_a_file_that_is_not_markdown_is_sent_as_bytes(root: Path, client_for: Client) -> None:
    (root / "data.bin").write_bytes(b"\x00\x01")
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
