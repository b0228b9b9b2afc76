"""The REST interface: every route in-process, and a few real ``kiwifs serve`` smoke tests.

Routes are exercised in-process: the app ``create_app`` builds, called through httpx's ASGI
transport with its lifespan running (the watcher starts, the root is closed at shutdown), as
``kiwifs serve`` runs it, minus the socket. One app serves a ``kiwifs init``-ed root for the
whole module and each test uses its own paths; auth, the concurrency test and failing commits
get apps of their own. What needs a real server process is tested against the installed
``kiwifs serve`` on 127.0.0.1: start-up (crash recovery, the key from the environment), the SSE
stream, a second server on the same root, and shutdown on SIGTERM with commits pending. Nothing
of ours is mocked.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import realserver
from asgiclient import AppClient, serve_in_process
from gitrepo import break_object_store_for, commit_count, git
from kiwifs.git.repo import blob_id
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.server.lifecycle import Serving
from realserver import KIWIFS

API = "/api/kiwi"
MiB = 1024 * 1024
CONFLICT = "file modified since last read \u2014 re-fetch and retry"
LIVE_KEY = "live-env-key"

Client = AppClient | httpx.Client


# -- in-process apps ----------------------------------------------------------------------------


def init_root(path: Path) -> Path:
    Knowledge.init(path)
    return path


@dataclass
class App:
    """An in-process app over one root; ``client()`` gives a client with default headers."""

    root: Path
    kb: Knowledge
    base: AppClient

    @contextmanager
    def client(self, **headers: str) -> Iterator[AppClient]:
        yield self.base.with_headers(**headers)


@contextmanager
def in_process(root: Path, api_key: str | None = None, async_commit: bool = False) -> Iterator[App]:
    """The app of ``kiwifs serve`` over ``root``, served in-process until the block ends."""
    kb = Knowledge.open(root)
    kb.ensure_versioned()
    if async_commit:
        Serving(kb).enable_async_commit(window=30.0)
    with serve_in_process(create_app(kb, api_key=api_key)) as client:
        yield App(root, kb, client)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[App]:
    with in_process(init_root(tmp_path_factory.mktemp("rest") / "kb")) as app:
        yield app


@pytest.fixture(scope="module")
def client(server: App) -> AppClient:
    return server.base


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory, server: App) -> Path:
    """A folder outside the root, reachable from it through two symlinks."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "secret.md").write_text("secret")
    (server.root / "outlink").symlink_to(folder, target_is_directory=True)
    (server.root / "outfile.md").symlink_to(folder / "secret.md")
    return folder


def put(client: Client, path: str, body: bytes | str, **headers: str) -> httpx.Response:
    return client.put(f"{API}/file", params={"path": path}, content=body, headers=headers)


def get(client: Client, path: str, **headers: str) -> httpx.Response:
    return client.get(f"{API}/file", params={"path": path}, headers=headers)


def error_of(resp: httpx.Response) -> str:
    assert resp.headers["content-type"].startswith("application/json"), resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"], str) and body["error"]
    return str(body["error"])


def versions(client: Client, path: str) -> list[dict[str, str]]:
    resp = client.get(f"{API}/versions", params={"path": path})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["versions"])


# -- health and the route inventory -------------------------------------------------------------


def test_health(client: AppClient) -> None:
    resp = client.get("/health")
    assert resp.status_code == 200
    assert resp.json() == {
        "status": "ok",
        "commits": {"pending": 0, "failing": False},
        "vectors": {"enabled": False},
    }


def api_routes(tmp_path: Path) -> set[str]:
    """Every ``METHOD /api/kiwi/...`` of the app, from its OpenAPI schema.

    (``app.routes`` is not enough: recent FastAPI wraps included routers in an object that is
    not an ``APIRoute``.)
    """
    app = create_app(Knowledge(tmp_path))
    return {
        f"{method.upper()} {path}"
        for path, operations in app.openapi()["paths"].items()
        if path.startswith(API)
        for method in operations
    }


def test_every_route_is_documented(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "rest.md").read_text()
    routes = api_routes(tmp_path)
    assert routes
    assert [r for r in sorted(routes) if f"### {r}" not in text] == []


def test_auth_cases_cover_every_route(tmp_path: Path) -> None:
    covered = {f"{method} {API}{path}" for method, path, _ in AUTH_CASES}
    assert api_routes(tmp_path) == covered


# -- GET /file ----------------------------------------------------------------------------------


def test_get_file_headers_and_body(client: AppClient) -> None:
    body = b"# Get\n\nbody \xc3\xa9\n"
    assert put(client, "get/a.md", body).status_code == 200
    resp = get(client, "get/a.md")
    assert resp.status_code == 200
    assert resp.content == body
    assert resp.headers["content-type"] == "text/markdown; charset=utf-8"
    assert resp.headers["etag"] == f'"{blob_id(body)}"'
    assert resp.headers["cache-control"] == "no-cache"
    modified = parsedate_to_datetime(resp.headers["last-modified"])
    assert abs(modified.timestamp() - time.time()) < 3600
    # one leading slash is dropped
    assert get(client, "/get/a.md").content == body


@pytest.mark.parametrize("form", ['"{}"', "{}", 'W/"{}"', '"other", "{}"', "*"])
def test_get_file_not_modified(client: AppClient, form: str) -> None:
    etag = put(client, "get/cached.md", b"cached").json()["etag"]
    resp = get(client, "get/cached.md", **{"If-None-Match": form.format(etag)})
    assert resp.status_code == 304
    assert resp.content == b""
    assert resp.headers["etag"] == f'"{etag}"'


def test_get_file_if_none_match_other_etag_is_200(client: AppClient) -> None:
    put(client, "get/cached2.md", b"x")
    assert get(client, "get/cached2.md", **{"If-None-Match": '"nope"'}).status_code == 200


def test_get_file_if_modified_since(client: AppClient) -> None:
    put(client, "get/ims.md", b"x")
    last = get(client, "get/ims.md").headers["last-modified"]
    assert get(client, "get/ims.md", **{"If-Modified-Since": last}).status_code == 304
    old = "Mon, 01 Jan 2001 00:00:00 GMT"
    assert get(client, "get/ims.md", **{"If-Modified-Since": old}).status_code == 200
    assert get(client, "get/ims.md", **{"If-Modified-Since": "garbage"}).status_code == 200


def test_get_file_metadata_only(client: AppClient) -> None:
    put(client, "get/fm.md", b"---\ntitle: T\ntags: [a, b]\ncount: 3\n---\nbody\n")
    resp = client.get(f"{API}/file", params={"path": "get/fm.md", "metadata_only": "true"})
    assert resp.status_code == 200
    assert resp.json() == {"title": "T", "tags": ["a", "b"], "count": 3}
    assert resp.headers["etag"].startswith('"')
    put(client, "get/nofm.md", b"plain\n")
    resp = client.get(f"{API}/file", params={"path": "get/nofm.md", "metadata_only": "true"})
    assert resp.json() == {}


def test_get_file_errors(client: AppClient) -> None:
    resp = get(client, "get/missing.md")
    assert resp.status_code == 404
    assert "not found" in error_of(resp)
    resp = client.get(f"{API}/file")
    assert resp.status_code == 400
    assert "path is required" in error_of(resp)
    resp = client.get(f"{API}/file", params={"path": "get/a.md", "metadata_only": "maybe"})
    assert resp.status_code == 400
    assert "metadata_only" in error_of(resp)


# -- PUT /file ----------------------------------------------------------------------------------


def test_put_file(client: AppClient, server: App) -> None:
    resp = put(client, "/put/new.md", b"# New\n", **{"X-Actor": "agent:put"})
    assert resp.status_code == 200
    etag = blob_id(b"# New\n")
    assert resp.json() == {"path": "put/new.md", "etag": etag}
    assert resp.headers["etag"] == f'"{etag}"'
    assert (server.root / "put/new.md").read_bytes() == b"# New\n"
    (latest,) = versions(client, "put/new.md")
    assert latest["author"] == "agent:put"
    assert latest["message"] == "agent:put: put/new.md"


