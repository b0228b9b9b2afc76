"""kiwi_peek, kiwi_section, kiwi_context and kiwi_read's if_not_etag / metadata_only, through
the official MCP client on a real root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpsession import call, mcp_session, ok

pytestmark = pytest.mark.anyio

PAGE = "---\ntitle: T\nstatus: draft\n---\n# T\n\nintro [[Other]]\n\n## A\n\none\n\n## A\n\ntwo\n"


async def test_peek_and_section(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text(PAGE)
    async with mcp_session(tmp_path) as client:
        peek = json.loads(await ok(client, "kiwi_peek", {"path": "p.md"}))
        first = json.loads(await ok(client, "kiwi_section", {"path": "p.md", "heading": "a"}))
        second = json.loads(await ok(client, "kiwi_section", {"path": "p.md", "index": 2}))
        failed, text = await call(client, "kiwi_section", {"path": "p.md", "heading": "zz"})
        needs, usage = await call(client, "kiwi_section", {"path": "p.md"})
        # KiwiFS's clients: -1 means "no index" (by heading), a number may come as 2.0 or 2.7
        sentinel = json.loads(
            await ok(client, "kiwi_section", {"path": "p.md", "heading": "a", "index": -1})
        )
        fraction = json.loads(await ok(client, "kiwi_section", {"path": "p.md", "index": 2.7}))
        alone, unset = await call(client, "kiwi_section", {"path": "p.md", "index": -1})
        missing, gone = await call(client, "kiwi_peek", {"path": "nope.md"})
    assert peek["title"] == "T" and peek["headings"] == ["T", "A", "A"]
    assert peek["links_out"] == ["Other"] and peek["links_in"] == []
    assert first["content"] == "## A\n\none" and second["content"] == "## A\n\ntwo"
    assert set(first) == {"path", "heading", "level", "content", "line_start", "line_end"}
    assert failed and "no heading of p.md matches 'zz'" in text
    assert needs and "heading or index is required" in usage
    assert sentinel == first and fraction == second
    assert alone and "heading or index is required" in unset
    assert missing and gone.startswith("File not found at nope.md")


async def test_context(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as client:
        bare = await ok(client, "kiwi_context", {})
    (tmp_path / "SCHEMA.md").write_text("the schema\n")
    (tmp_path / ".kiwi").mkdir(exist_ok=True)
    (tmp_path / ".kiwi" / "rules.md").write_text("the rules\n")
    async with mcp_session(tmp_path) as client:
        full = await ok(client, "kiwi_context", {})
    assert "(no SCHEMA.md found)" in bare and "(no .kiwi/rules.md found)" in bare
    assert "=== SCHEMA ===\nthe schema" in full and "=== RULES ===\nthe rules" in full
    assert "=== MEMORY ===\nepisodes_prefix: episodes/" in full


async def test_read_if_not_etag_and_metadata_only(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text(PAGE)
    async with mcp_session(tmp_path) as client:
        read = await ok(client, "kiwi_read", {"path": "p.md"})
        etag = read.split("[ETag: ", 1)[1].split("]", 1)[0]
        same = await ok(client, "kiwi_read", {"path": "p.md", "if_not_etag": etag})
        quoted = await ok(client, "kiwi_read", {"path": "p.md", "if_not_etag": f'"{etag}"'})
        other = await ok(client, "kiwi_read", {"path": "p.md", "if_not_etag": "0" * 40})
        meta = await ok(client, "kiwi_read", {"path": "p.md", "metadata_only": True})
    assert (
        same
        == quoted
        == f"File not modified (etag: {etag}). Content unchanged since your last read."
    )
    assert other == read and "intro" in other
    assert meta.startswith(f"[ETag: {etag}]") and "intro" not in meta
    assert json.loads(meta.split("\n\n", 1)[1]) == {"title": "T", "status": "draft"}
