"""The MCP interface, tested for real with the official ``mcp`` client.

Three ways in: the installed ``kiwifs mcp`` over stdio (what Claude Desktop or Cursor run), the same
command with ``--http``, and ``/mcp`` inside ``kiwifs serve``. Tool behaviour details are checked
in-process (the SDK's in-memory connection to the very server object the CLI builds), which keeps
the suite fast; the transports are checked once each, end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.testclient import TestClient

import realserver
from gitrepo import break_object_store_for
from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.server import http_app
from kiwifs.server.lifecycle import Serving
from mcpsession import fails, mcp_client, mcp_session, ok

pytestmark = pytest.mark.anyio

KIWIFS = str(Path(sys.executable).with_name("kiwifs"))
DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
TOOLS = {
    "kiwi_read",
    "kiwi_write",
    "kiwi_append",
    "kiwi_patch_frontmatter",
    "kiwi_delete",
    "kiwi_bulk_write",
    "kiwi_rename",
    "kiwi_tree",
    "kiwi_peek",
    "kiwi_backlinks",
    "kiwi_graph_walk",
    "kiwi_graph_path",
    "kiwi_health_check",
    "kiwi_section",
    "kiwi_context",
    "kiwi_search",
    "kiwi_search_semantic",
    "kiwi_search_hybrid",
    "kiwi_query_meta",
    "kiwi_changes",
    "kiwi_versions",
    "kiwi_blame",
    "kiwi_memory_report",
    "kiwi_memory_merge",
    "kiwi_remember",
    "kiwi_forget",
    "kiwi_restore",
    "kiwi_brief",
    "kiwi_memory_claim",
    "kiwi_memory_release",
    "kiwi_memory_check",
    "kiwi_memory_lineage",
    "kiwi_claim",
    "kiwi_release",
    "kiwi_claims_list",
    "kiwi_eligible",
}
READ_ONLY = {
    "kiwi_read",
    "kiwi_tree",
    "kiwi_peek",
    "kiwi_backlinks",
    "kiwi_graph_walk",
    "kiwi_graph_path",
    "kiwi_health_check",
    "kiwi_section",
    "kiwi_context",
    "kiwi_search",
    "kiwi_search_semantic",
    "kiwi_search_hybrid",
    "kiwi_query_meta",
    "kiwi_changes",
    "kiwi_versions",
    "kiwi_blame",
    "kiwi_memory_report",
    "kiwi_brief",
    "kiwi_memory_check",
    "kiwi_memory_lineage",
    "kiwi_claims_list",
    "kiwi_eligible",
}
DESTRUCTIVE = {"kiwi_write", "kiwi_delete", "kiwi_bulk_write", "kiwi_rename"}


def etag_of(text: str) -> str:
    return text.split("ETag: ", 1)[1].split(")", 1)[0].split("]", 1)[0]


def child_env() -> dict[str, str]:
    """The environment for ``kiwifs`` subprocesses: isolated git config from conftest."""
    return {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "HOME", "PATH"))}


# ---------------------------------------------------------------------------------------------
# tool behaviour (in-process)


async def test_tools_and_annotations(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None
        assert hints.read_only_hint is (name in READ_ONLY), name
        if name not in READ_ONLY:
            assert hints.destructive_hint is (name in DESTRUCTIVE), name
        assert tool.description, name
    assert "from" in tools["kiwi_rename"].input_schema["properties"]
    assert "or" in tools["kiwi_query_meta"].input_schema["properties"]
    assert {"limit", "offset", "path_prefix"} <= set(
        tools["kiwi_search"].input_schema["properties"]
    )


async def test_read_write_append_and_etags(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        written = await ok(
            client, "kiwi_write", {"path": "notes/a.md", "content": "# A\n", "provenance": "run:r1"}
        )
        assert written.startswith("Written notes/a.md (ETag: ")
        etag = etag_of(written)
        read = await ok(client, "kiwi_read", {"path": "notes/a.md"})
        assert read.startswith(f"[ETag: {etag}]\n\n---\n")
        assert "derived-from:" in read and "actor: mcp-agent" in read
        same = await ok(client, "kiwi_read", {"path": "notes/a.md", "if_not_etag": f'"{etag}"'})
        assert same == (
            f"File not modified (etag: {etag}). Content unchanged since your last read."
        )
        meta = await ok(client, "kiwi_read", {"path": "notes/a.md", "metadata_only": True})
        assert json.loads(meta.split("\n\n", 1)[1])["derived-from"][0]["id"] == "r1"
        appended = await ok(client, "kiwi_append", {"path": "notes/a.md", "content": "more"})
        assert appended.startswith("Appended to notes/a.md (ETag: ")
        stale = await fails(
            client, "kiwi_write", {"path": "notes/a.md", "content": "x", "if_match": etag}
        )
        assert "modified since last read" in stale
        assert await fails(client, "kiwi_write", {"path": "b.md", "content": ""}) == (
            "content is required"
        )
        bad = await fails(client, "kiwi_write", {"path": "b.md", "content": "x", "provenance": "x"})
        assert "type:id" in bad
    assert (knowledge_root / "notes/a.md").read_text().endswith("# A\n\nmore")


async def test_errors_are_tool_errors_the_model_can_act_on(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        missing = await fails(client, "kiwi_read", {"path": "nope.md"})
        assert missing == "File not found at nope.md. Use kiwi_tree to see available files."
        assert "File not found at nope.md" in await fails(
            client, "kiwi_delete", {"path": "nope.md"}
        )
        assert "File not found at gone.md" in await fails(
            client, "kiwi_rename", {"from": "gone.md", "to": "x.md"}
        )
        assert "'..'" in await fails(client, "kiwi_read", {"path": "../etc/passwd"})
        assert "hidden" in await fails(client, "kiwi_write", {"path": ".git/x", "content": "x"})
        assert "Folder not found" in await fails(client, "kiwi_tree", {"path": "nowhere"})
        # numbers are never errors on MCP (docs/mcp.md, "Numbers"): -1 is the default, 2 clamped
        await ok(client, "kiwi_search", {"query": "x", "offset": -1, "recency_weight": 2})
        assert "modifiedAfter" in await fails(
            client, "kiwi_search", {"query": "x", "modifiedAfter": "last tuesday"}
        )
        assert "unknown sequence" in await fails(client, "kiwi_changes", {"since": "zzz"})
        # the server is still there after every failure
        assert "SCHEMA.md" in await ok(client, "kiwi_tree", {})


async def test_delete_bulk_rename_tree_versions_changes(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        bulk = await ok(
            client,
            "kiwi_bulk_write",
            {"files": [{"path": "x/1.md", "content": "one"}, {"path": "x/2.md", "content": "2"}]},
        )
        assert bulk.splitlines()[0] == "Written 2 files in a single commit"
        assert "  - x/1.md (ETag: " in bulk
        renamed = await ok(client, "kiwi_rename", {"from": "x/1.md", "to": "x/one.md"})
        assert renamed.startswith("Renamed x/1.md \u2192 x/one.md (ETag: ")
        assert await ok(client, "kiwi_delete", {"path": "x/2.md"}) == "Deleted x/2.md"
        tree = await ok(client, "kiwi_tree", {"path": "x"})
        assert tree == "one.md (3 B)"
        full = (await ok(client, "kiwi_tree", {})).splitlines()
        assert "x/" in full and "  one.md (3 B)" in full and "episodes/" in full
        versions = await ok(client, "kiwi_versions", {"path": "x/one.md"})
        assert versions.startswith("1 version(s) of x/one.md")
        changes = (await ok(client, "kiwi_changes", {"limit": 3})).splitlines()
        assert changes[0].split()[1:3] == ["delete", "x/2.md"]
        assert "(by mcp-agent at " in changes[0]
        assert changes[-1].startswith("last_seq: ")


async def test_search_and_query_meta(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        for n in (1, 2):
            body = f"---\nstatus: draft\nrank: {n}\n---\nThe zebrafish study, part {n}.\n"
            await ok(client, "kiwi_write", {"path": f"research/z{n}.md", "content": body})
        found = (await ok(client, "kiwi_search", {"query": "zebrafish", "limit": 1})).splitlines()
        assert found[0].startswith("1. research/z") and "(score: " in found[0]
        assert found[1].startswith("   ") and "zebrafish" in found[1] and "<mark>" not in found[1]
        assert found[-1] == "Showing 1-1. Use offset=1 to see more."
        second = await ok(client, "kiwi_search", {"query": "zebrafish", "offset": 1})
        assert second.startswith("2. research/z") and "Showing" not in second
        none = await ok(client, "kiwi_search", {"query": "zebrafish", "path_prefix": "concepts/"})
        assert none == "No results found in concepts/."
        meta = await ok(
            client, "kiwi_query_meta", {"filters": ["$.status=draft", "$.rank>1"], "sort": "$.rank"}
        )
        assert meta.splitlines() == ["- research/z2.md", "  rank: 2", "  status: draft"]
        paged = await ok(client, "kiwi_query_meta", {"or": ["$.rank=1", "$.rank=2"], "limit": 1})
        assert paged.splitlines()[-1] == "Showing 1-1 of 2. Use offset=1 to see more."
        assert await ok(client, "kiwi_query_meta", {"filters": ["$.status=final"]}) == (
            "No matching files found."
        )
        assert "filter" in await fails(client, "kiwi_query_meta", {"filters": ["status=draft"]})


async def test_memory_report_text_json_and_paging(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        text = await ok(client, "kiwi_memory_report", {})
        assert text.splitlines() == [
            "Episodic files:           1",
            "merged-from references:   0",
            "Unmerged (no merged-from): 1",
            "  - episodes/example-episode.md  episode_id=example-001",
        ]
        data = json.loads(await ok(client, "kiwi_memory_report", {"format": "json", "limit": 0}))
        assert data["episodic_count"] == 1 and data["unmerged"] == []
        assert data["episodes_prefix"] == "episodes/"
        await ok(
            client, "kiwi_memory_merge", {"path": "log.md", "entries": [{"id": "example-001"}]}
        )
        empty = await ok(client, "kiwi_memory_report", {"episodes_prefix": "nothing-here/"})
        assert "merged-from references:   1" in empty
        assert empty.splitlines()[-1] == (
            "All episodic files are referenced by at least one merged-from list."
        )
        # a number is never an error on MCP: a negative offset is the default (0)
        assert await ok(client, "kiwi_memory_report", {"offset": -1}) == await ok(
            client, "kiwi_memory_report", {}
        )


async def test_remember_writes_an_episode_and_refuses_duplicates(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        said = await ok(
            client,
            "kiwi_remember",
            {
                "content": "Tried the cache; it halved latency.",
                "title": "Cache trial",
                "scope": "api",
                "tags": ["perf"],
                "provenance": "run:run-7",
            },
        )
        assert said.startswith("Remembered episodes/")  # KiwiFS's text
        path, ident = said.split()[1], said.split()[3].rstrip(",")
        assert uuid.UUID(ident).version == 4
        assert path.startswith("episodes/") and path.endswith(f"/{ident}.md")
        stored = Knowledge.open(knowledge_root).frontmatter(path)
        assert stored["memory_kind"] == "episodic" and stored["episode_id"] == ident
        assert stored["title"] == "Cache trial" and stored["tags"] == ["perf"]
        assert stored["scope"] == "api"
        assert stored["created"].endswith("Z") and stored["derived-from"][0]["id"] == "run-7"
        await ok(client, "kiwi_remember", {"content": "first", "episode_id": "ep-fixed"})
        again = await fails(
            client, "kiwi_remember", {"content": "second", "episode_id": "ep-fixed"}
        )
        assert "already exists" in again
        for bad in ("a/b", "../x", ".hidden", ""):
            if bad:
                assert "invalid episode_id" in await fails(
                    client, "kiwi_remember", {"content": "x", "episode_id": bad}
                )
    assert "first" in next((knowledge_root / "episodes").glob("*/ep-fixed.md")).read_text()


async def test_failing_git_is_a_tool_error_not_a_hang(knowledge_root: Path) -> None:
    fan, data = break_object_store_for(knowledge_root, b"# written while git is broken\n")
    kb = Knowledge.open(knowledge_root)
    Serving(kb).enable_async_commit(window=30.0)
    async with mcp_client(kb) as client:
        await ok(client, "kiwi_write", {"path": "doomed.md", "content": data.decode()})
        assert "git commit failed" in await fails(client, "kiwi_versions", {"path": "doomed.md"})
        refused = await fails(client, "kiwi_write", {"path": "x.md", "content": "x"})
        assert "background git commits are failing" in refused
    kb.close()


async def test_resources(knowledge_root: Path) -> None:
    (knowledge_root / "concepts").mkdir(exist_ok=True)
    (knowledge_root / "concepts" / "x.md").write_text("# X\n")
    async with mcp_session(knowledge_root) as client:
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        assert templates == {"kiwi://file/{path}", "kiwi://tree/{path}"}
        assert [str(r.uri) for r in (await client.list_resources()).resources] == ["kiwi://schema"]
        schema = await client.read_resource("kiwi://schema")
        assert schema.contents[0].text.startswith("# Schema")  # type: ignore[union-attr]
        for uri in ("kiwi://file/concepts/x.md", "kiwi://file/concepts%2Fx.md"):
            got = await client.read_resource(uri)
            assert got.contents[0].text == "# X\n"  # type: ignore[union-attr]
            assert got.contents[0].mime_type == "text/markdown"
        tree = await client.read_resource("kiwi://tree/concepts")
        assert "x.md (4 B)" in tree.contents[0].text  # type: ignore[union-attr]
        with pytest.raises(MCPError, match="not found"):
            await client.read_resource("kiwi://file/missing.md")
        (knowledge_root / "SCHEMA.md").unlink()
        with pytest.raises(MCPError, match="no SCHEMA.md found"):
            await client.read_resource("kiwi://schema")


async def test_kiwifs_tolerance_limits_and_filter_objects(knowledge_root: Path) -> None:
    """Values KiwiFS clients send and KiwiFS accepts are accepted (defaulted or capped)."""
    async with mcp_session(knowledge_root) as client:
        for n in range(55):
            await ok(client, "kiwi_write", {"path": f"t/{n:02}.md", "content": f"tapir {n}"})
        capped = await ok(client, "kiwi_search", {"query": "tapir", "limit": 100})
        numbered = [line for line in capped.splitlines() if line[:1].isdigit()]
        assert len(numbered) == 50 and capped.endswith("Use offset=50 to see more.")
        default = await ok(client, "kiwi_search", {"query": "tapir", "limit": 0})
        assert len([line for line in default.splitlines() if line[:1].isdigit()]) == 20
        changes = await ok(client, "kiwi_changes", {"limit": 1000})
        assert len(changes.splitlines()) - 1 > 50  # every change there is, not an error
        assert len((await ok(client, "kiwi_changes", {"limit": 0})).splitlines()) - 1 == 50
        deep = await ok(client, "kiwi_tree", {"depth": 50})
        assert "t/" in deep and "00.md" in deep
        assert "00.md" not in await ok(client, "kiwi_tree", {"depth": 1})
        assert "00.md" in await ok(client, "kiwi_tree", {"depth": 0})  # 0 means the default, 3
        listed = await ok(client, "kiwi_query_meta", {"limit": 500})
        assert "Showing" not in listed  # everything fits under the cap of 200
        await ok(
            client,
            "kiwi_write",
            {"path": "m/a.md", "content": "---\nstatus: draft\nrank: 2\n---\n"},
        )
        await ok(
            client,
            "kiwi_write",
            {"path": "m/b.md", "content": "---\nstatus: draft\nrank: 3\n---\n"},
        )
        one = await ok(client, "kiwi_query_meta", {"filters": {"status": "draft", "rank": 2}})
        assert one.splitlines() == ["- m/a.md", "  rank: 2", "  status: draft"]
        both = await ok(client, "kiwi_query_meta", {"filters": {"$.status": "draft"}})
        assert both.count("- m/") == 2
        refused = await fails(client, "kiwi_query_meta", {"filters": {"status": ["draft"]}})
        assert "filters" in refused  # the SDK's schema check names the argument


async def test_if_match_on_every_writing_tool(knowledge_root: Path) -> None:
    """A stale ETag is a tool error naming the current one, and nothing changes."""
    stale = "0" * 40
    async with mcp_session(knowledge_root) as client:
        etag = etag_of(await ok(client, "kiwi_write", {"path": "c.md", "content": "v1"}))
        calls = [
            ("kiwi_write", {"content": "v2"}),
            ("kiwi_append", {"content": "more"}),
            ("kiwi_delete", {}),
            ("kiwi_memory_merge", {"entries": [{"id": "e1"}]}),
            ("kiwi_forget", {"reason": "old"}),
            ("kiwi_restore", {}),
        ]
        for name, args in calls:
            text = await fails(client, name, {"path": "c.md", "if_match": stale, **args})
            assert text == (
                f"file modified since last read \u2014 re-fetch and retry (current ETag: {etag})"
            ), name
        assert (knowledge_root / "c.md").read_text() == "v1"
        appended = await ok(
            client, "kiwi_append", {"path": "c.md", "content": "v2", "if_match": etag}
        )
        assert appended.startswith("Appended to c.md")
        assert (knowledge_root / "c.md").read_text() == "v1\nv2"


async def test_forget_restore_and_brief_texts(knowledge_root: Path) -> None:
    async with mcp_session(knowledge_root) as client:
        await ok(client, "kiwi_write", {"path": "n/a.md", "content": "the axolotl " * 30})
        await ok(client, "kiwi_write", {"path": "n/b.md", "content": "an axolotl\n"})
        text = await ok(client, "kiwi_brief", {"query": "axolotl", "budget_tokens": 50})
        lines = text.splitlines()
        assert lines[:2] == [
            "# Context pack: axolotl",
            "3 of 50 tokens used (1 token ~ 4 characters), 1 page(s), 1 left out.",
        ]
        assert lines[2].startswith("- n/b.md (3 tokens, score: ") and "ETag: " in lines[2]
        assert lines[4:6] == ["=== n/b.md ===", "an axolotl"]
        assert lines[-2].startswith("Dropped for budget: 1 page(s) left out (read them with")
        assert lines[-1].startswith("- n/a.md (90 tokens, score: ")
        assert lines[-1].endswith(": budget (over the token budget)")
        pack = json.loads(await ok(client, "kiwi_brief", {"query": "axolotl", "format": "json"}))
        assert [p["path"] for p in pack["pages"]] == ["n/a.md", "n/b.md"]
        assert await ok(client, "kiwi_brief", {"query": "narwhal"}) == "No pages match 'narwhal'.\n"
        zero = await ok(client, "kiwi_brief", {"query": "axolotl", "budget_tokens": 0})
        assert "of 4000 tokens used" in zero  # 0 is the default budget, as KiwiFS
        forgot = await ok(client, "kiwi_forget", {"path": "n/b.md", "superseded_by": "n/a.md"})
        assert forgot.startswith("Forgot n/b.md (memory_status: superseded, ETag: ")
        assert (await ok(client, "kiwi_forget", {"path": "n/b.md"})).startswith(
            "Already forgotten: n/b.md"
        )
        assert "n/b.md" not in await ok(client, "kiwi_search", {"query": "axolotl"})
        assert "n/b.md" in await ok(
            client, "kiwi_search", {"query": "axolotl", "include_superseded": True}
        )
        assert "memory_status: superseded" in await ok(client, "kiwi_read", {"path": "n/b.md"})
        missing = await fails(client, "kiwi_forget", {"path": "n/none.md"})
        assert missing == "File not found at n/none.md. Use kiwi_tree to see available files."
        assert (await ok(client, "kiwi_restore", {"path": "n/b.md"})).startswith("Restored n/b.md")
        assert (await ok(client, "kiwi_restore", {"path": "n/b.md"})).startswith(
            "Not forgotten: n/b.md"
        )


# ---------------------------------------------------------------------------------------------
# stdio: the installed command, as an MCP host runs it


@asynccontextmanager
async def stdio_session(root: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=KIWIFS, args=["mcp", "--root", str(root)], env=child_env()
    )
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                yield session


async def call_every_tool(session: ClientSession) -> None:
    """One successful call of each tool, in an order where each has something to work on."""
    await ok(session, "kiwi_write", {"path": "a.md", "content": "---\nstatus: draft\n---\nalpha"})
    await ok(session, "kiwi_read", {"path": "a.md"})
    await ok(session, "kiwi_backlinks", {"path": "a.md"})
    await ok(session, "kiwi_graph_walk", {"path": "a.md"})
    await ok(session, "kiwi_graph_path", {"from": "a.md", "to": "a.md"})
    await ok(session, "kiwi_health_check", {"path": "a.md"})
    await ok(session, "kiwi_append", {"path": "a.md", "content": "beta"})
    await ok(session, "kiwi_patch_frontmatter", {"path": "a.md", "fields": {"tags": ["t"]}})
    await ok(session, "kiwi_bulk_write", {"files": [{"path": "b.md", "content": "gamma"}]})
    await ok(session, "kiwi_rename", {"from": "b.md", "to": "c.md"})
    await ok(session, "kiwi_delete", {"path": "c.md"})
    await ok(session, "kiwi_tree", {})
    await ok(session, "kiwi_search", {"query": "alpha"})
    await ok(session, "kiwi_query_meta", {"filters": ["$.status=draft"]})
    await ok(session, "kiwi_changes", {})
    await ok(session, "kiwi_versions", {"path": "a.md"})
    await ok(session, "kiwi_blame", {"path": "a.md"})
    await ok(session, "kiwi_remember", {"content": "an episode"})
    await ok(session, "kiwi_memory_report", {})
    await ok(session, "kiwi_memory_merge", {"path": "concepts/c.md", "entries": [{"id": "x"}]})
    await ok(session, "kiwi_brief", {"query": "alpha"})
    await ok(session, "kiwi_forget", {"path": "a.md", "reason": "stale"})
    await ok(session, "kiwi_restore", {"path": "a.md"})
    await ok(session, "kiwi_memory_claim", {"worker": "w1", "limit": 1})
    await ok(session, "kiwi_memory_release", {"worker": "w1"})
    await ok(session, "kiwi_memory_check", {})
    await ok(session, "kiwi_memory_lineage", {"path": "concepts/c.md"})
    await ok(session, "kiwi_claim", {"path": "a.md", "actor": "agent-1"})
    await ok(session, "kiwi_claims_list", {})
    await ok(session, "kiwi_release", {"path": "a.md", "actor": "agent-1"})
    await ok(session, "kiwi_eligible", {})


async def poll_search(session: ClientSession, query: str, wanted: str) -> str:
    """Search until ``wanted`` shows up (the watcher is asynchronous), for at most 10 s."""
    text = ""
    with anyio.move_on_after(10):
        while wanted not in text:
            text = await ok(session, "kiwi_search", {"query": query})
            await anyio.sleep(0.1)
    return text


async def test_stdio_end_to_end(knowledge_root: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "stderr.log"
    async with stdio_session(knowledge_root, errlog) as session:
        init = await session.initialize()
        assert init.server_info.name == "kiwifs"
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS
        await call_every_tool(session)
        assert "File not found" in await fails(session, "kiwi_read", {"path": "nope.md"})
        for uri in ("kiwi://schema", "kiwi://file/a.md", "kiwi://tree/"):
            assert (await session.read_resource(uri)).contents, uri
        assert "a.md" in await ok(session, "kiwi_tree", {})
        (knowledge_root / "out-of-band.md").write_text("a quokka, written with cat\n")
        assert "out-of-band.md" in await poll_search(session, "quokka", "out-of-band.md")
    log = errlog.read_text()
    assert "kiwifs-mcp: tool=kiwi_write duration=" in log
    assert "kiwifs-mcp: tool=kiwi_read duration=" in log and "error=true" in log


async def test_stdio_agent_memory_loop(knowledge_root: Path, tmp_path: Path) -> None:
    """Remember three episodes, consolidate two into a concept page, and see one left."""
    (knowledge_root / "episodes" / "example-episode.md").unlink()
    async with stdio_session(knowledge_root, tmp_path / "stderr.log") as session:
        await session.initialize()
        ids = []
        for n in range(3):
            said = await ok(session, "kiwi_remember", {"content": f"observation {n}"})
            ids.append(said.split()[3].rstrip(","))  # Remembered <path> (episode_id: <id>, …
        report = json.loads(await ok(session, "kiwi_memory_report", {"format": "json"}))
        assert report["unmerged_count"] == 3
        assert sorted(e["episode_id"] for e in report["unmerged"]) == sorted(ids)
        page = await ok(
            session,
            "kiwi_write",
            {"path": "concepts/lessons.md", "content": "# Lessons\n\nObservations 0 and 1.\n"},
        )
        merged = await ok(
            session,
            "kiwi_memory_merge",
            {
                "path": "concepts/lessons.md",
                "entries": [{"id": ids[0]}, {"id": ids[1], "note": "second"}],
                "if_match": etag_of(page),
            },
        )
        assert merged.startswith("Updated concepts/lessons.md: merged 2 entries")
        text = await ok(session, "kiwi_memory_report", {})
        assert "Unmerged (no merged-from): 1" in text
        assert f"episode_id={ids[2]}" in text and ids[0] not in text
        again = await ok(
            session,
            "kiwi_memory_merge",
            {"path": "concepts/lessons.md", "entries": [{"id": ids[0]}]},
        )
        assert again.startswith("Nothing to merge")
    assert (
        "# Lessons\n\nObservations 0 and 1.\n"
        in (knowledge_root / "concepts/lessons.md").read_text()
    )


async def test_stdio_agent_lifecycle_loop(knowledge_root: Path, tmp_path: Path) -> None:
    """Over stdio with the official client: remember 5 episodes (two with scope a) → a brief
    within a small budget → forget one → gone from search, brief, meta and the unmerged list,
    still readable → restore → back."""
    async with stdio_session(knowledge_root, tmp_path / "stderr.log") as session:
        await session.initialize()
        made = []
        for n in range(5):
            args: dict[str, Any] = {"content": f"okapi field note {n}: " + "stripe " * (20 * n)}
            if n < 2:
                args["scope"] = "a"
            made.append((await ok(session, "kiwi_remember", args)).split()[1])
        pack = json.loads(
            await ok(
                session, "kiwi_brief", {"query": "okapi", "budget_tokens": 90, "format": "json"}
            )
        )
        assert 0 < pack["total_tokens"] <= 90 and pack["pages"] and pack["left_out"]
        assert {p["path"] for p in pack["pages"]} | {o["path"] for o in pack["left_out"]} == set(
            made
        )
        scoped = json.loads(
            await ok(session, "kiwi_brief", {"query": "okapi", "scope": "a", "format": "json"})
        )
        assert sorted(p["path"] for p in scoped["pages"]) == sorted(made[:2])
        gone = made[0]

        async def visible() -> list[bool]:
            brief = json.loads(
                await ok(session, "kiwi_brief", {"query": "okapi", "format": "json"})
            )
            report = json.loads(await ok(session, "kiwi_memory_report", {"format": "json"}))
            return [
                gone in await ok(session, "kiwi_search", {"query": "okapi"}),
                gone in [p["path"] for p in brief["pages"]],
                gone in await ok(session, "kiwi_query_meta", {"filters": {"scope": "a"}}),
                gone in [e["path"] for e in report["unmerged"]],
            ]

        assert await visible() == [True, True, True, True]
        forgot = await ok(session, "kiwi_forget", {"path": gone, "reason": "misidentified"})
        assert forgot.startswith(f"Forgot {gone}")
        assert await visible() == [False, False, False, False]
        assert "Superseded (forgotten):   1" in await ok(session, "kiwi_memory_report", {})
        assert "okapi field note 0" in await ok(session, "kiwi_read", {"path": gone})
        assert (await ok(session, "kiwi_restore", {"path": gone})).startswith(f"Restored {gone}")
        assert await visible() == [True, True, True, True]


# ---------------------------------------------------------------------------------------------
# the command line


def test_mcp_command_flags(tmp_path: Path) -> None:
    runner = CliRunner()
    no_root = runner.invoke(cli, ["mcp"])
    assert no_root.exit_code == 2 and "--root" in no_root.output
    missing = runner.invoke(cli, ["mcp", "--root", str(tmp_path / "absent")])
    assert missing.exit_code == 2 and "not found" in missing.output
    assert not (tmp_path / "absent").exists()
    port_alone = runner.invoke(cli, ["mcp", "--root", str(tmp_path), "--port", "9000"])
    assert port_alone.exit_code == 2 and "--http" in port_alone.output
    bad_port = runner.invoke(cli, ["mcp", "--root", str(tmp_path), "--http", "--port", "65536"])
    assert bad_port.exit_code == 2


# ---------------------------------------------------------------------------------------------
# streamable HTTP: kiwifs mcp --http, and /mcp inside kiwifs serve


@contextmanager
def running(args: list[str], log: Path, ready_path: str = "/health") -> Iterator[str]:
    """``kiwifs <args>`` on a free port: its base URL once ``ready_path`` answers (below 500)."""
    with realserver.running(
        args, log, child_env(), ready_path, range(500), stdout_to_log=False, stop_timeout=10
    ) as (base, _):
        yield base


@asynccontextmanager
async def http_session(
    url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def test_http_transport(knowledge_root: Path, tmp_path: Path) -> None:
    args = ["mcp", "--root", str(knowledge_root), "--http"]
    with running(args, tmp_path / "http.log") as base:
        health = httpx.get(base + "/health").json()
        assert health["status"] == "ok" and health["transport"] == "http"
        assert httpx.post(base + "/health").status_code == 405
        async with http_session(base + "/mcp") as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            await call_every_tool(session)
            assert (await session.read_resource("kiwi://file/a.md")).contents
    assert "kiwifs-mcp: tool=kiwi_write" in (tmp_path / "http.log").read_text()


async def test_mcp_mounted_in_serve_behind_auth(knowledge_root: Path, tmp_path: Path) -> None:
    args = ["serve", "--root", str(knowledge_root), "--api-key", "s3cret"]
    # /readyz: the routes are built (/health answers while they are, see docs/rest.md)
    with running(args, tmp_path / "serve.log", "/readyz") as base:
        refused = httpx.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401 and "error" in refused.json()
        auth = {"Authorization": "Bearer s3cret"}
        async with http_session(base + "/mcp", auth) as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            written = await ok(session, "kiwi_write", {"path": "via-serve.md", "content": "hi"})
            assert written.startswith("Written via-serve.md")
            got = httpx.get(base + "/api/kiwi/file", params={"path": "via-serve.md"}, headers=auth)
            assert got.status_code == 200 and got.text == "hi"


SCOPED_KEYS = """
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-read"
space = "default"
scope = "read"