def test_put_without_actor_is_anonymous(client: AppClient) -> None:
    put(client, "put/anon.md", b"x", **{"X-Actor": ""})
    assert versions(client, "put/anon.md")[0]["author"] == "anonymous"


def test_put_with_provenance(client: AppClient, server: App) -> None:
    headers = {"X-Provenance": "run:run-249", "X-Actor": "agent:exec_abc"}
    resp = put(client, "runs/run-249.md", b"# Run 249\n", **headers)
    assert resp.status_code == 200
    text = get(client, "runs/run-249.md").text
    assert "derived-from:" in text and "id: run-249" in text and "actor: agent:exec_abc" in text
    assert text.endswith("---\n# Run 249\n")
    assert resp.json()["etag"] == blob_id(text.encode())
    message = git(server.root, "log", "-1", "--format=%B", "--", "runs/run-249.md")
    assert "Provenance: run:run-249" in message


def test_put_with_provenance_is_idempotent_on_retry(client: AppClient) -> None:
    headers = {"X-Provenance": "run:retry-1", "X-Actor": "agent:r"}
    for _ in range(3):
        assert put(client, "runs/retry.md", b"# Retry\n", **headers).status_code == 200
    text = get(client, "runs/retry.md").text
    assert text.count("id: retry-1") == 1
    # an agent that reads the file and writes it back with the same header adds nothing
    etag_before = get(client, "runs/retry.md").headers["etag"]
    resp = put(client, "runs/retry.md", text.encode(), **headers)
    assert resp.headers["etag"] == etag_before
    assert get(client, "runs/retry.md").text == text


def test_put_blank_provenance_is_ignored(client: AppClient) -> None:
    assert put(client, "put/blank.md", b"x", **{"X-Provenance": ""}).status_code == 200
    assert get(client, "put/blank.md").content == b"x"


@pytest.mark.parametrize("value", ["runid", "run:", ":run-1"])
def test_put_malformed_provenance_is_400_and_nothing_written(
    client: AppClient, server: App, value: str
) -> None:
    before = commit_count(server.root)
    resp = put(client, "put/badprov.md", b"x", **{"X-Provenance": value})
    assert resp.status_code == 400
    assert "type:id" in error_of(resp)
    assert get(client, "put/badprov.md").status_code == 404
    assert commit_count(server.root) == before


def test_put_provenance_into_bad_frontmatter_is_400(client: AppClient) -> None:
    for body in (b"---\n- a\n---\nbody\n", b"---\ntitle: x\nnever closed\n"):
        resp = put(client, "put/badfm.md", body, **{"X-Provenance": "run:1"})
        assert resp.status_code == 400
        assert "frontmatter" in error_of(resp)
    assert get(client, "put/badfm.md").status_code == 404


def test_put_if_match(client: AppClient, server: App) -> None:
    etag = put(client, "put/im.md", b"v1").json()["etag"]
    resp = put(client, "put/im.md", b"v2", **{"If-Match": f'"{etag}"'})
    assert resp.status_code == 200
    new = resp.json()["etag"]
    assert put(client, "put/im.md", b"v3", **{"If-Match": f'W/"{new}"'}).status_code == 200
    assert put(client, "put/im.md", b"v4", **{"If-Match": "*"}).status_code == 200
    fresh = put(client, "put/im-new.md", b"created", **{"If-Match": '"0123456789abcdef"'})
    assert fresh.status_code == 200


def test_put_if_match_conflict_leaves_the_file(client: AppClient, server: App) -> None:
    old = put(client, "put/conflict.md", b"v1").json()["etag"]
    put(client, "put/conflict.md", b"v2")
    before = commit_count(server.root)
    resp = put(
        client, "put/conflict.md", b"v3", **{"If-Match": f'"{old}"', "X-Provenance": "run:1"}
    )
    assert resp.status_code == 409
    assert error_of(resp) == CONFLICT
    assert get(client, "put/conflict.md").content == b"v2"
    assert commit_count(server.root) == before


def test_put_if_none_match_star_creates_only(client: AppClient, server: App) -> None:
    assert put(client, "put/once.md", b"first", **{"If-None-Match": "*"}).status_code == 200
    before = commit_count(server.root)
    resp = put(client, "put/once.md", b"second", **{"If-None-Match": "*"})
    assert resp.status_code == 409
    assert error_of(resp) == "file already exists: put/once.md"
    assert get(client, "put/once.md").content == b"first"
    assert commit_count(server.root) == before


@pytest.mark.parametrize("value", ['""', "W/", '"a", ""'])
def test_put_malformed_if_match_is_400(client: AppClient, value: str) -> None:
    resp = put(client, "put/badim.md", b"x", **{"If-Match": value})
    assert resp.status_code == 400
    assert "If-Match" in error_of(resp)
    assert get(client, "put/badim.md").status_code == 404


def test_put_over_32_mib_is_413(client: AppClient, server: App) -> None:
    before = commit_count(server.root)
    resp = put(client, "put/huge.md", b"x" * (32 * MiB + 1))
    assert resp.status_code == 413
    assert "32 MiB limit" in error_of(resp)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted while reading
        for _ in range(33):
            yield b"y" * MiB

    resp = client.put(f"{API}/file", params={"path": "put/huge.md"}, content=chunks())
    assert resp.status_code == 413
    assert get(client, "put/huge.md").status_code == 404
    assert commit_count(server.root) == before


def test_put_missing_path_is_400(client: AppClient) -> None:
    resp = client.put(f"{API}/file", content=b"x")
    assert resp.status_code == 400
    assert "path is required" in error_of(resp)


# -- DELETE /file -------------------------------------------------------------------------------


def test_delete_file(client: AppClient, server: App) -> None:
    put(client, "del/a.md", b"x")
    resp = client.delete(f"{API}/file", params={"path": "/del/a.md"}, headers={"X-Actor": "eve"})
    assert resp.status_code == 200
    assert resp.json() == {"deleted": "del/a.md"}
    assert get(client, "del/a.md").status_code == 404
    assert git(server.root, "log", "-1", "--format=%an %s") == "eve delete: del/a.md\n"


def test_delete_errors(client: AppClient) -> None:
    resp = client.delete(f"{API}/file", params={"path": "del/none.md"})
    assert resp.status_code == 404
    assert error_of(resp) == "file not found"
    resp = client.delete(f"{API}/file")
    assert resp.status_code == 400
    assert "path is required" in error_of(resp)


def test_delete_if_match(client: AppClient) -> None:
    etag = put(client, "del/im.md", b"x").json()["etag"]
    resp = client.delete(f"{API}/file", params={"path": "del/im.md"}, headers={"If-Match": '"x"'})
    assert resp.status_code == 409
    assert error_of(resp) == CONFLICT
    assert get(client, "del/im.md").status_code == 200
    resp = client.delete(
        f"{API}/file", params={"path": "del/im.md"}, headers={"If-Match": f'"{etag}"'}
    )
    assert resp.status_code == 200


# -- POST /file/append --------------------------------------------------------------------------


def test_append(client: AppClient) -> None:
    url = f"{API}/file/append"
    resp = client.post(url, params={"path": "app/log.md"}, content=b"one")
    assert resp.status_code == 200
    assert resp.json() == {"path": "app/log.md", "etag": blob_id(b"one")}
    resp = client.post(url, params={"path": "app/log.md"}, content=b"two")
    two = blob_id(b"one\ntwo")
    assert resp.headers["etag"] == f'"{two}"'
    client.post(url, params={"path": "app/log.md", "separator": " | "}, content=b"three")
    assert get(client, "app/log.md").content == b"one\ntwo | three"


def test_append_errors(client: AppClient) -> None:
    url = f"{API}/file/append"
    resp = client.post(url, content=b"x")
    assert resp.status_code == 400 and "path is required" in error_of(resp)
    resp = client.post(url, params={"path": "app/big.md"}, content=b"x" * (32 * MiB + 1))
    assert resp.status_code == 413
    assert get(client, "app/big.md").status_code == 404


# -- POST /bulk ---------------------------------------------------------------------------------


