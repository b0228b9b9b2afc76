"""The queue's MCP tools through the official client (in-process): claim, release, merge with a
worker, check, lineage, and KiwiFS's generic claim tools; failures are tool errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from filetree import write_files
from mcpsession import fails, mcp_session, ok
from queuekit import add_episodes

pytestmark = pytest.mark.anyio


@pytest.fixture
def queue_root(root: Path) -> Path:
    """The blank root with three episodes (e0-e2) and two todo tasks (a before b by priority)."""
    add_episodes(root, 3)
    task = "---\ntitle: Task {}\nstatus: todo\npriority: {}\n---\nwork\n"
    tasks = {f"tasks/{name}.md": task.format(name, n) for name, n in (("a", 3), ("b", 1))}
    return write_files(root, tasks)


async def test_claim_merge_release_and_the_report(queue_root: Path) -> None:
    async with mcp_session(queue_root, versioned=True) as c:
        text = await ok(c, "kiwi_memory_claim", {"worker": "w1", "limit": 1, "with_content": True})
        assert text.startswith("w1 holds 1 episode until ")
        assert "episodes/e0.md  (episode_id=e0, etag " in text and "episode 0" in text
        batch = json.loads(
            await ok(c, "kiwi_memory_claim", {"worker": "w2", "limit": 1, "format": "json"})
        )
        assert [e["path"] for e in batch["claimed"]] == ["episodes/e1.md"]
        report = await ok(c, "kiwi_memory_report", {})
        assert "Claimed (live lease):     2" in report
        assert "episodes/e1.md  episode_id=e1  [claimed by w2 until" in report
        entries = [{"id": "e1"}]
        refused = await fails(
            c, "kiwi_memory_merge", {"path": "concepts/p.md", "entries": entries, "worker": "w1"}
        )
        assert "episodes/e1.md is claimed by w2 until" in refused
        assert not (queue_root / "concepts/p.md").exists()
        merged = await ok(
            c, "kiwi_memory_merge", {"path": "concepts/p.md", "entries": entries, "worker": "w2"}
        )
        assert merged.startswith("Created concepts/p.md: merged 1 entry")
        released = await ok(c, "kiwi_memory_release", {"worker": "w1"})
        assert released == "released 1 claim of w1\n  - episodes/e0.md\n"
        assert "holds no live claims" in await fails(c, "kiwi_memory_release", {"worker": "w1"})
        assert "No active claims." in await ok(c, "kiwi_claims_list", {})


async def test_bad_claims_are_tool_errors(queue_root: Path) -> None:
    async with mcp_session(queue_root, versioned=True) as c:
        # a lease is clamped to 1m-24h on MCP, never refused (docs/mcp.md, "Numbers")
        assert "between 1m and 24h" not in await ok(
            c, "kiwi_memory_claim", {"worker": "w", "lease": "10s", "limit": 0}
        )
        assert "worker is required" in await fails(c, "kiwi_memory_claim", {"worker": ""})
        assert "Claim failed: " in await fails(c, "kiwi_claim", {"path": "../up.md", "actor": "a"})
        assert "between 1m and 24h" in await fails(
            c, "kiwi_claim", {"path": "tasks/a.md", "actor": "a", "lease_duration": "48h"}
        )


async def test_generic_claim_tools(queue_root: Path) -> None:
    async with mcp_session(queue_root, versioned=True) as c:
        listed = await ok(c, "kiwi_eligible", {})
        assert listed == (
            "Eligible tasks (2 found):\n\n"
            "1. [P1] tasks/b.md \u2014 Task b\n"
            "2. [P3] tasks/a.md \u2014 Task a"
        )
        made = json.loads(await ok(c, "kiwi_claim", {"path": "tasks/b.md", "actor": "agent-1"}))
        assert made["holder"] == "agent-1" and set(made) == {
            "path",
            "holder",
            "claimed_at",
            "lease_expires",
        }
        assert "claimed-by: agent-1" in (queue_root / "tasks/b.md").read_text()
        taken = await fails(c, "kiwi_claim", {"path": "tasks/b.md", "actor": "agent-2"})
        assert taken.startswith("Claim failed: tasks/b.md is claimed by agent-1 until")
        assert "1. [P3] tasks/a.md" in await ok(c, "kiwi_eligible", {"path_prefix": "tasks/"})
        claims = await ok(c, "kiwi_claims_list", {})
        assert claims.startswith("1 active claim(s):\n  - tasks/b.md: agent-1 until ")
        wrong = await fails(c, "kiwi_release", {"path": "tasks/b.md", "actor": "agent-2"})
        assert wrong.startswith("Release failed: tasks/b.md is claimed by agent-1, not agent-2")
        done = await ok(c, "kiwi_release", {"path": "tasks/b.md", "actor": "agent-1"})
        assert done == "Released claim on tasks/b.md"
        assert "claimed-by" not in (queue_root / "tasks/b.md").read_text()
        assert "No eligible tasks found." == await ok(
            c, "kiwi_eligible", {"path_prefix": "episodes/"}
        )
        assert await ok(c, "kiwi_eligible", {"limit": 0}) == await ok(c, "kiwi_eligible", {})


async def test_check_and_lineage_tools(queue_root: Path) -> None:
    async with mcp_session(queue_root, versioned=True) as c:
        entries = [{"id": "e0"}, {"path": "episodes/none.md"}]
        await ok(c, "kiwi_memory_merge", {"path": "concepts/p.md", "entries": entries})
        text = await ok(c, "kiwi_memory_check", {})
        assert "problems:                1" in text
        assert "concepts/p.md: episode episodes/none.md" in text and "no file at" in text
        data = json.loads(await ok(c, "kiwi_memory_check", {"format": "json"}))
        assert data["unmerged_count"] == 2 and len(data["dangling"]) == 1
        lineage = await ok(c, "kiwi_memory_lineage", {"episode_id": "e0"})
        assert lineage.startswith("episodes/e0.md (episode, episode_id=e0)\nmerged by: 1\n")
        page = json.loads(
            await ok(c, "kiwi_memory_lineage", {"path": "concepts/p.md", "format": "json"})
        )
        assert page["merged_from"][1]["dangling"] is True
        missing = await fails(c, "kiwi_memory_lineage", {"path": "nope.md"})
        assert missing == "file not found: nope.md"
        assert "give either path or episode_id" in await fails(c, "kiwi_memory_lineage", {})


async def test_merge_refuses_a_double_merge_unless_forced_and_warns(queue_root: Path) -> None:
    async with mcp_session(queue_root, versioned=True) as c:
        entries = [{"id": "e0"}]
        await ok(c, "kiwi_memory_merge", {"path": "concepts/b.md", "entries": entries})
        refused = await fails(c, "kiwi_memory_merge", {"path": "concepts/a.md", "entries": entries})
        assert "episodes/e0.md is already merged into concepts/b.md" in refused
        forced = await ok(
            c, "kiwi_memory_merge", {"path": "concepts/a.md", "entries": entries, "force": True}
        )
        assert forced.startswith("Created concepts/a.md: merged 1 entry")
        warned = await ok(
            c, "kiwi_memory_merge", {"path": "concepts/c.md", "entries": [{"id": "x"}]}
        )
        assert warned.endswith(
            "\nWarning: episode x cites nothing yet (no episode has id 'x'); memory check lists"
            " it as dangling until the episode exists"
        )
