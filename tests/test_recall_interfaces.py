"""Semantic and hybrid search through every interface: CLI, REST, MCP, and a real server.

REST and MCP tool behaviour run in-process (httpx's ASGI transport, the SDK's in-memory client);
the out-of-band edit and the killed reindex use real ``kiwifs`` processes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import realserver
from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from mcpsession import call, mcp_session
from partskit import index_keeper
from vectorkit import EmbeddingServer, build_model, http_config, local_config

KIWIFS = str(Path(sys.executable).with_name("kiwifs"))
API = "/api/kiwi"
MakeRoot = Callable[..., Path]

PAGES = {
    "birds/kiwi.md": "---\nscope: zoo\n---\nThe kiwi is a flightless bird with feathers.\n",
    "birds/nest.md": "A nest with one egg.\n",
    "birds/old.md": "---\nmemory_status: superseded\n---\nKiwi bird nest egg feathers wing.\n",
    "tech/db.md": "sqlite stores the index table on disk.\n",
    "home/cake.md": "A kiwi recipe: bake with flour and sugar.\n",
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("model") / "m2v")


@pytest.fixture
def root(make_root: MakeRoot, model: Path) -> Path:
    return make_root({**PAGES, ".kiwi/config.toml": local_config(model)})


@pytest.fixture
def plain_root(make_root: MakeRoot) -> Path:
    return make_root(PAGES, name="plain")


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_search_modes(root: Path) -> None:
    out = invoke("search", "flightless birds", "--root", str(root), "--mode", "semantic")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert re.fullmatch(r"1\. birds/(kiwi|nest)\.md \(score: 0\.\d{3}\)", lines[0])
    assert "birds/old.md" not in out.output
    out = invoke("search", "kiwi", "-r", str(root), "--mode", "hybrid", "--scope", "zoo", "--json")
    assert out.exit_code == 0, out.output
    assert '"match": "both"' in out.output and '"path": "birds/kiwi.md"' in out.output
    assert "cake" not in out.output
    with_old = invoke(
        "search", "nest egg", "-r", str(root), "--mode", "semantic", "--include-superseded"
    )
    assert "birds/old.md" in with_old.output


def test_cli_recall_flags_by_mode(root: Path) -> None:
    out = invoke("search", "kiwi", "-r", str(root), "--scope", "nowhere")
    assert out.exit_code == 0 and out.output == "No results found.\n"  # keyword honours them
    out = invoke("search", "kiwi", "-r", str(root), "--mode", "hybrid", "--recency-weight", "1")
    assert out.exit_code == 2 and "--recency-weight needs --mode keyword" in out.output
    out = invoke("search", "kiwi", "-r", str(root), "--mode", "hybrid", "--threshold", "0.3")
    assert out.exit_code == 2 and "--threshold needs --mode semantic" in out.output
    out = invoke("search", "kiwi", "-r", str(root), "--mode", "semantic", "--modified-after", "x")
    assert out.exit_code == 2 and "RFC 3339" in out.output


def test_cli_without_vectors(plain_root: Path) -> None:
    out = invoke("search", "kiwi", "-r", str(plain_root), "--mode", "semantic")
    assert out.exit_code == 1
    assert "error: semantic search is not enabled" in out.output
    assert "[search.vector] enabled = true" in out.output
    out = invoke("search", "kiwi", "-r", str(plain_root), "--mode", "hybrid")
    assert out.exit_code == 0 and out.output.count(" (keyword only, #") == 2  # KiwiFS's line
    out = invoke("reindex", "-r", str(plain_root), "--vector")
    assert out.exit_code == 1 and "not enabled" in out.output


def vector_rows(root: Path) -> list[tuple[int, str]]:
    with (
        Knowledge.open(root, index=(keeper := index_keeper(root))),
        keeper._open().reader() as conn,
    ):
        return conn.execute("SELECT id, etag FROM vec_chunks ORDER BY id").fetchall()


def test_cli_reindex_rebuilds_vectors_unless_fts_only(root: Path) -> None:
    out = invoke("reindex", "-r", str(root))
    assert out.exit_code == 0, out.output
    assert "indexed 5 files" in out.output and "embedded 5 pages" in out.output
    first = vector_rows(root)
    assert len(first) == 5
    out = invoke("reindex", "-r", str(root), "--fts-only")
    assert "indexed 5 files" in out.output and "embedded" not in out.output
    assert vector_rows(root) == first  # kept: they belong to the contents, not the rows
    out = invoke("reindex", "-r", str(root), "--vector")
    assert "indexed" not in out.output and "embedded 5 pages" in out.output
    again = vector_rows(root)
    assert [e for _, e in again] == [e for _, e in first] and again != first
    assert invoke("reindex", "-r", str(root), "--vector", "--fts-only").exit_code == 2


# -- REST (in-process) ----------------------------------------------------------------------------


@contextmanager
def rest(root: Path) -> Iterator[TestClient]:
    """The app in-process, without its lifespan: no watcher, so every answer reconciles and
    embeds first (the one-shot path)."""
    kb = Knowledge.open(root)
    try:
        yield TestClient(create_app(kb), base_url="http://127.0.0.1")
    finally:
        kb.close()


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory, model: Path) -> Iterator[TestClient]:
    """One app on a root with vectors for every bad-input case, which each only read: an app
    costs ~0.15 CPU-s to build and route, and its first search embeds the root."""
    root = tmp_path_factory.mktemp("refusing") / "kb"
    for rel, text in {**PAGES, ".kiwi/config.toml": local_config(model)}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    with rest(root) as client:
        yield client


def test_rest_semantic_get_and_post(root: Path) -> None:
    with rest(root) as c:
        resp = c.get(f"{API}/search/semantic", params={"q": "kiwi bird feathers", "topK": 2})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert [r["path"] for r in body["results"]] == ["birds/kiwi.md", "birds/nest.md"]
        assert set(body["results"][0]) == {"path", "score", "snippet"}
        assert body["results"][0]["snippet"] == "The kiwi is a flightless bird with feathers."
        posted = c.post(
            f"{API}/search/semantic", json={"query": "kiwi bird feathers", "topK": 2}
        ).json()
        assert posted == body
        scoped = c.post(f"{API}/search/semantic", json={"query": "bird", "scope": "zoo"}).json()
        assert [r["path"] for r in scoped["results"]] == ["birds/kiwi.md"]
        page = c.get(
            f"{API}/search/semantic",
            params={"q": "bird", "topK": 1, "offset": 1, "pathPrefix": "birds/"},
        ).json()
        assert [r["path"] for r in page["results"]] == ["birds/nest.md"]
        high = c.get(f"{API}/search/semantic", params={"q": "bird", "threshold": 0.99}).json()
        assert high["results"] == []
        future = c.get(
            f"{API}/search/semantic", params={"q": "bird", "modifiedAfter": "2999-01-01T00:00:00Z"}
        ).json()
        assert future["results"] == []
        old = c.get(
            f"{API}/search/semantic", params={"q": "nest egg", "include_superseded": "true"}
        ).json()
        assert "birds/old.md" in [r["path"] for r in old["results"]]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "q is required"),
        ({"q": " "}, "q is required"),
        ({"q": "x", "topK": "ten"}, "topK must be a whole number"),
        ({"q": "x", "topK": "-1"}, "limit must be 0 or more"),
        ({"q": "x", "threshold": "high"}, "threshold must be a number"),
        ({"q": "x", "threshold": "nan"}, "threshold must be a finite number"),
        ({"q": "x", "modifiedAfter": "yesterday"}, "RFC 3339"),
        ({"q": "x", "include_superseded": "maybe"}, "include_superseded must be true or false"),
    ],
)
def test_rest_semantic_bad_input_is_400(
    refusing: TestClient, params: dict[str, str], message: str
) -> None:
    resp = refusing.get(f"{API}/search/semantic", params=params)
    assert resp.status_code == 400
    assert message in resp.json()["error"]
    bad_body = refusing.post(f"{API}/search/semantic", json={"query": "x", "topK": True})
    assert bad_body.status_code == 400


def test_rest_hybrid_and_health(root: Path) -> None:
    with rest(root) as c:
        body = c.get(f"{API}/search/hybrid", params={"q": "kiwi", "limit": 3}).json()
        assert body["semantic"] is True and len(body["results"]) == 3
        first = body["results"][0]
        assert set(first) == {"path", "score", "match", "keyword_rank", "semantic_rank", "snippet"}
        assert first["path"] == "birds/kiwi.md" and first["match"] == "both"
        assert "birds/old.md" not in [r["path"] for r in body["results"]]
        scoped = c.get(f"{API}/search/hybrid", params={"q": "kiwi", "scope": "zoo"}).json()
        assert [r["path"] for r in scoped["results"]] == ["birds/kiwi.md"]
        assert c.get(f"{API}/search/hybrid").status_code == 400
        health = c.get("/health").json()
        vectors = health["vectors"]
        assert vectors["enabled"] is True and vectors["embedded"] == 5
        assert (vectors["pending"], vectors["failed"], vectors["failures"]) == (0, 0, 0)


def test_rest_without_vectors(plain_root: Path) -> None:
    with rest(plain_root) as c:
        for resp in (
            c.get(f"{API}/search/semantic", params={"q": "kiwi"}),
            c.post(f"{API}/search/semantic", json={"q": "kiwi"}),
        ):
            assert resp.status_code == 503
            assert resp.json()["error"].startswith("semantic search is not enabled: set")
        body = c.get(f"{API}/search/hybrid", params={"q": "kiwi"}).json()
        assert body["semantic"] is False
        assert {r["match"] for r in body["results"]} == {"keyword only"}
        assert c.get("/health").json()["vectors"] == {"enabled": False}


# -- MCP (in-process) -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mcp_semantic_and_hybrid(root: Path) -> None:
    async with mcp_session(root) as client:
        error, text = await call(client, "kiwi_search_semantic", {"query": "kiwi bird feathers"})
        assert not error, text
        lines = text.splitlines()
        assert len(lines) == 4  # the default limit is 5; the superseded page is left out
        assert all(re.fullmatch(r"\d\. \S+ \(score: -?\d\.\d{3}\)", line) for line in lines)
        assert lines[0].startswith("1. birds/kiwi.md (score: 0.")
        error, text = await call(
            client, "kiwi_search_semantic", {"query": "egg", "include_superseded": True}
        )
        assert "birds/old.md" in text
        error, text = await call(
            client, "kiwi_search_semantic", {"query": "bird", "threshold": 0.99, "limit": 50}
        )
        assert (error, text) == (False, "No results found.")
        # limits are taken as KiwiFS takes them: above 50 means 50, 0 or less the default (5)
        error, text = await call(client, "kiwi_search_semantic", {"query": "bird", "limit": 51})
        assert not error and len([ln for ln in text.splitlines() if ln[:1].isdigit()]) <= 50
        error, text = await call(client, "kiwi_search_semantic", {"query": "bird", "limit": 0})
        assert not error and 0 < len([ln for ln in text.splitlines() if ln[:1].isdigit()]) <= 5
        error, text = await call(client, "kiwi_search_hybrid", {"query": "kiwi", "scope": "zoo"})
        assert text.splitlines()[0] == "1. birds/kiwi.md (both, #1)"
        assert text.splitlines()[1].startswith("   keyword #1, semantic #1; score 0.")


@pytest.mark.anyio
async def test_mcp_without_vectors(plain_root: Path) -> None:
    async with mcp_session(plain_root) as client:
        error, text = await call(client, "kiwi_search_semantic", {"query": "kiwi"})
        assert error and text.startswith("semantic search is not enabled")
        error, text = await call(client, "kiwi_search_hybrid", {"query": "kiwi"})
        assert not error and re.match(r"1\. \S+ \(keyword only, #1\)\n", text)
        assert text.endswith("Semantic search is not enabled: these are keyword results only.")


# -- real processes -----------------------------------------------------------------------------


@contextmanager
def serving(root: Path, log: Path) -> Iterator[str]:
    """``kiwifs serve`` on a free port until the block ends (bounded wait for /readyz)."""
    with realserver.serving(root, log) as (base, _):
        yield base


def poll(check: Callable[[], bool], what: str, attempts: int = 300) -> None:
    for _ in range(attempts):
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def test_out_of_band_edit_changes_semantic_results_without_restart(
    root: Path, tmp_path: Path
) -> None:
    with serving(root, tmp_path / "serve.log") as base:

        def top(query: str) -> str:
            resp = httpx.get(f"{base}{API}/search/semantic", params={"q": query, "topK": 1})
            results = resp.json()["results"]
            return str(results[0]["path"]) if results else ""

        assert top("rain storm weather") != "tech/db.md"
        (root / "tech/db.md").write_text("Rain, wind and a storm: the weather forecast.\n")
        poll(lambda: top("rain storm weather") == "tech/db.md", "the edit is found by meaning")
        (root / "tech/db.md").unlink()
        poll(lambda: top("rain storm weather") != "tech/db.md", "the deletion is seen")


def test_a_reindex_killed_midway_is_completed_by_the_next_start(
    make_root: MakeRoot, tmp_path: Path
) -> None:
    files = {f"notes/n{i:03}.md": f"note {i} about rain and wind" for i in range(300)}
    with EmbeddingServer() as embedder:
        root = make_root(
            {**files, ".kiwi/config.toml": http_config("openai", embedder.url + "/v1")}
        )
        import threading

        embedder.gate, embedder.hold_at = threading.Event(), 3
        proc = subprocess.Popen(
            [KIWIFS, "reindex", "--root", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert embedder.arrived.wait(120), "the reindex never reached its third request"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(30)
            embedder.gate.set()
        with Knowledge.open(root) as kb:
            status = kb.vector_status()
        assert 0 < status.embedded < 300 and status.pending == 300 - status.embedded
        with serving(root, tmp_path / "serve.log") as base:

            def complete() -> bool:
                vectors = httpx.get(base + "/health").json()["vectors"]
                return bool(vectors["embedded"] == 300 and vectors["pending"] == 0)

            poll(complete, "the next start embeds what the killed reindex left", attempts=600)
            found = httpx.get(
                f"{base}{API}/search/semantic", params={"q": "rain and wind", "topK": 300}
            ).json()
            assert len({r["path"] for r in found["results"]}) == 200  # topK is capped at 200