def test_bulk(client: AppClient, server: App) -> None:
    before = commit_count(server.root)
    payload = {"files": [{"path": "bulk/a.md", "content": "A"}, {"path": "bulk/b.md"}]}
    headers = {"X-Provenance": "run:run-777", "X-Actor": "agent:batch"}
    resp = client.post(f"{API}/bulk", json=payload, headers=headers)
    assert resp.status_code == 200
    body = resp.json()
    assert body["count"] == 2
    assert [f["path"] for f in body["files"]] == ["bulk/a.md", "bulk/b.md"]
    for f in body["files"]:
        content = get(client, f["path"]).content
        assert f["etag"] == blob_id(content)
        assert b"id: run-777" in content
    assert commit_count(server.root) == before + 1
    assert git(server.root, "log", "-1", "--format=%an") == "agent:batch\n"


def test_bulk_actor_from_body(client: AppClient, server: App) -> None:
    payload = {"files": [{"path": "bulk/c.md", "content": "C"}], "actor": "body-actor"}
    resp = client.post(f"{API}/bulk", json=payload, headers={"X-Actor": "header-actor"})
    assert resp.status_code == 200
    assert git(server.root, "log", "-1", "--format=%an") == "body-actor\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "must be an object"),
        (b"{}", "files is required"),
        (b'{"files": []}', "files must not be empty"),
        (b'{"files": "bulk/x.md"}', "files must be a list"),
        (b'{"files": [{"content": "x"}]}', "files[0].path is required"),
        (b'{"files": [{"path": "bulk/x.md", "content": 3}]}', "files[0].content must be a string"),
        (b'{"files": [{"path": "bulk/x.md", "contents": "x"}]}', "files[0].contents is not a"),
        (b'{"files": [{"path": "bulk/x.md"}], "actor": 7}', "actor must be a string"),
        (b'{"files": [{"path": "bulk/x.md"}, {"path": "../y.md"}]}', "'..'"),
        (b'{"files": [{"path": "bulk/x.md"}, {"path": "bulk/x.md"}]}', "twice"),
    ],
)
def test_bulk_bad_input_is_400_and_writes_nothing(
    client: AppClient, server: App, body: bytes, message: str
) -> None:
    before = commit_count(server.root)
    resp = client.post(f"{API}/bulk", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    assert message in error_of(resp)
    assert get(client, "bulk/x.md").status_code == 404
    assert commit_count(server.root) == before


def test_bulk_bad_provenance_is_400(client: AppClient) -> None:
    payload = {"files": [{"path": "bulk/p.md", "content": "x"}]}
    resp = client.post(f"{API}/bulk", json=payload, headers={"X-Provenance": "nocolon"})
    assert resp.status_code == 400
    assert get(client, "bulk/p.md").status_code == 404


# -- POST /rename -------------------------------------------------------------------------------


def test_rename(client: AppClient, server: App) -> None:
    put(client, "ren/old.md", b"content")
    resp = client.post(
        f"{API}/rename", json={"from": "ren/old.md", "to": "ren/new.md"}, headers={"X-Actor": "r"}
    )
    assert resp.status_code == 200
    assert resp.json() == {"from": "ren/old.md", "to": "ren/new.md", "etag": blob_id(b"content")}
    assert get(client, "ren/old.md").status_code == 404
    assert get(client, "ren/new.md").content == b"content"
    assert (
        git(server.root, "log", "-1", "--format=%s") == "r: rename ren/old.md \u2192 ren/new.md\n"
    )


def test_rename_errors(client: AppClient) -> None:
    put(client, "ren/a.md", b"a")
    put(client, "ren/b.md", b"b")
    url = f"{API}/rename"
    cases: list[tuple[Any, int, str]] = [
        ({"from": "ren/a.md"}, 400, "to is required"),
        ({"to": "ren/c.md"}, 400, "from is required"),
        ({"from": "ren/a.md", "to": 3}, 400, "to must be a string"),
        ({"from": "", "to": "ren/c.md"}, 400, "from must not be empty"),
        ({"from": "ren/none.md", "to": "ren/c.md"}, 404, "source file not found"),
        ({"from": "ren/a.md", "to": "ren/b.md"}, 409, "already exists"),
        ({"from": "ren/a.md", "to": "../c.md"}, 400, "'..'"),
    ]
    for payload, status, message in cases:
        resp = client.post(url, json=payload)
        assert resp.status_code == status, payload
        assert message in error_of(resp)
    resp = client.post(url, content=b"nope", headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "invalid JSON" in error_of(resp)
    assert get(client, "ren/a.md").content == b"a" and get(client, "ren/b.md").content == b"b"


# -- GET /tree ----------------------------------------------------------------------------------


def test_tree(client: AppClient) -> None:
    put(client, "tree/sub/leaf.md", b"leaf")
    put(client, "tree/top.md", b"top!")
    root = client.get(f"{API}/tree").json()
    assert (root["path"], root["name"], root["isDir"]) == ("", "/", True)
    names = [c["name"] for c in root["children"]]
    assert not [n for n in names if n.startswith(".")]
    tree = client.get(f"{API}/tree", params={"path": "tree"}).json()
    assert tree == {
        "path": "tree/",
        "name": "tree",
        "isDir": True,
        "children": [
            {
                "path": "tree/sub/",
                "name": "sub",
                "isDir": True,
                "children": [
                    {"path": "tree/sub/leaf.md", "name": "leaf.md", "isDir": False, "size": 4}
                ],
            },
            {"path": "tree/top.md", "name": "top.md", "isDir": False, "size": 4},
        ],
    }


def test_tree_errors(client: AppClient) -> None:
    resp = client.get(f"{API}/tree", params={"path": "tree/none"})
    assert resp.status_code == 404 and "not found" in error_of(resp)
    put(client, "tree/file.md", b"x")
    resp = client.get(f"{API}/tree", params={"path": "tree/file.md"})
    assert resp.status_code == 400 and "not a folder" in error_of(resp)


# -- history ------------------------------------------------------------------------------------


def test_versions_version_diff(client: AppClient) -> None:
    put(client, "hist/h.md", b"one\n", **{"X-Actor": "a"})
    put(client, "hist/h.md", b"one\ntwo\n", **{"X-Actor": "b"})
    resp = client.get(f"{API}/versions", params={"path": "/hist/h.md"})
    body = resp.json()
    assert body["path"] == "hist/h.md"
    newest, oldest = body["versions"]
    assert set(newest) == {"hash", "date", "author", "message"}
    assert (newest["author"], oldest["author"]) == ("b", "a")
    resp = client.get(f"{API}/version", params={"path": "hist/h.md", "version": oldest["hash"]})
    assert resp.status_code == 200 and resp.content == b"one\n"
    assert resp.headers["content-type"] == "text/markdown; charset=utf-8"
    params = {"path": "hist/h.md", "from": oldest["hash"], "to": newest["hash"]}
    resp = client.get(f"{API}/diff", params=params)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    assert "+two" in resp.text
    assert versions(client, "hist/never.md") == []


def test_history_errors(client: AppClient) -> None:
    put(client, "hist/e.md", b"x")
    cases: list[tuple[str, dict[str, str], int, str]] = [
        ("versions", {}, 400, "path is required"),
        ("version", {"path": "hist/e.md"}, 400, "version is required"),
        ("version", {"version": "HEAD"}, 400, "path is required"),
        ("version", {"path": "hist/e.md", "version": "0" * 40}, 404, "version not found"),
        ("version", {"path": "hist/none.md", "version": "HEAD"}, 404, "version not found"),
        ("diff", {"path": "hist/e.md", "from": "HEAD"}, 400, "to is required"),
        ("diff", {"path": "hist/e.md", "from": "HEAD", "to": "nosuch"}, 404, "unknown version"),
        ("diff", {"path": "hist/e.md", "from": "-x", "to": "HEAD"}, 400, "invalid version"),
    ]
    for route, params, status, message in cases:
        resp = client.get(f"{API}/{route}", params=params)
        assert resp.status_code == status, (route, params, resp.text)
        assert message in error_of(resp), (route, params)


def test_changes(client: AppClient, server: App) -> None:
    since = git(server.root, "rev-parse", "HEAD").strip()
    put(client, "chg/a.md", b"x", **{"X-Actor": "alice"})
    client.delete(f"{API}/file", params={"path": "chg/a.md"}, headers={"X-Actor": "bob"})
    body = client.get(f"{API}/changes", params={"since": since}).json()
    assert set(body) == {"changes", "last_seq"}
    got = [(c["action"], c["path"], c["actor"]) for c in body["changes"]]
    assert got == [("delete", "chg/a.md", "bob"), ("write", "chg/a.md", "alice")]
    assert set(body["changes"][0]) == {"seq", "path", "action", "actor", "timestamp"}
    assert body["last_seq"] == body["changes"][0]["seq"]
    empty = client.get(f"{API}/changes", params={"since": body["last_seq"]}).json()
    assert empty == {"changes": [], "last_seq": body["last_seq"]}
    assert len(client.get(f"{API}/changes", params={"limit": 1}).json()["changes"]) == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "xyz"}, "unknown sequence"),
        ({"since": "deadbeef"}, "unknown sequence"),
        ({"limit": "many"}, "limit"),
    ],
)
def test_changes_errors(client: AppClient, params: dict[str, str], message: str) -> None:
    resp = client.get(f"{API}/changes", params=params)
    assert resp.status_code == 400
    assert message in error_of(resp)


