"""Spaces over REST (``kiwifs.rest.spaces``): the management routes with every status, routing by
header and by path, unknown spaces, isolation, restart, auth, and one real ``kiwifs serve``."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import realserver
from asgiclient import AppClient, serve_in_process
from kiwifs.knowledge import Knowledge
from kiwifs.rest.spaces import create_spaces_app
from kiwifs.server.spaces import SpaceRegistry
from kiwifs.tuning import Tuning

TUNING = Tuning(commit_process=False)


@pytest.fixture
def default(root: Path) -> Iterator[Knowledge]:
    with Knowledge.open(root, tuning=TUNING) as kb:
        yield kb


def client_on(kb: Knowledge, **options: object) -> Iterator[AppClient]:
    registry = SpaceRegistry(kb, dashboard=False)
    with serve_in_process(create_spaces_app(kb, registry, web=False, **options)) as client:
        yield client


@pytest.fixture
def client(default: Knowledge) -> Iterator[AppClient]:
    yield from client_on(default)


def poll(probe: Callable[[], Any], seconds: float = 10.0) -> Any:
    """``probe()`` once it is truthy (the index catches up in the background), at most
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (found := probe()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_management_routes_answer_every_status(client: AppClient, root: Path) -> None:
    listed = client.get("/api/spaces").json()["spaces"]
    assert [s["name"] for s in listed] == ["default"]
    assert set(listed[0]) == {"name", "root", "fileCount", "lastModified", "sizeBytes"}
    made = client.post("/api/spaces", json={"name": "alpha"})
    assert made.status_code == 201 and made.json()["name"] == "alpha"
    assert made.json()["root"] == str((root / ".spaces" / "alpha").resolve())
    assert client.post("/api/spaces", json={"name": "alpha"}).status_code == 409
    for body in ({"name": "Bad"}, {"name": "search"}, {"name": "file"}, {"name": "default"}, {}):
        bad = client.post("/api/spaces", json=body)
        assert bad.status_code == 400 and "error" in bad.json(), body
    outside = client.post("/api/spaces", json={"name": "x", "root": "/tmp/x"})
    assert outside.status_code == 400 and ".spaces/" in outside.json()["error"]
    assert client.post("/api/spaces", content=b"{not json").status_code == 400
    assert client.post("/api/spaces", json={"name": "x", "root": "a\x00"}).status_code == 400
    assert client.get("/api/spaces/alpha").json()["fileCount"] >= 3
    assert client.get("/api/spaces/nope").json() == {"error": "unknown space: nope"}
    assert client.get("/api/spaces/nope").status_code == 404
    assert client.delete("/api/spaces/default").status_code == 400
    gone = client.delete("/api/spaces/alpha")
    assert (gone.status_code, gone.json()) == (200, {"deleted": "alpha"})
    assert client.delete("/api/spaces/alpha").status_code == 404
    assert [s["name"] for s in client.get("/api/spaces").json()["spaces"]] == ["default"]


def test_routing_by_header_and_by_path(client: AppClient, root: Path) -> None:
    assert client.post("/api/spaces", json={"name": "alpha"}).status_code == 201
    put = client.put(
        "/api/kiwi/file?path=notes/n.md", content=b"the walrus\n", headers={"X-Kiwi-Space": "alpha"}
    )
    assert put.status_code == 200, put.text
    assert (root / ".spaces" / "alpha" / "notes" / "n.md").read_bytes() == b"the walrus\n"
    by_path = client.get("/api/kiwi/alpha/file?path=notes/n.md")
    assert by_path.status_code == 200 and by_path.text == "the walrus\n"
    explicit = client.get("/api/kiwi/default/file?path=notes/n.md")
    assert explicit.status_code == 404 and "unknown space" not in explicit.text
    client.put("/api/kiwi/alpha/file?path=p.md", content=b"by path\n")
    assert (root / ".spaces" / "alpha" / "p.md").is_file() and not (root / "p.md").exists()


def test_unknown_spaces_are_404_never_the_default(client: AppClient, root: Path) -> None:
    for response in (
        client.get("/api/kiwi/file?path=index.md", headers={"X-Kiwi-Space": "nope"}),
        client.put("/api/kiwi/nope/file?path=typo.md", content=b"lost\n"),
        client.get("/api/kiwi/nope"),
        client.get("/api/kiwi/Nope/search?q=x"),
    ):
        assert response.status_code == 404
        assert response.json()["error"].startswith("unknown space: ")
    assert not (root / "typo.md").exists()
    assert client.get("/api/kiwi/search?q=anything").status_code == 200  # a route stays a route
    assert client.get("/api/kiwi/tree").status_code == 200
    assert client.get("/health", headers={"X-Kiwi-Space": "nope"}).status_code == 200


def test_a_write_in_one_space_is_invisible_to_the_others(
    client: AppClient, default: Knowledge
) -> None:
    for name in ("a", "b"):
        assert client.post("/api/spaces", json={"name": name}).status_code == 201
    events = default.subscribe()
    content = b"---\nmemory_kind: episodic\nepisode_id: zebra-1\n---\nthe zebra\n"
    assert client.put("/api/kiwi/a/file?path=episodes/z.md", content=content).status_code == 200
    assert "episodes/z.md" in client.get("/api/kiwi/a/tree").text
    assert poll(lambda: client.get("/api/kiwi/a/search?q=zebra").json()["results"])
    for prefix in ("/api/kiwi/b", "/api/kiwi"):
        assert client.get(f"{prefix}/file?path=episodes/z.md").status_code == 404
        assert client.get(f"{prefix}/search?q=zebra").json()["results"] == []
        assert "episodes/z.md" not in client.get(f"{prefix}/tree").text
        assert "zebra-1" not in client.get(f"{prefix}/memory/report").text
    assert events.get(0.3) is None


def test_spaces_survive_a_restart_and_deleted_ones_do_not(root: Path) -> None:
    with Knowledge.open(root, tuning=TUNING) as kb:
        for client in client_on(kb):
            client.post("/api/spaces", json={"name": "kept"})
            client.post("/api/spaces", json={"name": "gone"})
            client.put("/api/kiwi/kept/file?path=k.md", content=b"still here\n")
            client.delete("/api/spaces/gone")
    assert list((root / ".spaces").glob("gone.deleted-*"))
    with Knowledge.open(root, tuning=TUNING) as kb:
        for client in client_on(kb):
            names = [s["name"] for s in client.get("/api/spaces").json()["spaces"]]
            assert names == ["default", "kept"]
            assert client.get("/api/kiwi/kept/file?path=k.md").text == "still here\n"
            assert client.get("/api/kiwi/gone/file?path=k.md").status_code == 404


def test_the_api_key_guards_management_and_every_space(default: Knowledge) -> None:
    for client in client_on(default, api_key="s3cret"):
        assert client.get("/api/spaces").status_code == 401
        assert client.post("/api/spaces", json={"name": "a"}).status_code == 401
        assert client.delete("/api/spaces/x").status_code == 401
        keyed = client.with_headers(Authorization="Bearer s3cret")
        assert keyed.post("/api/spaces", json={"name": "a"}).status_code == 201
        assert keyed.get("/api/spaces").status_code == 200
        assert client.get("/api/kiwi/a/tree").status_code == 401
        assert keyed.get("/api/kiwi/a/tree").status_code == 200


def test_a_closed_spaces_app_and_root_are_freed(default: Knowledge) -> None:
    """Closing a space drops its app and its root: nothing of the process (FastAPI's memo of
    endpoints, which holds the routes' closures over the space's Knowledge) keeps them."""
    registry = SpaceRegistry(default, tuning=Tuning(commit_process=False, max_open_spaces=1))
    with serve_in_process(create_spaces_app(default, registry, web=False)) as client:
        roots: dict[str, weakref.ref[Knowledge]] = {}
        for name in ("a", "b", "c"):
            assert client.post("/api/spaces", json={"name": name}).status_code == 201
            put = client.put(f"/api/kiwi/{name}/file?path=n.md", content=b"the heron\n")
            assert put.status_code == 200, put.text
            assert client.get(f"/api/kiwi/{name}/search?q=heron").status_code == 200
            space = registry.acquire(name)
            roots[name] = weakref.ref(space.kb)
            registry.release(space)
            del space
        assert registry.open_names() == ["c"]  # the bound closed a, then b
        gc.collect()
        assert [n for n, kb in roots.items() if kb() is not None] == ["c"]


def test_openapi_documents_the_management_routes(client: AppClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/api/spaces"]) == {"get", "post"}
    assert set(paths["/api/spaces/{name}"]) == {"get", "delete"}
    assert "409" in paths["/api/spaces"]["post"]["responses"]


def test_a_real_server_serves_spaces(root: Path, tmp_path: Path) -> None:
    with realserver.serving(root, tmp_path / "serve.log") as (base, _):
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.post("/api/spaces", json={"name": "live"}).status_code == 201
            headers = {"X-Kiwi-Space": "live"}
            put = http.put("/api/kiwi/file?path=x.md", content=b"over the wire\n", headers=headers)
            assert put.status_code == 200, put.text
            assert http.get("/api/kiwi/live/file?path=x.md").text == "over the wire\n"
            assert http.get("/api/kiwi/typo/file?path=x.md").status_code == 404
            assert http.delete("/api/spaces/live").json() == {"deleted": "live"}
    assert list((root / ".spaces").glob("live.deleted-*"))
