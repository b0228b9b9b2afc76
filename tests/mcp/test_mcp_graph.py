"""kiwi_graph_walk, kiwi_graph_path and kiwi_health_check through the official MCP client on a
real root: KiwiFS's JSON and texts, superseded pages marked, and the failures' texts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpsession import call, mcp_session, ok

pytestmark = pytest.mark.anyio


async def test_graph_tools(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "---\nowner: o\nstatus: s\nnext-review: 2999-01-01\n---\n[[b]]\n\n"
        "A page long enough, at well over fifty characters, not to be empty.\n"
    )
    (tmp_path / "b.md").write_text("---\nmemory_status: superseded\n---\n[[c]] [[gone]]\n")
    (tmp_path / "c.md").write_text("c\n")
    (tmp_path / "index.md").write_text("[[a]]\n")
    async with mcp_session(tmp_path) as client:
        walk = json.loads(await ok(client, "kiwi_graph_walk", {"path": "b.md"}))
        bare = json.loads(
            await ok(client, "kiwi_graph_walk", {"path": "b.md", "include_siblings": False})
        )
        path = await ok(client, "kiwi_graph_path", {"from": "a.md", "to": "c.md"})
        none = await call(client, "kiwi_graph_path", {"from": "c.md", "to": "a.md"})
        health = await ok(client, "kiwi_health_check", {"path": "b.md"})
        healthy = await ok(client, "kiwi_health_check", {"path": "a.md"})
        missing = await call(client, "kiwi_graph_walk", {"path": "nope.md"})
    assert walk["links_out"] == ["c.md"] and walk["links_in"] == ["a.md"]
    assert walk["hub_score"] == 0.25
    assert walk["superseded"] == ["b.md"] and walk["broken"] == ["gone"]
    assert {s["path"] for s in walk["siblings"]} == {"a.md", "c.md", "index.md"} and bare[
        "siblings"
    ] == []
    assert path == (
        "Shortest path from a.md to c.md (2 hops):\n\n  a.md\n  \u2192 b.md [superseded]\n"
        "  \u2192 c.md"
    )
    assert none == (True, "Path finding failed: no path exists between the given pages")
    assert health.startswith("Health: b.md\n  Word count:       2\n")
    assert "    - broken-link: [[gone]] doesn't resolve to any file" in health
    assert "  Superseded:       yes" in health
    assert "  Issues: none" in healthy
    assert missing == (True, "File not found at nope.md.")