def test_changes_limits_are_defaulted_and_capped_as_kiwifs(client: AppClient) -> None:
    """KiwiFS clients send limit=1000 (capped at 500) or 0 (the default, 50)."""
    for n in range(3):
        put(client, f"chg/cap-{n}.md", f"{n}")
    everything = len(client.get(f"{API}/changes", params={"limit": 500}).json()["changes"])
    assert everything >= 3
    for limit in ("1000", "0", "-5", ""):
        resp = client.get(f"{API}/changes", params={"limit": limit})
        assert resp.status_code == 200, (limit, resp.text)
        assert len(resp.json()["changes"]) == min(everything, 500 if limit == "1000" else 50)


# -- search and meta (answered by the index) ----------------------------------------------------


def test_search(client: AppClient) -> None:
    put(client, "srch/quokka.md", b"# Quokka\n\nthe zyzzyvaword lives here\n")
    resp = client.get(f"{API}/search", params={"q": "zyzzyvaword"})
    assert resp.status_code == 200
    body = resp.json()
    assert {"query", "limit", "offset", "results"} <= set(body)
    assert [r["path"] for r in body["results"]] == ["srch/quokka.md"]
    for alias in ("path_prefix", "pathPrefix"):
        hits = client.get(f"{API}/search", params={"q": "zyzzyvaword", alias: "other/"}).json()
        assert hits["results"] == []
    # a rewrite no longer matches its old words
    put(client, "srch/quokka.md", b"# Quokka\n\nnothing left\n")
    assert client.get(f"{API}/search", params={"q": "zyzzyvaword"}).json()["results"] == []


def test_search_errors(client: AppClient) -> None:
    for params in ({}, {"q": "  "}):
        resp = client.get(f"{API}/search", params=params)
        assert resp.status_code == 400 and "q is required" in error_of(resp)
    resp = client.get(f"{API}/search", params={"q": "x", "limit": "-1"})
    assert resp.status_code == 400


def test_meta_finds_provenance(client: AppClient) -> None:
    put(client, "meta/m.md", b"# M\n", **{"X-Provenance": "run:run-meta-1"})
    where = "$.derived-from[*].id=run-meta-1"
    resp = client.get(f"{API}/meta", params={"where": where})
    assert resp.status_code == 200
    body = resp.json()
    assert body["count"] == 1
    assert body["results"][0]["path"] == "meta/m.md"
    assert "frontmatter" in body["results"][0]


def test_meta_bad_filter_is_400(client: AppClient) -> None:
    resp = client.get(f"{API}/meta", params={"where": "no operator here"})
    assert resp.status_code == 400
    error_of(resp)


# -- paths are refused, not guessed -------------------------------------------------------------

BAD_PATHS = [
    "../x.md",
    "a/../../etc/passwd",
    "//etc/passwd",
    "./a.md",
    "a/./b.md",
    "a//b.md",
    ".git/config",
    ".kiwi/config.toml",
    "a/.hidden/b.md",
    "ctl\x01.md",
    "nul\x00.md",
    "new\nline.md",
    "del\x7f.md",
    "x" * 256 + ".md",
    "outlink/x.md",
    "outfile.md",
]


def path_requests(bad: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("GET", "/file", {"params": {"path": bad}}),
        ("PUT", "/file", {"params": {"path": bad}, "content": b"x"}),
        ("DELETE", "/file", {"params": {"path": bad}}),
        ("POST", "/file/append", {"params": {"path": bad}, "content": b"x"}),
        ("POST", "/bulk", {"json": {"files": [{"path": bad, "content": "x"}]}}),
        ("POST", "/rename", {"json": {"from": "paths/ok.md", "to": bad}}),
        ("POST", "/rename", {"json": {"from": bad, "to": "paths/ok2.md"}}),
        ("GET", "/tree", {"params": {"path": bad}}),
        ("GET", "/versions", {"params": {"path": bad}}),
        ("GET", "/version", {"params": {"path": bad, "version": "HEAD"}}),
        ("GET", "/diff", {"params": {"path": bad, "from": "HEAD", "to": "HEAD"}}),
        ("POST", "/memory/merge", {"json": {"path": bad, "entries": [{"id": "e"}]}}),
    ]


@pytest.mark.parametrize("bad", BAD_PATHS, ids=repr)
def test_bad_paths_are_400_and_nothing_is_written(
    client: AppClient, server: App, outside: Path, bad: str
) -> None:
    put(client, "paths/ok.md", b"ok")
    before = commit_count(server.root)
    for method, route, kwargs in path_requests(bad):
        if route == "/tree" and bad in ("//etc/passwd", "outfile.md"):
            continue  # tree strips every leading slash (folders); a file is not a folder
        if route in ("/versions", "/version", "/diff") and bad.startswith("out"):
            continue  # history reads git, never the disk behind a symlink
        resp = client.request(method, API + route, **kwargs)
        assert resp.status_code == 400, (method, route, bad, resp.text)
        assert "path" in error_of(resp) or "segment" in error_of(resp)
    assert commit_count(server.root) == before
    assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]
    assert (outside / "secret.md").read_text() == "secret"
    assert get(client, "paths/ok.md").content == b"ok"


def test_one_leading_slash_is_root_relative_not_absolute(client: AppClient) -> None:
    resp = get(client, "/etc/passwd")
    assert resp.status_code == 404  # the root's etc/passwd, which does not exist


# -- memory -------------------------------------------------------------------------------------


def report(client: AppClient, **params: Any) -> httpx.Response:
    return client.get(f"{API}/memory/report", params=params)


def test_memory_report_reflects_a_write_immediately(client: AppClient, server: App) -> None:
    prefix = "memtest/"
    before = report(client, episodes_prefix=prefix).json()
    assert list(before)[:5] == [
        "episodic_count",
        "merged_from_refs",
        "episodic_files",
        "unmerged",
        "warnings",
    ]
    assert before["episodes_prefix"] == prefix
    put(client, "memtest/ep-1.md", b"---\nepisode_id: ep-1\n---\nwhat happened\n")
    after = report(client, episodes_prefix=prefix).json()
    assert after["episodic_count"] == before["episodic_count"] + 1
    assert "memtest/ep-1.md" in [u["path"] for u in after["unmerged"]]
    # an out-of-band edit (an agent using cat) shows up too, without a restart
    # (noticed by the watcher, so allow it a bounded while)
    (server.root / "memtest/ep-2.md").write_text("---\nepisode_id: ep-2\n---\n")
    for _ in range(300):
        third = report(client, episodes_prefix=prefix).json()
        if "memtest/ep-2.md" in [u["path"] for u in third["unmerged"]]:
            break
        time.sleep(0.1)
    assert "memtest/ep-2.md" in [u["path"] for u in third["unmerged"]]
    assert third["unmerged_count"] == after["unmerged_count"] + 1


