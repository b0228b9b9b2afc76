"""Hostile input gets a 4xx with a clear message and changes nothing; a real fault is a clean 500.

Each case is an input an adversarial run answered with a 500 (often plain text, sometimes
breaking the next request on the connection). REST runs in process (httpx's ASGI transport on
the real app), MCP through the server's tools with the SDK's in-process client; the keep-alive
test needs a real uvicorn.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.types import TextContent

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.server import build_server
from kiwifs.rest.app import create_app
from realserver import in_thread
from vectorkit import build_model, local_config

API = "/api/kiwi"
BIG = str(2**63)
DEEP = b"[" * 100_000 + b"]" * 100_000
LONG_PATH = "/".join(["d" * 200] * 30) + ".md"  # every segment legal, the whole over PATH_MAX
BAD_UTF8 = b"---\ntitle: caf\xe9\n---\n# Latin-1, not UTF-8\n"

pytestmark = pytest.mark.anyio


def seeded(root: Path) -> Knowledge:
    Knowledge.init(root)
    knowledge = Knowledge.open(root)
    knowledge.write("latin1.md", BAD_UTF8, actor="seed")
    return knowledge


@pytest.fixture(scope="module")
def shared_kb(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[Knowledge]:
    """One root, app and MCP server for every refusal in this module.

    Sharing is sound because every case must change nothing, and each one checks that for
    itself (HEAD and ``latin1.md`` before and after its own request); building an app costs
    ~0.15 CPU-s, paid once here instead of once per case.
    """
    knowledge = seeded(tmp_path_factory.mktemp("validation") / "kb")
    yield knowledge
    knowledge.close()


@pytest.fixture(scope="module")
def app(shared_kb: Knowledge) -> FastAPI:
    return create_app(shared_kb)  # no lifespan here: it would close the shared root


@pytest.fixture(scope="module")
def mcp_server(shared_kb: Knowledge) -> Any:
    return build_server(shared_kb)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://kiwi") as c:
        yield c


def head(root: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def raw_json(text: str) -> dict[str, Any]:
    """A request whose JSON body is ``text`` as written (escapes such as ``\\ud800`` kept)."""
    return {"content": text.encode(), "headers": {"content-type": "application/json"}}


# (method, route, request, status, message)
REST_CASES: list[tuple[str, str, dict[str, Any], int, str]] = [
    (
        "PUT",
        "/file",
        {
            "params": {"path": "latin1.md"},
            "content": BAD_UTF8,
            "headers": {"X-Provenance": "run:1"},
        },
        400,
        "frontmatter is not valid UTF-8",
    ),
    (
        "POST",
        "/memory/merge",
        {"json": {"path": "latin1.md", "entries": [{"id": "ep-1"}]}},
        400,
        "frontmatter is not valid UTF-8",
    ),
    ("GET", "/search", {"params": {"q": "x", "offset": BIG}}, 400, "offset must be at most"),
    ("GET", "/search", {"params": {"q": "x", "limit": BIG}}, 400, "limit must be at most"),
    ("GET", "/meta", {"params": {"offset": BIG}}, 400, "offset must be at most"),
    ("GET", "/meta", {"params": {"limit": BIG}}, 400, "limit must be at most"),
    ("GET", "/memory/report", {"params": {"offset": BIG}}, 400, "offset must be at most"),
    ("GET", "/memory/report", {"params": {"limit": BIG}}, 400, "limit must be at most"),
    ("POST", "/bulk", {"content": DEEP}, 400, "invalid JSON body: nested too deeply"),
    ("POST", "/rename", {"content": DEEP}, 400, "invalid JSON body: nested too deeply"),
    (
        "POST",
        "/bulk",
        raw_json('{"files": [{"path": "s.md", "content": "a\\ud800b"}]}'),
        400,
        "content is not valid Unicode text: lone surrogate U+D800 at character 1",
    ),
    (
        "POST",
        "/bulk",
        raw_json('{"files": [{"path": "\\udfff.md", "content": "x"}]}'),
        400,
        "path is not valid Unicode text: lone surrogate U+DFFF",
    ),
    (
        "POST",
        "/rename",
        raw_json('{"from": "index.md", "to": "x\\ud800.md"}'),
        400,
        "to is not valid Unicode text",
    ),
    (
        "POST",
        "/memory/merge",
        raw_json('{"path": "m.md", "entries": [{"id": "\\ud800"}]}'),
        400,
        "merged-from entry id is not valid Unicode text",
    ),
    (
        "POST",
        "/memory/merge",
        raw_json('{"path": "m.md", "entries": [{"id": ' + "9" * 5000 + "}]}"),
        400,
        "invalid JSON body: Exceeds the limit (4300 digits)",
    ),
    (
        "POST",
        "/bulk",
        {"content": b'{"files": [{"path": "a.md", "content": "\xff"}]}'},
        400,
        "invalid JSON body: not UTF-8",
    ),
    (
        "GET",
        "/diff",
        {"params": {"path": "index.md", "from": "HEAD\x00", "to": "HEAD"}},
        400,
        "invalid version",
    ),
    (
        "GET",
        "/version",
        {"params": {"path": "index.md", "version": "HEAD\x00"}},
        400,
        "invalid version",
    ),
    (
        "PUT",
        "/file",
        {"params": {"path": LONG_PATH}, "content": b"x"},
        400,
        "path is too long for the filesystem",
    ),
    ("GET", "/file", {"params": {"path": LONG_PATH}}, 400, "path is too long"),
    (
        "PUT",
        "/file",
        {"params": {"path": "index.md/x.md"}, "content": b"x"},
        400,
        "a parent of index.md/x.md is a file, not a folder",
    ),
    (
        "POST",
        "/bulk",
        {"json": {"files": [{"path": "index.md/x.md", "content": "x"}]}},
        400,
        "a parent of index.md/x.md is a file",
    ),
    (
        "POST",
        "/rename",
        {"json": {"from": "index.md", "to": "SCHEMA.md/index.md"}},
        400,
        "a parent of SCHEMA.md/index.md is a file",
    ),
    ("GET", "/meta", {"params": {"order": "sideways"}}, 400, "order must be 'asc' or 'desc'"),
]


@pytest.mark.parametrize(
    ("method", "route", "request_", "status", "message"),
    REST_CASES,
    ids=[f"{m} {r} {msg[:30]}" for m, r, _, _, msg in REST_CASES],
)
async def test_rest_refuses_with_a_json_4xx_and_writes_nothing(
    client: httpx.AsyncClient,
    shared_kb: Knowledge,
    method: str,
    route: str,
    request_: dict[str, Any],
    status: int,
    message: str,
) -> None:
    before = head(shared_kb.root)
    resp = await client.request(method, API + route, **request_)
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert list(resp.json()) == ["error"]
    assert message in resp.json()["error"]
    assert head(shared_kb.root) == before
    assert (shared_kb.root / "latin1.md").read_bytes() == BAD_UTF8


async def test_changes_caps_a_huge_limit_as_kiwifs_does(client: httpx.AsyncClient) -> None:
    resp = await client.get(API + "/changes", params={"limit": BIG})
    assert resp.status_code == 200
    assert 1 <= len(resp.json()["changes"]) <= 500


async def test_a_semantic_threshold_beyond_float32_is_no_error(tmp_path: Path) -> None:
    """Scores are float32: a threshold of 1e308 overflowed when compared (fuzzing found it)."""
    root = tmp_path / "vkb"
    Knowledge.init(root)
    (root / ".kiwi" / "config.toml").write_text(local_config(build_model(tmp_path / "model")))
    kb = Knowledge.open(root)
    kb.write("birds.md", "# Kiwi\n\nThe kiwi is a flightless bird.\n", actor="seed")
    transport = httpx.ASGITransport(app=create_app(kb))
    async with httpx.AsyncClient(transport=transport, base_url="http://kiwi") as client:
        for threshold in ("1.7976931348623157e308", "-1.7976931348623157e308"):
            params = {"q": "kiwi bird", "threshold": threshold}
            resp = await client.get(API + "/search/semantic", params=params)
            assert resp.status_code == 200, resp.text
            assert (resp.json()["results"] == []) == threshold.startswith("1")
    kb.close()


# -- MCP, through the server's tools (in process) -----------------------------------------------

SURROGATE = "\ud800"
MCP_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("kiwi_search", {"query": "x", "offset": 2**63}, "offset must be at most"),
    ("kiwi_query_meta", {"offset": 2**63}, "offset must be at most"),
    ("kiwi_memory_report", {"limit": 2**63}, "limit must be at most"),
    ("kiwi_memory_report", {"offset": 2**63}, "offset must be at most"),
    ("kiwi_search", {"query": SURROGATE}, "search query is not valid Unicode"),
    ("kiwi_query_meta", {"filters": [f"$.a={SURROGATE}"]}, "filter[0] is not valid Unicode"),
    ("kiwi_write", {"path": "a.md", "content": SURROGATE}, "content is not valid Unicode"),
    ("kiwi_write", {"path": f"{SURROGATE}.md", "content": "x"}, "path is not valid Unicode"),
    (
        "kiwi_write",
        {"path": "a.md", "content": "x", "provenance": f"run:{SURROGATE}"},
        "X-Provenance is not valid Unicode",
    ),
    ("kiwi_append", {"path": "a.md", "content": "x", "separator": SURROGATE}, "separator is"),
    (
        "kiwi_bulk_write",
        {"files": [{"path": "b.md", "content": SURROGATE}]},
        "content is not valid Unicode",
    ),
    ("kiwi_rename", {"from": "index.md", "to": SURROGATE}, "path is not valid Unicode"),
    (
        "kiwi_memory_merge",
        {"path": "m.md", "entries": [{"id": SURROGATE}]},
        "merged-from entry id is not valid Unicode",
    ),
    (
        "kiwi_memory_merge",
        {"path": "latin1.md", "entries": [{"id": "ep-1"}]},
        "frontmatter is not valid UTF-8",
    ),
    ("kiwi_remember", {"content": SURROGATE}, "content is not valid Unicode"),
    ("kiwi_write", {"path": LONG_PATH, "content": "x"}, "path is too long for the filesystem"),
    ("kiwi_read", {"path": LONG_PATH}, "path is too long for the filesystem"),
    ("kiwi_write", {"path": "index.md/x.md", "content": "x"}, "a parent of index.md/x.md"),
]


@pytest.mark.parametrize(("name", "args", "message"), MCP_CASES, ids=[c[2][:40] for c in MCP_CASES])
async def test_mcp_answers_a_tool_error(
    shared_kb: Knowledge,
    mcp_server: Any,
    name: str,
    args: dict[str, Any],
    message: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    before = head(shared_kb.root)
    async with Client(mcp_server) as client:
        result = await client.call_tool(name, args)
    assert result.is_error
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert message in block.text
    assert "Traceback" not in capfd.readouterr().err  # an expected failure, not a crash
    assert head(shared_kb.root) == before


# -- a real server fault ------------------------------------------------------------------------


def faulty_route(app: FastAPI, _: Any) -> None:
    """An extra route that fails like a bug would (a non-KiwiError exception)."""

    @app.get("/fault")
    async def fault() -> None:
        raise RuntimeError("simulated bug")


def http_get(sock: socket.socket, path: str) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on an open keep-alive connection, and its response."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head_, _, body = data.partition(b"\r\n\r\n")
    lines = head_.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_a_server_fault_is_a_logged_json_500_and_the_connection_lives_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a root of its own: uvicorn runs the app's lifespan, which closes the root at shutdown
    app = create_app(seeded(tmp_path / "kb"), extra_mounts=faulty_route)
    with in_thread(app) as base, caplog.at_level(logging.ERROR, logger="kiwifs.rest"):
        address = httpx.URL(base)
        with socket.create_connection((address.host, address.port), timeout=30) as sock:
            status, headers, body = http_get(sock, "/fault")
            assert (status, headers["content-type"]) == (500, "application/json")
            assert json.loads(body) == {"error": "internal server error"}
            # the same connection still answers
            assert http_get(sock, "/health")[0] == 200
    (record,) = [r for r in caplog.records if r.name == "kiwifs.rest"]
    assert record.exc_info is not None and "simulated bug" in str(record.exc_info[1])
