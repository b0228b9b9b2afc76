"""An agent following KiwiFS's playbook, end to end: the installed ``kiwifs mcp`` over stdio,
driven by the official MCP client, on a realistic root.

The agent reads the context first, searches, peeks at a hit, reads one section of it (by a
partial heading and by index), looks at who links to it, patches its frontmatter with the ETag
it read (one commit, the body untouched; a stale ETag refused, the file untouched), then reads
again with ``if_not_etag`` and ``metadata_only``. Every answer is checked against the shape a
client written for KiwiFS expects: its parameter names and required parameters, its JSON keys
and the lines of its texts.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

from gitrepo import commit_count, git, git_line
from mcpsession import call, fails, ok

pytestmark = pytest.mark.anyio

KIWIFS = str(Path(sys.executable).with_name("kiwifs"))

SCHEMA = """# Schema

Concept pages live under concepts/ with owner and status; episodes under episodes/.
"""
PLAYBOOK = """# Playbook

1. kiwi_context first. 2. kiwi_search, then kiwi_peek a hit. 3. kiwi_section for the part you
need. 4. kiwi_backlinks before changing a page. 5. Write with the ETag you read.
"""
INDEX = """# Index

- [[concepts/auth]]: how people log in
- [[concepts/sessions|Sessions]]
- [[billing]]
"""
AUTH_FM = """---
title: Authentication
owner: ana
status: draft
tags: [auth, security]
---
"""
AUTH_BODY = """# Authentication

People log in with a passkey; tokens rotate every hour. See [[sessions]].

## Setup

Turn passkeys on in the admin console.

## Tokens

Access tokens live one hour.

### Refresh

Refresh tokens live thirty days.

## Setup

The second setup, for service accounts:

```bash
# Not a heading
kiwictl accounts create --service
```

## Troubleshooting

Clock skew makes token checks fail.
"""
SESSIONS = """---
title: Sessions
owner: ana
status: published
merged-from:
  - type: episode
    id: ep-1
  - type: episode
    path: episodes/2026-01-02/ep-2.md
---
# Sessions

A session starts at login ([[auth]]) and ends after an idle hour.
"""
OLD_AUTH = """---
title: Old authentication
memory_status: superseded
superseded_by: concepts/auth.md
---
# Old authentication

Passwords only. Replaced by [[auth]].
"""
BILLING = "---\nowner: bo\nstatus: published\n---\n# Billing\n\nInvoices go out monthly.\n"


def episode(eid: str, text: str) -> str:
    return f"---\nmemory_kind: episodic\nepisode_id: {eid}\n---\n{text}\n"


ROOT = {
    "SCHEMA.md": SCHEMA,
    ".kiwi/playbook.md": PLAYBOOK,
    "index.md": INDEX,
    "concepts/auth.md": AUTH_FM + AUTH_BODY,
    "concepts/sessions.md": SESSIONS,
    "concepts/old-auth.md": OLD_AUTH,
    "concepts/billing.md": BILLING,
    "episodes/2026-01-02/ep-1.md": episode("ep-1", "Login failed: clock skew on a laptop."),
    "episodes/2026-01-02/ep-2.md": episode("ep-2", "Sessions dropped after an idle hour."),
}

# KiwiFS's tools as its server declares them: every parameter, and the required ones
KIWIFS_PARAMS: dict[str, tuple[set[str], set[str]]] = {
    "kiwi_context": (set(), set()),
    "kiwi_search": (
        {"query", "limit", "path_prefix", "scope", "offset", "recency_weight"},
        {"query"},
    ),
    "kiwi_peek": ({"path"}, {"path"}),
    "kiwi_section": ({"path", "heading", "index"}, {"path"}),
    "kiwi_backlinks": ({"path"}, {"path"}),
    "kiwi_graph_walk": ({"path", "include_siblings"}, {"path"}),
    "kiwi_graph_path": ({"from", "to"}, {"from", "to"}),
    "kiwi_health_check": ({"path"}, {"path"}),
    "kiwi_read": ({"path", "resolve_links", "metadata_only", "if_not_etag"}, {"path"}),
}
PEEK_KEYS = {"path", "title", "frontmatter", "snippet", "links_out", "links_in"}
PEEK_KEYS |= {"word_count", "headings"}
SECTION_KEYS = {"path", "heading", "level", "content", "line_start", "line_end"}
WALK_KEYS = {"path", "links_out", "links_in", "siblings", "hub_score", "in_degree"}
WALK_KEYS |= {"out_degree"}
SEARCH_LINE = re.compile(r"^(\d+)\. (\S+) \(score: -?\d+\.\d\d\)$")
BACKLINK_LINE = re.compile(r"^  - (\S+) \((\d+) links\)( \[superseded\])?$")


def etag_of(text: str) -> str:
    return text.split("ETag: ", 1)[1].split(")", 1)[0].split("]", 1)[0]


@asynccontextmanager
async def stdio_agent(root: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    """The installed ``kiwifs mcp`` on ``root``, over stdio, initialized."""
    params = StdioServerParameters(
        command=KIWIFS,
        args=["mcp", "--root", str(root)],
        # the isolated git configuration conftest set, and nothing else of this process
        env={k: v for k, v in os.environ.items() if k.startswith(("GIT_", "HOME", "PATH"))},
    )
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def lay_out(root: Path) -> None:
    for rel, text in ROOT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def line_of(text: str, line: str) -> int:
    """The 1-based line number of the first line of ``text`` equal to ``line``."""
    return text.split("\n").index(line) + 1


def split_front(data: bytes) -> tuple[bytes, bytes]:
    """A file's frontmatter block (both fences) and the bytes after it."""
    end = data.index(b"\n---\n", 4) + len(b"\n---\n")
    return data[:end], data[end:]