def test_memory_report_paging(client: AppClient) -> None:
    prefix = "mempage/"
    for i in range(3):
        put(client, f"mempage/e{i}.md", f"---\nepisode_id: p{i}\n---\n".encode())
    full = report(client, episodes_prefix=prefix).json()
    one = report(client, episodes_prefix=prefix, limit=1, offset=1).json()
    assert one["episodic_count"] == full["episodic_count"]
    assert one["unmerged_count"] == full["unmerged_count"]
    assert one["episodic_files"] == full["episodic_files"][1:2]
    assert one["unmerged"] == full["unmerged"][1:2]
    zero = report(client, episodes_prefix=prefix, limit=0).json()
    assert zero["episodic_files"] == [] and zero["unmerged"] == []
    assert zero["episodic_count"] == full["episodic_count"]


def test_memory_report_empty_parameters_mean_not_given(client: AppClient) -> None:
    """The documented route is ``?episodes_prefix=&limit=&offset=``: blanks are defaults."""
    blank = report(client, episodes_prefix="", limit="", offset="")
    assert blank.status_code == 200, blank.text
    assert blank.json() == report(client).json()
    assert blank.json()["episodes_prefix"] == "episodes/"


@pytest.mark.parametrize(
    "params", [{"limit": -1}, {"offset": -1}, {"limit": "ten"}, {"offset": "x"}]
)
def test_memory_report_bad_paging_is_400(client: AppClient, params: dict[str, Any]) -> None:
    resp = report(client, **params)
    assert resp.status_code == 400
    assert list(params)[0] in error_of(resp)


def test_memory_merge(client: AppClient, server: App) -> None:
    prefix = "memmerge/"
    put(client, "memmerge/e1.md", b"---\nepisode_id: mm-1\n---\n")
    put(client, "memmerge/e2.md", b"---\nepisode_id: mm-2\n---\n")
    payload = {
        "path": "pages/mm.md",
        "entries": [{"id": "mm-1"}, {"path": "./memmerge/e2.md", "type": "run", "note": "n"}],
    }
    resp = client.post(f"{API}/memory/merge", json=payload, headers={"X-Actor": "consolidator"})
    assert resp.status_code == 200
    body = resp.json()
    assert body["path"] == "pages/mm.md" and body["created"] is True
    assert [e.get("id") or e.get("path") for e in body["added"]] == ["mm-1", "memmerge/e2.md"]
    assert resp.headers["etag"] == f'"{body["etag"]}"'
    assert get(client, "pages/mm.md").headers["etag"] == resp.headers["etag"]
    after = report(client, episodes_prefix=prefix).json()
    assert not [u for u in after["unmerged"] if u["path"].startswith(prefix)]
    assert git(server.root, "log", "-1", "--format=%an") == "consolidator\n"
    again = client.post(f"{API}/memory/merge", json=payload).json()
    assert again["added"] == [] and again["created"] is False
    assert again["etag"] == body["etag"]


def test_memory_merge_errors(client: AppClient) -> None:
    url = f"{API}/memory/merge"
    cases: list[tuple[Any, str]] = [
        ({"entries": [{"id": "x"}]}, "path is required"),
        ({"path": "pages/e.md"}, "entries is required"),
        ({"path": "pages/e.md", "entries": []}, "entries must not be empty"),
        ({"path": "pages/e.md", "entries": [{"id": "x", "when": "now"}]}, "entries[0].when"),
        ({"path": "pages/e.md", "entries": ["x"]}, "entries[0] must be an object"),
        ({"path": "pages/e.md", "entries": [{"id": ["x"]}]}, "entries[0].id"),
        ({"path": "pages/e.md", "entries": [{"type": "run"}]}, "id or path"),
        ({"path": "pages/e.md", "entries": [{"path": "../up.md"}]}, "'..'"),
    ]
    for payload, message in cases:
        resp = client.post(url, json=payload)
        assert resp.status_code == 400, payload
        assert message in error_of(resp), payload
    resp = client.post(url, content=b"{", headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "invalid JSON" in error_of(resp)
    assert get(client, "pages/e.md").status_code == 404


def test_memory_merge_if_match(client: AppClient) -> None:
    etag = put(client, "pages/im.md", b"# Page\n").json()["etag"]
    payload = {"path": "pages/im.md", "entries": [{"id": "im-1"}]}
    resp = client.post(f"{API}/memory/merge", json=payload, headers={"If-Match": '"stale"'})
    assert resp.status_code == 409
    assert get(client, "pages/im.md").content == b"# Page\n"
    resp = client.post(f"{API}/memory/merge", json=payload, headers={"If-Match": f'"{etag}"'})
    assert resp.status_code == 200


def remember(client: AppClient, body: Any, **headers: str) -> httpx.Response:
    return client.post(f"{API}/memory/remember", json=body, headers=headers)


def test_memory_remember(client: AppClient, server: App) -> None:
    headers = {"X-Actor": "agent:planner", "X-Provenance": "run:run-250"}
    body = {"content": "Retries with jitter.", "scope": "api", "tags": ["retries"]}
    resp = remember(client, body, **headers)
    assert resp.status_code == 201, resp.text
    answer = resp.json()
    assert list(answer) == ["path", "episode_id", "etag"]
    assert uuid.UUID(answer["episode_id"]).version == 4
    assert answer["path"].startswith("episodes/") and answer["path"].endswith(
        f"/{answer['episode_id']}.md"
    )
    assert resp.headers["etag"] == f'"{answer["etag"]}"'
    stored = get(client, answer["path"])
    assert stored.headers["etag"] == resp.headers["etag"]
    assert stored.text.endswith("---\nRetries with jitter.")
    fm = client.get(f"{API}/file", params={"path": answer["path"], "metadata_only": "true"}).json()
    assert (fm["memory_kind"], fm["episode_id"], fm["scope"]) == (
        "episodic",
        answer["episode_id"],
        "api",
    )
    assert fm["derived-from"][0]["id"] == "run-250"
    assert fm["derived-from"][0]["actor"] == "agent:planner"
    (latest,) = versions(client, answer["path"])
    assert latest["author"] == "agent:planner"
    unmerged = client.get(f"{API}/memory/report").json()["unmerged"]
    assert answer["episode_id"] in [e["episode_id"] for e in unmerged]


def test_memory_remember_body_fields_win_over_headers(client: AppClient) -> None:
    body = {"content": "x", "episode_id": "rest-own", "actor": "body", "provenance": "job:7"}
    resp = remember(client, body, **{"X-Actor": "header", "X-Provenance": "run:1"})
    assert resp.status_code == 201, resp.text
    assert resp.json()["episode_id"] == "rest-own"
    fm = client.get(
        f"{API}/file", params={"path": resp.json()["path"], "metadata_only": "true"}
    ).json()
    assert [(e["type"], e["id"], e["actor"]) for e in fm["derived-from"]] == [("job", "7", "body")]


def test_memory_remember_refuses_a_taken_id(client: AppClient, server: App) -> None:
    put(client, "elsewhere/old.md", b"---\nmemory_kind: episodic\nepisode_id: rest-taken\n---\n")
    before = commit_count(server.root)
    resp = remember(client, {"content": "again", "episode_id": "rest-taken"})
    assert resp.status_code == 409
    assert error_of(resp) == "episode rest-taken already exists at elsewhere/old.md"
    assert commit_count(server.root) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "content is required"),
        ({"content": "  "}, "content is required"),
        ({"content": 3}, "content must be a string"),
        ({"content": "x", "episode_id": "a/b"}, "invalid episode_id"),
        ({"content": "x", "tags": "t"}, "tags must be a list"),
        ({"content": "x", "tags": ["a", 1]}, "tags[1] must be a string"),
        ({"content": "x", "provenance": "nocolon"}, "type:id"),
        (["x"], "must be an object"),
    ],
)
def test_memory_remember_bad_input_is_400(
    client: AppClient, server: App, body: Any, message: str
) -> None:
    before = commit_count(server.root)
    resp = remember(client, body)
    assert resp.status_code == 400, resp.text
    assert message in error_of(resp)
    assert commit_count(server.root) == before