[[auth.api_keys]]
key = "k-write"
space = "default"
scope = "write"
actor = "agent:writer"

[[auth.api_keys]]
key = "k-team"
scope = "write"
prefix = "team"

[[auth.api_keys]]
key = "k-admin"

[[auth.api_keys]]
key = "k-alpha"
space = "alpha"
scope = "write"
"""


async def test_mcp_in_serve_calls_each_tool_as_the_key_allows(
    knowledge_root: Path, tmp_path: Path
) -> None:
    """A ``read`` key reads and searches but its writing calls are tool errors that change
    nothing; a key with an actor authors what it writes, whatever actor the call names; a key
    with a prefix is refused whole (the tools cannot keep to one)."""
    config = knowledge_root / ".kiwi" / "config.toml"
    config.write_text(config.read_text().replace('[auth]\ntype = "none"', SCOPED_KEYS.strip()))
    args = ["serve", "--root", str(knowledge_root)]
    with running(args, tmp_path / "serve.log", "/readyz") as base:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        team = httpx.post(base + "/mcp", json=ping, headers={"Authorization": "Bearer k-team"})
        assert team.status_code == 403 and "prefix" in team.json()["error"]
        async with http_session(base + "/mcp", {"Authorization": "Bearer k-read"}) as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            assert await ok(session, "kiwi_read", {"path": "index.md"})
            refused = await fails(session, "kiwi_write", {"path": "r.md", "content": "no"})
            assert "scope is read" in refused and "kiwi_write" in refused
            assert "scope is read" in await fails(session, "kiwi_remember", {"content": "x"})
        assert not (knowledge_root / "r.md").exists()
        async with http_session(base + "/mcp", {"Authorization": "Bearer k-write"}) as session:
            args_ = {"path": "w.md", "content": "by the key", "actor": "agent:someone-else"}
            assert (await ok(session, "kiwi_write", args_)).startswith("Written w.md")
        author = subprocess.run(
            ["git", "-C", str(knowledge_root), "log", "-1", "--format=%an", "--", "w.md"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert author == "agent:writer"
        made = httpx.post(
            base + "/api/spaces",
            json={"name": "alpha"},
            headers={"Authorization": "Bearer k-admin"},
        )
        assert made.status_code == 201
        # no X-Kiwi-Space: /mcp goes to the one space the key is bound to
        async with http_session(base + "/mcp", {"Authorization": "Bearer k-alpha"}) as session:
            args_ = {"path": "a.md", "content": "alpha's"}
            assert (await ok(session, "kiwi_write", args_)).startswith("Written a.md")
        alpha = Path(made.json()["root"])
        assert (alpha / "a.md").read_text() == "alpha's" and not (knowledge_root / "a.md").exists()


def test_standalone_http_honours_apikey_config(knowledge_root: Path) -> None:
    config = knowledge_root / ".kiwi" / "config.toml"
    config.write_text(config.read_text().replace('type = "none"', 'type = "apikey"\napi_key = "k"'))
    client = TestClient(http_app(Knowledge.open(knowledge_root)), base_url="http://127.0.0.1:8181")
    refused = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert refused.status_code == 401 and refused.json() == {"error": "invalid API key"}
    assert client.get("/health").json()["status"] == "ok"


# ---------------------------------------------------------------------------------------------
# docs


def test_every_tool_is_documented() -> None:
    text = DOCS.read_text()
    for name in sorted(TOOLS):
        assert f"`{name}`" in text, f"docs/mcp.md does not document {name}"
    for uri in ("kiwi://schema", "kiwi://file/{path}", "kiwi://tree/{path}"):
        assert uri in text
    assert "kiwifs mcp" in text and '"args": ["mcp", "--root"' in text