async def test_the_agent_playbook_over_stdio(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    lay_out(root)
    auth = root / "concepts/auth.md"
    async with stdio_agent(root, tmp_path / "stderr.log") as agent:
        # the tools a KiwiFS client calls take KiwiFS's parameters, and require no more
        tools = {t.name: t.input_schema for t in (await agent.list_tools()).tools}
        for name, (params, required) in KIWIFS_PARAMS.items():
            schema = tools[name]
            assert params <= set(schema.get("properties", {})), name
            assert set(schema.get("required", [])) == required, name
        assert tools["kiwi_section"]["properties"]["index"]["type"] == "number"

        # 1. the context first: KiwiFS's four parts in its order, then ours (memory)
        context = await ok(agent, "kiwi_context", {})
        parts = re.findall(r"^=== (.+) ===$", context, flags=re.M)
        assert parts == ["SCHEMA", "PLAYBOOK", "CURRENT INDEX", "RULES", "MEMORY"]
        assert context.startswith(f"=== SCHEMA ===\n{SCHEMA}")
        assert f"=== PLAYBOOK ===\n{PLAYBOOK}" in context
        assert f"=== CURRENT INDEX ===\n{INDEX}" in context
        assert "=== RULES ===\n(no .kiwi/rules.md found)" in context

        # 2. search: KiwiFS's numbered lines; the forgotten page is left out
        found = await ok(agent, "kiwi_search", {"query": "clock skew"})
        hits = [m.group(2) for line in found.splitlines() if (m := SEARCH_LINE.match(line))]
        assert "concepts/auth.md" in hits and "episodes/2026-01-02/ep-1.md" in hits
        assert await ok(agent, "kiwi_search", {"query": "passwords"}) == "No results found."

        # 3. peek at the hit: KiwiFS's keys; the heading in the code block is no heading
        peek = json.loads(await ok(agent, "kiwi_peek", {"path": "concepts/auth.md"}))
        assert set(peek) == PEEK_KEYS
        assert peek["title"] == "Authentication" and peek["path"] == "concepts/auth.md"
        assert peek["headings"] == [
            "Authentication", "Setup", "Tokens", "Refresh", "Setup", "Troubleshooting"
        ]  # fmt: skip
        assert peek["snippet"].startswith("People log in with a passkey;")
        assert peek["links_out"] == ["sessions"]
        assert sorted(peek["links_in"]) == [
            "concepts/old-auth.md", "concepts/sessions.md", "index.md"
        ]  # fmt: skip
        assert peek["word_count"] == len(AUTH_BODY.split())
        assert peek["frontmatter"]["owner"] == "ana"

        # 4. one section: by a partial heading (case ignored; the first of two same-named
        # ones), then the second by its index; a section runs to the next heading of its level
        whole = AUTH_FM + AUTH_BODY
        tokens = json.loads(
            await ok(agent, "kiwi_section", {"path": "concepts/auth.md", "heading": "TOK"})
        )
        assert set(tokens) == SECTION_KEYS
        assert tokens["heading"] == "Tokens" and tokens["level"] == 2
        assert tokens["content"] == (
            "## Tokens\n\nAccess tokens live one hour.\n\n### Refresh\n\n"
            "Refresh tokens live thirty days."
        )
        assert tokens["line_start"] == line_of(whole, "## Tokens")
        assert tokens["line_end"] == line_of(whole, "Refresh tokens live thirty days.")
        first = json.loads(
            await ok(agent, "kiwi_section", {"path": "concepts/auth.md", "heading": "setup"})
        )
        assert first["content"] == "## Setup\n\nTurn passkeys on in the admin console."
        second = json.loads(
            await ok(agent, "kiwi_section", {"path": "concepts/auth.md", "index": 4})
        )
        assert second["heading"] == "Setup" and second["line_start"] > first["line_start"]
        assert second["content"].startswith("## Setup\n\nThe second setup")
        assert "# Not a heading" in second["content"]  # the code block stays in its section
        assert second["content"].endswith("```")
        missing = await fails(agent, "kiwi_section", {"path": "concepts/auth.md", "index": 6})
        assert "6 headings" in missing or "index 6" in missing

        # 5. who links here, before changing it: KiwiFS's lines, the forgotten source marked
        backlinks = await ok(agent, "kiwi_backlinks", {"path": "concepts/auth.md"})
        head, *rows = backlinks.splitlines()
        assert head == "3 pages link to concepts/auth.md:"
        listed = [BACKLINK_LINE.match(row) for row in rows]
        assert all(listed), rows
        sources = {m.group(1): (int(m.group(2)), bool(m.group(3))) for m in listed if m}
        assert sources == {
            "concepts/old-auth.md": (2, True),  # [[auth]] and superseded_by
            "concepts/sessions.md": (1, False),
            "index.md": (1, False),
        }
        episode_links = await ok(agent, "kiwi_backlinks", {"path": "episodes/2026-01-02/ep-1.md"})
        assert episode_links == (
            "1 pages link to episodes/2026-01-02/ep-1.md:\n  - concepts/sessions.md (1 links)"
        )
        assert await ok(agent, "kiwi_backlinks", {"path": "concepts/billing.md"}) == (
            "1 pages link to concepts/billing.md:\n  - index.md (1 links)"
        )

        # the graph tools by KiwiFS's parameter names
        walk = json.loads(
            await ok(
                agent, "kiwi_graph_walk", {"path": "concepts/auth.md", "include_siblings": False}
            )
        )
        assert WALK_KEYS <= set(walk) and walk["siblings"] == []
        assert walk["links_out"] == ["concepts/sessions.md"]
        path = await ok(agent, "kiwi_graph_path", {"from": "index.md", "to": "concepts/auth.md"})
        assert path.splitlines() == [
            "Shortest path from index.md to concepts/auth.md (1 hops):",
            "",
            "  index.md",
            "  \u2192 concepts/auth.md",
        ]

        # its health, in KiwiFS's text: the janitor's kind: message lines
        health = await ok(agent, "kiwi_health_check", {"path": "concepts/auth.md"})
        assert health.splitlines()[0] == "Health: concepts/auth.md"
        assert "    - no-review-date: has an owner but no next-review date" in health
        assert "orphan" not in health and "empty-page" not in health
        retired = await ok(agent, "kiwi_health_check", {"path": "concepts/old-auth.md"})
        assert "    - superseded: superseded by concepts/auth.md" in retired

        # 6. patch the frontmatter with the ETag read: the body's bytes stay, one commit
        read = await ok(agent, "kiwi_read", {"path": "concepts/auth.md"})
        etag = etag_of(read)
        assert read == f"[ETag: {etag}]\n\n{whole}"
        before = auth.read_bytes()
        commits = commit_count(root)
        patched = await agent.call_tool(
            "kiwi_patch_frontmatter",
            {
                "path": "concepts/auth.md",
                "fields": {"status": "published", "reviewed": "2026-02-01"},
                "if_match": etag,
            },
        )
        assert isinstance(patched.content[0], TextContent)
        text = patched.content[0].text
        assert not patched.is_error, text
        assert text.startswith("Patched the frontmatter of concepts/auth.md (ETag: ")
        fresh = etag_of(text)
        assert fresh != etag
        after = auth.read_bytes()
        assert split_front(after)[1] == split_front(before)[1] == AUTH_BODY.encode()
        assert b"status: published\n" in split_front(after)[0]
        assert b"owner: ana\n" in split_front(after)[0]
        assert commit_count(root) == commits + 1
        assert git(root, "show", "--name-only", "--format=", "HEAD").split() == ["concepts/auth.md"]
        meta: dict[str, Any] = patched.meta or {}
        assert meta.get("kiwifs/commit") == git_line(root, "rev-parse", "HEAD")

        # a stale ETag is refused: nothing written, nothing committed
        stale = await call(
            agent,
            "kiwi_patch_frontmatter",
            {"path": "concepts/auth.md", "fields": {"status": "archived"}, "if_match": etag},
        )
        assert stale[0] and "modified since last read" in stale[1]
        assert auth.read_bytes() == after and commit_count(root) == commits + 1

        # 7. read again: unchanged since the patch means "not modified"; the stale ETag gets
        # the content; metadata_only gives the frontmatter as JSON after the ETag
        same = await ok(agent, "kiwi_read", {"path": "concepts/auth.md", "if_not_etag": fresh})
        assert same == (
            f"File not modified (etag: {fresh}). Content unchanged since your last read."
        )
        again = await ok(agent, "kiwi_read", {"path": "concepts/auth.md", "if_not_etag": etag})
        assert again == f"[ETag: {fresh}]\n\n{after.decode()}"
        meta_read = await ok(
            agent, "kiwi_read", {"path": "concepts/auth.md", "metadata_only": True}
        )
        head_line, body = meta_read.split("\n\n", 1)
        assert head_line == f"[ETag: {fresh}]"
        assert json.loads(body) == {
            "title": "Authentication",
            "owner": "ana",
            "status": "published",
            "tags": ["auth", "security"],
            "reviewed": "2026-02-01",
        }