def test_no_body_is_ever_a_422(client: AppClient) -> None:
    for route in ("/bulk", "/rename", "/memory/merge", "/memory/remember"):
        for body in ({"x": 1}, {"files": 1, "entries": 1, "content": [], "from": {}}):
            resp = client.post(API + route, json=body)
            assert resp.status_code == 400, (route, body, resp.status_code)
            error_of(resp)


def test_failing_commits_are_503_and_visible_in_health(tmp_path: Path) -> None:
    """``--async-commit`` over a repository git cannot write to: answers, never a hang."""
    root = init_root(tmp_path / "kb")
    fan, data = break_object_store_for(root, b"# written while git is broken\n")
    with in_process(root, async_commit=True) as app, app.client() as c:
        assert put(c, "doomed.md", data).status_code == 200  # on disk and journaled
        resp = c.get(f"{API}/versions", params={"path": "doomed.md"})
        assert resp.status_code == 503
        assert "git commit failed" in error_of(resp)
        health = c.get("/health")
        assert health.status_code == 503
        body = health.json()
        assert body["status"] == "degraded"
        assert (body["commits"]["pending"], body["commits"]["failing"]) == (1, True)
        assert ".git/objects" in body["commits"]["error"]
        refused = put(c, "refused.md", b"x")
        assert refused.status_code == 503
        assert "background git commits are failing" in error_of(refused)
        fan.unlink()  # repaired: the next history read retries at once
        assert [v["message"] for v in versions(c, "doomed.md")] == ["anonymous: doomed.md"]
        assert c.get("/health").json()["status"] == "ok"
    assert not (root / "refused.md").exists()


# -- memory lifecycle: forget, restore, brief, recall parameters --------------------------------


def rest_agent_loop(c: Client, word: str) -> None:
    """remember 5 (two with scope a) → brief within a small budget → forget one → gone from
    search, brief, meta and the unmerged list, still readable by path → restore → back."""
    made = []
    for n in range(5):
        body: dict[str, Any] = {"content": f"{word} note {n}: " + "wing " * (25 * n)}
        if n < 2:
            body["scope"] = "a"
        resp = c.post(f"{API}/memory/remember", json=body, headers={"X-Actor": "agent:loop"})
        assert resp.status_code == 201, resp.text
        made.append(resp.json()["path"])
    pack = c.get(f"{API}/brief", params={"q": word, "budget_tokens": 100}).json()
    assert 0 < pack["total_tokens"] <= 100 == pack["budget_tokens"]
    assert pack["pages"] and pack["left_out"]
    assert {p["path"] for p in pack["pages"]} | {o["path"] for o in pack["left_out"]} == set(made)
    assert all(set(o) == {"path", "etag", "score", "tokens", "reason"} for o in pack["left_out"])
    scoped = c.get(f"{API}/brief", params={"query": word, "scope": "a"}).json()
    assert sorted(p["path"] for p in scoped["pages"]) == sorted(made[:2])
    gone = made[0]

    def visible(**extra: str) -> tuple[bool, bool, bool, bool]:
        found = c.get(f"{API}/search", params={"q": word, **extra}).json()["results"]
        brief = c.get(f"{API}/brief", params={"q": word, **extra}).json()["pages"]
        meta = c.get(f"{API}/meta", params={"where": "$.scope=a", **extra}).json()["results"]
        unmerged = c.get(f"{API}/memory/report").json()["unmerged"]
        return (
            gone in [h["path"] for h in found],
            gone in [p["path"] for p in brief],
            gone in [m["path"] for m in meta],
            gone in [e["path"] for e in unmerged],
        )

    assert visible() == (True, True, True, True)
    resp = c.post(
        f"{API}/memory/forget",
        json={"path": gone, "reason": "wrong", "superseded_by": "/concepts/birds.md"},
        headers={"X-Actor": "agent:loop"},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body == {"path": gone, "etag": body["etag"], "changed": True, "superseded": True}
    assert resp.headers["etag"] == f'"{body["etag"]}"'
    assert visible() == (False, False, False, False)
    assert visible(include_superseded="true")[:3] == (True, True, True)
    assert c.get(f"{API}/memory/report").json()["superseded_count"] == 1
    page = get(c, gone)
    assert page.status_code == 200 and "superseded_by: concepts/birds.md" in page.text
    again = c.post(f"{API}/memory/forget", json={"path": gone}).json()
    assert (again["changed"], again["etag"]) == (False, body["etag"])
    back = c.post(f"{API}/memory/restore", json={"path": gone}, headers={"If-Match": body["etag"]})
    assert back.status_code == 200 and back.json()["changed"] is True
    assert visible() == (True, True, True, True)
    assert c.get(f"{API}/memory/report").json()["superseded_count"] == 0


def test_agent_loop_in_process(tmp_path: Path) -> None:
    with in_process(init_root(tmp_path / "kb")) as app:
        rest_agent_loop(app.base, "kestrel")
        log = git(app.root, "log", "-3", "--format=%an %s").splitlines()
        assert log[1].startswith("agent:loop agent:loop: forget episodes/")
        assert log[0].startswith("anonymous anonymous: restore episodes/")


def test_forget_and_restore_errors(client: AppClient) -> None:
    etag = put(client, "life/a.md", b"# A\n").json()["etag"]
    cases = [
        ({}, 400, "path is required"),
        ({"path": ""}, 400, "path must not be empty"),
        ({"path": "life/a.md", "reason": 5}, 400, "reason must be a string"),
        ({"path": "life/a.md", "superseded_by": "../x.md"}, 400, "superseded_by"),
        ({"path": "life/a.md", "superseded_by": "life/a.md"}, 400, "another page"),
        ({"path": "../a.md"}, 400, "'..'"),
        ({"path": "life/missing.md"}, 404, "not found"),
    ]
    for body, status, message in cases:
        resp = client.post(f"{API}/memory/forget", json=body)
        assert resp.status_code == status, (body, resp.text)
        assert message in error_of(resp), body
    stale = client.post(
        f"{API}/memory/forget", json={"path": "life/a.md"}, headers={"If-Match": '"0000"'}
    )
    assert stale.status_code == 409 and error_of(stale) == CONFLICT
    assert stale.headers["etag"] == f'"{etag}"'  # the current one, to re-read and retry
    assert get(client, "life/a.md").content == b"# A\n"
    missing = client.post(f"{API}/memory/restore", json={"path": "life/nope.md"})
    assert missing.status_code == 404
    assert client.post(f"{API}/memory/restore", content=b"[]").status_code == 400
    live = client.post(f"{API}/memory/restore", json={"path": "life/a.md"}).json()
    assert (live["changed"], live["superseded"], live["etag"]) == (False, False, etag)


def test_append_honours_if_match(client: AppClient) -> None:
    etag = put(client, "life/log.md", b"one").json()["etag"]
    params = {"path": "life/log.md"}
    stale = client.post(
        f"{API}/file/append", params=params, content=b"x", headers={"If-Match": '"beef"'}
    )
    assert stale.status_code == 409 and stale.headers["etag"] == f'"{etag}"'
    ok = client.post(
        f"{API}/file/append", params=params, content=b"two", headers={"If-Match": etag}
    )
    assert ok.status_code == 200 and get(client, "life/log.md").content == b"one\ntwo"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"q": "x", "modifiedAfter": "next week"}, "modifiedAfter"),
        ({"q": "x", "modified_after": "2026-02-30"}, "modifiedAfter"),
        ({"q": "x", "recency_weight": "2"}, "recency_weight"),
        ({"q": "x", "recency_weight": "heavy"}, "recency_weight"),
        ({"q": "x", "include_superseded": "perhaps"}, "include_superseded"),
    ],
)
def test_search_parameters_are_never_ignored(
    client: AppClient, params: dict[str, str], message: str
) -> None:
    resp = client.get(f"{API}/search", params=params)
    assert resp.status_code == 400
    assert message in error_of(resp)


