"""kiwi_patch_frontmatter and kiwi_blame through the official MCP client on a real git root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiwifs.knowledge import Knowledge
from mcpsession import call, mcp_client, ok

pytestmark = pytest.mark.anyio

PAGE = "---\ntitle: T\nstatus: draft\n---\n# T\n\nbody\n"


async def test_patch_then_blame(tmp_path: Path) -> None:
    Knowledge.init(tmp_path)
    with Knowledge.open(tmp_path) as kb:
        kb.write("p.md", PAGE, actor="alice")
        etag = kb.read("p.md").etag
        async with mcp_client(kb) as client:
            stale, conflict = await call(
                client,
                "kiwi_patch_frontmatter",
                {"path": "p.md", "fields": {"status": "x"}, "if_match": "0" * 40},
            )
            done = await ok(
                client,
                "kiwi_patch_frontmatter",
                {"path": "p.md", "fields": {"status": None, "tags": ["a"]}, "actor": "bob"},
            )
            blame = json.loads(await ok(client, "kiwi_blame", {"path": "p.md"}))
            missing, gone = await call(client, "kiwi_blame", {"path": "nope.md"})
            empty, needs = await call(
                client, "kiwi_patch_frontmatter", {"path": "p.md", "fields": {}}
            )
        assert kb.read("p.md").etag != etag
    assert stale and "modified since last read" in conflict
    assert done.startswith("Patched the frontmatter of p.md (ETag: ")
    assert (tmp_path / "p.md").read_text() == "---\ntitle: T\ntags:\n  - a\n---\n# T\n\nbody\n"
    authors = [(line["text"], line["author"]) for line in blame["lines"]]
    assert authors[:4] == [
        ("---", "alice"),
        ("title: T", "alice"),
        ("tags:", "bob"),
        ("  - a", "bob"),
    ]
    assert blame["total_lines"] == 8 and blame["truncated"] is False
    assert missing and gone.startswith("File not found at nope.md")
    assert empty and "fields is required" in needs