def test_search_scope_and_modified_after(client: AppClient, server: App) -> None:
    put(client, "life/s1.md", b"---\nscope: a\n---\nshearwater\n")
    put(client, "life/s2.md", b"---\nscope: b\n---\nshearwater\n")

    def found(**params: str) -> list[str]:
        resp = client.get(f"{API}/search", params={"q": "shearwater", **params})
        assert resp.status_code == 200, resp.text
        return sorted(r["path"] for r in resp.json()["results"])

    assert found() == ["life/s1.md", "life/s2.md"]
    assert found(scope="a") == ["life/s1.md"]
    assert found(modifiedAfter="2000-01-01T00:00:00Z") == ["life/s1.md", "life/s2.md"]
    assert found(modified_after="2999-01-01T00:00:00Z") == []
    assert found(recency_weight="0.5") == ["life/s1.md", "life/s2.md"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "q is required"),
        ({"q": " "}, "q is required"),
        ({"q": "x", "budget_tokens": "0"}, "budget_tokens"),
        ({"q": "x", "max_pages": "0"}, "max_pages"),
        ({"q": "x", "max_pages": "many"}, "max_pages"),
    ],
)
def test_brief_errors(client: AppClient, params: dict[str, str], message: str) -> None:
    resp = client.get(f"{API}/brief", params=params)
    assert resp.status_code == 400
    assert message in error_of(resp)


# -- auth ---------------------------------------------------------------------------------------

AUTH_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/file", {"params": {"path": "auth.md"}}),
    ("PUT", "/file", {"params": {"path": "auth2.md"}, "content": b"x"}),
    ("DELETE", "/file", {"params": {"path": "auth2.md"}}),
    ("POST", "/file/append", {"params": {"path": "auth3.md"}, "content": b"x"}),
    ("PATCH", "/file/frontmatter", {"params": {"path": "auth.md"}, "json": {"fields": {"a": 1}}}),
    ("POST", "/bulk", {"json": {"files": [{"path": "auth4.md", "content": "x"}]}}),
    ("POST", "/rename", {"json": {"from": "auth4.md", "to": "auth5.md"}}),
    ("POST", "/rename-dir", {"json": {"from": "authdir", "to": "authdir2"}}),
    ("GET", "/tree", {}),
    ("GET", "/peek", {"params": {"path": "auth.md"}}),
    ("GET", "/backlinks", {"params": {"path": "auth.md"}}),
    ("GET", "/links/broken", {}),
    ("GET", "/links/orphans", {}),
    ("GET", "/graph", {}),
    ("GET", "/graph/walk", {"params": {"path": "auth.md"}}),
    ("GET", "/graph/path", {"params": {"from": "auth.md", "to": "auth.md"}}),
    ("GET", "/health-check", {"params": {"path": "auth.md"}}),
    ("GET", "/section", {"params": {"path": "auth.md", "index": "0"}}),
    ("GET", "/context", {}),
    ("GET", "/search", {"params": {"q": "x"}}),
    ("GET", "/search/semantic", {"params": {"q": "x"}}),
    ("POST", "/search/semantic", {"json": {"query": "x"}}),
    ("GET", "/search/hybrid", {"params": {"q": "x"}}),
    ("GET", "/meta", {"params": {"where": "$.title=x"}}),
    ("GET", "/versions", {"params": {"path": "auth.md"}}),
    ("GET", "/version", {"params": {"path": "auth.md", "version": "HEAD"}}),
    ("GET", "/diff", {"params": {"path": "auth.md", "from": "HEAD", "to": "HEAD"}}),
    ("GET", "/blame", {"params": {"path": "auth.md"}}),
    ("GET", "/changes", {}),
    ("GET", "/events", {}),
    ("GET", "/memory/report", {}),
    ("POST", "/memory/merge", {"json": {"path": "auth6.md", "entries": [{"id": "e"}]}}),
    ("POST", "/memory/remember", {"json": {"content": "an episode"}}),
    ("POST", "/memory/forget", {"json": {"path": "auth.md", "reason": "old"}}),
    ("POST", "/memory/restore", {"json": {"path": "auth.md"}}),
    ("GET", "/brief", {"params": {"q": "auth"}}),
    ("POST", "/memory/claim", {"json": {"worker": "auth-w"}}),
    ("POST", "/memory/release", {"json": {"worker": "auth-w"}}),
    ("GET", "/memory/check", {}),
    ("GET", "/memory/lineage", {"params": {"path": "auth.md"}}),
    ("POST", "/claim", {"json": {"path": "auth.md", "holder": "auth-h"}}),
    ("GET", "/claims", {}),
    ("DELETE", "/claim", {"params": {"path": "auth.md", "holder": "auth-h"}}),
]


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[App]:
    root = init_root(tmp_path_factory.mktemp("auth") / "kb")
    (root / "auth.md").write_text("# Auth\n")
    (root / "authdir").mkdir()
    (root / "authdir" / "a.md").write_text("# In a folder\n")  # for /rename-dir
    git(root, "add", "auth.md", "authdir")
    git(root, "commit", "-q", "-m", "auth fixture")
    with in_process(root, api_key="s3cret-key") as app:
        yield app


@pytest.mark.parametrize(("method", "route", "kwargs"), AUTH_CASES, ids=lambda v: str(v))
def test_every_route_needs_the_key(
    auth_server: App, method: str, route: str, kwargs: dict[str, Any]
) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"}):
        with auth_server.client(**headers) as c:
            resp = c.request(method, API + route, **kwargs)
            assert resp.status_code == 401, (headers, resp.status_code)
            assert resp.json() == {"error": "invalid API key"}
            assert resp.headers["www-authenticate"] == "Bearer"
    if route == "/events":
        return  # an endless stream: the live server's SSE test opens it with the key
    with auth_server.client(Authorization="Bearer s3cret-key") as c:
        resp = c.request(method, API + route, **kwargs)
    expected = 201 if route == "/memory/remember" else 200
    if route == "/search/semantic":
        expected = 503  # vectors are not enabled in this root
    assert resp.status_code == expected, (method, route, resp.text)


def test_readyz_is_503_until_the_index_has_caught_up(tmp_path: Path) -> None:
    with Knowledge.open(init_root(tmp_path / "kb")) as kb:
        client = TestClient(create_app(kb))  # no lifespan: nothing watches the index yet
        resp = client.get("/readyz")
        assert (resp.status_code, resp.json()) == (503, {"status": "not-ready"})
        assert client.get("/healthz").status_code == 200  # alive all the same
        Serving(kb).start_watching()
        for _ in range(600):  # the watcher's first reconcile runs in the background
            if kb.ready():
                break
            time.sleep(0.1)
        assert client.get("/readyz").json() == {"status": "ready"}


def test_health_is_open_with_auth(auth_server: App) -> None:
    with auth_server.client() as c:
        assert c.get("/health").json()["status"] == "ok"
        alive = c.get("/healthz")
        assert alive.status_code == 200 and alive.json()["status"] == "ok"
        assert set(alive.json()) == {"status", "uptime", "version"}
        ready = c.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


# -- a real server process ----------------------------------------------------------------------


@dataclass
class Server:
    root: Path
    base: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, **headers: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=60.0, headers=headers)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(root: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    """Start ``kiwifs serve`` on a free port and wait (bounded) until /health answers."""
    log = root.parent / f"serve-{root.name}.log"
    base, proc = realserver.start(root, log, args, env, probe="/health")
    return Server(root, base, proc, log)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[Server]:
    """One real ``kiwifs serve``, its key from the environment, started on a root that a crashed
    write left with a file on disk but not in git."""
    root = init_root(tmp_path_factory.mktemp("live") / "kb")
    (root / "lost").mkdir()
    (root / "lost/write.md").write_text("written, then the server died\n")
    (root / ".kiwi/state").mkdir(parents=True, exist_ok=True)
    (root / ".kiwi/state/uncommitted.log").write_text("lost/write.md\n")
    srv = start_server(root, env={**os.environ, "KIWIFS_API_KEY": LIVE_KEY})
    try:
        yield srv
    finally:
        realserver.stop(srv.proc)


def test_live_server_health_is_open_and_the_key_comes_from_the_environment(live: Server) -> None:
    with live.client() as c:
        assert c.get("/health").json() == {
            "status": "ok",
            "commits": {"pending": 0, "failing": False},
            "vectors": {"enabled": False},
        }
        assert c.get(f"{API}/tree").status_code == 401
    with live.client(Authorization=f"Bearer {LIVE_KEY}") as c:
        assert c.get(f"{API}/tree").status_code == 200


def test_agent_loop_on_a_real_server(live: Server) -> None:
    with live.client(Authorization=f"Bearer {LIVE_KEY}") as c:
        rest_agent_loop(c, "gannet")


def test_probes_on_a_real_server(live: Server) -> None:
    with live.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
        assert c.get("/readyz").json() == {"status": "ready"}  # its status, nothing of the root


def test_serve_on_a_busy_port_is_one_error_line(tmp_path: Path) -> None:
    root = init_root(tmp_path / "kb")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in (["serve", "--root"], ["mcp", "--http", "--port", str(port), "--root"]):
            args = [KIWIFS, *command, str(root)]
            if command[0] == "serve":
                args += ["--port", str(port)]
            done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 2, (command, done.stderr)
            assert done.stdout == ""
            lines = done.stderr.splitlines()
            assert len(lines) == 1, done.stderr
            assert lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
            assert "in use" in lines[0]


def test_serve_commits_what_a_crash_left_on_disk(live: Server) -> None:
    root = live.root
    log = git(root, "log", "--format=%an|%s", "--", "lost/write.md")
    assert log == "kiwifs|kiwifs: recommit 1 file(s)\n"
    with live.client(Authorization=f"Bearer {LIVE_KEY}") as c:
        (version,) = versions(c, "lost/write.md")
        assert version["author"] == "kiwifs"
        resp = c.get(f"{API}/version", params={"path": "lost/write.md", "version": version["hash"]})
        assert resp.text == "written, then the server died\n"


# -- events (a real stream) ---------------------------------------------------------------------


def test_sse_client_receives_write_and_delete(live: Server) -> None:
    path = "sse/watched.md"
    auth = {"Authorization": f"Bearer {LIVE_KEY}"}
    with live.client() as anonymous, anonymous.stream("GET", f"{API}/events") as refused:
        assert refused.status_code == 401
    frames: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    connected = threading.Event()
    failure: list[BaseException] = []

    def reader() -> None:
        try:
            with live.client(**auth) as sse, sse.stream("GET", f"{API}/events") as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                event = ""
                for line in resp.iter_lines():
                    if line.startswith(":"):
                        connected.set()
                    elif line.startswith("event: "):
                        event = line[len("event: ") :]
                    elif line.startswith("data: "):
                        data = json.loads(line[len("data: ") :])
                        frames.put((event, data))
                        if event == "delete" and data.get("path") == path:
                            return
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)
            connected.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert connected.wait(60), "no SSE connection"
    assert not failure, failure
    with live.client(**auth) as client:
        etag = put(client, path, b"x", **{"X-Actor": "sse-agent"}).json()["etag"]
        assert client.delete(f"{API}/file", params={"path": path}).status_code == 200
    seen: list[tuple[str, dict[str, Any]]] = []
    while not any(op == "delete" and d.get("path") == path for op, d in seen):
        seen.append(frames.get(timeout=60))
    thread.join(60)
    assert not thread.is_alive() and not failure, failure
    mine = [(op, d) for op, d in seen if d.get("path") == path]
    assert mine == [
        ("write", {"op": "write", "path": path, "actor": "sse-agent", "etag": etag}),
        ("delete", {"op": "delete", "path": path, "actor": "anonymous"}),
    ]


def test_second_server_on_the_same_root_is_refused(live: Server) -> None:
    proc = subprocess.run(
        [KIWIFS, "serve", "--root", str(live.root), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "already serves" in proc.stderr
    assert str(live.root) in proc.stderr
    with live.client() as c:
        assert c.get("/health").status_code == 200


def test_async_commit_mode_history_sees_every_write_and_sigterm_commits_the_rest(
    tmp_path: Path,
) -> None:
    """``serve --async-commit``: writes are batched, yet history reads and shutdown miss none."""
    root = init_root(tmp_path / "async")
    before = commit_count(root)
    # the longest window: a slow machine must not commit part of the batch before the read
    srv = start_server(root, "--async-commit", "--batch-window", "60000")
    try:
        with srv.client(**{"X-Actor": "batcher"}) as c:
            for i in range(5):
                assert put(c, f"async/n{i}.md", f"# {i}\n").status_code == 200
            (version,) = versions(c, "async/n4.md")  # flushes the pending batch
            assert version["author"] == "batcher"
            assert version["message"] == "batcher: 5 files"
            latest = c.get(f"{API}/changes", params={"limit": 1}).json()["changes"][0]
            assert (latest["action"], latest["path"], latest["actor"]) == ("write", "", "batcher")
            assert put(c, "async/after.md", "late\n").status_code == 200
            assert c.get("/health").json()["commits"]["pending"] == 1
    finally:
        realserver.stop(srv.proc)  # SIGTERM: shutdown commits what is still pending
    assert commit_count(root) == before + 2
    assert git(root, "show", "HEAD:async/after.md") == "late\n"
    assert git(root, "status", "--porcelain", "--", ".", ":(exclude).kiwi") == ""


# -- concurrency --------------------------------------------------------------------------------

THREADS = 8
WRITES = 50
SHARED = "shared/log.md"


def test_concurrent_writes_lose_nothing(tmp_path: Path) -> None:
    """8 threads x 50 writes: half append to one file through If-Match retry loops."""
    root = init_root(tmp_path / "kb")
    with in_process(root) as srv:
        with srv.client() as c:
            assert put(c, SHARED, b"# Shared log\n").status_code == 200
        start = git(root, "rev-parse", "HEAD").strip()
        appended: list[list[str]] = [[] for _ in range(THREADS)]
        own: list[list[str]] = [[] for _ in range(THREADS)]
        conflicts = [0] * THREADS
        errors: list[str] = []

        def appender(t: int, c: AppClient) -> None:
            for i in range(WRITES):
                line = f"thread {t} line {i}"
                for _ in range(1000):
                    current = get(c, SHARED)
                    etag = current.headers["etag"]
                    body = current.content + line.encode() + b"\n"
                    resp = put(c, SHARED, body, **{"If-Match": etag, "X-Actor": f"t{t}"})
                    if resp.status_code == 200:
                        appended[t].append(line)
                        break
                    if resp.status_code != 409:
                        errors.append(f"{line}: {resp.status_code} {resp.text}")
                        return
                    conflicts[t] += 1
                else:
                    errors.append(f"{line}: gave up after 1000 conflicts")
                    return

        def writer(t: int, c: AppClient) -> None:
            for i in range(WRITES):
                path = f"own/t{t}/f{i}.md"
                resp = put(c, path, f"t{t} {i}\n".encode(), **{"X-Actor": f"t{t}"})
                if resp.status_code != 200:
                    errors.append(f"{path}: {resp.status_code} {resp.text}")
                    return
                own[t].append(path)

        def run(t: int) -> None:
            try:
                with srv.client() as c:
                    (appender if t % 2 == 0 else writer)(t, c)
            except Exception as exc:
                errors.append(f"thread {t}: {exc!r}")

        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []

        with srv.client() as c:
            final = get(c, SHARED).text

    lines = final.splitlines()
    successful = [line for per in appended for line in per]
    assert len(successful) == THREADS // 2 * WRITES
    assert lines[0] == "# Shared log"
    assert sorted(lines[1:]) == sorted(successful)  # every append, each exactly once
    for per in appended:  # and each thread's appends in its own order
        assert [line for line in lines if line in set(per)] == per

    shared_commits = git(root, "rev-list", "--count", f"{start}..HEAD", "--", SHARED)
    assert int(shared_commits) == len(successful)
    written = {p for per in own for p in per}
    assert len(written) == THREADS // 2 * WRITES
    log = git(root, "log", "--format=", "--name-only", f"{start}..HEAD")
    assert {p for p in log.splitlines() if p.startswith("own/")} == written
    assert commit_count(root) - int(git(root, "rev-list", "--count", start)) == len(
        successful
    ) + len(written)
    assert git(root, "status", "--porcelain", "--", ".", ":(exclude).kiwi") == ""
    fsck = subprocess.run(["git", "-C", str(root), "fsck", "--strict"], capture_output=True)
    assert fsck.returncode == 0, fsck.stderr
