"""What MCP clients built against KiwiFS parse, tested through the official ``mcp`` client.

The parsers here are those of a real client (pi-kiwifs-memory, written for KiwiFS v0.19), ported
line for line: its hybrid regex, its brief-pack splitter. The other half is how KiwiFS reads
numbers: null, text, fractions, zero, negatives and huge values are defaulted, truncated or
clamped, never a validation error.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from kiwifs.knowledge import Knowledge
from mcpsession import mcp_session, ok
from vectorkit import local_config

pytestmark = pytest.mark.anyio

# the client's hybrid line, anchored at both ends: nothing may follow the parenthesis
HYBRID_LINE = re.compile(r"^\d+\. (\S+) \((both|keyword only|semantic only), #(\d+)\)$")
ODD_NUMBERS: list[Any] = [None, "abc", 2.7, 0, -5, 10**9]
PAGES = {
    "birds/kiwi.md": "The kiwi is a flightless bird with feathers.\n",
    "birds/nest.md": "A nest with one egg, kiwi eggs are large.\n",
    "tech/db.md": "sqlite stores the index table on disk.\n",
    "home/cake.md": "A kiwi recipe: bake with flour and sugar.\n",
}


@pytest.fixture
def many(root: Path) -> Iterator[Path]:
    """60 pages (one commit each, so 60+ changes) matching ``zebra``, two of them todo tasks."""
    with Knowledge.open(root) as kb:
        for n in range(60):
            status = "---\nstatus: todo\n---\n" if n < 2 else ""
            kb.write(f"z/{n:02}.md", f"{status}zebra number {n}\n")
    yield root


def hybrid_hits(text: str) -> list[tuple[str, str, int]]:
    """The client's ``parseHybridHits``: every numbered line must be KiwiFS's hybrid line."""
    numbered = [line for line in text.splitlines() if re.match(r"\d+\. ", line)]
    hits = [HYBRID_LINE.match(line) for line in numbered]
    assert all(hits), numbered
    return [(m[1], m[2], int(m[3])) for m in hits if m]


def brief_pack(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The client's ``parseBriefPack``: ``=== path ===`` sections (body up to the next section
    or the manifest) and the ``- path (`` lines after ``Dropped for budget:``."""
    marks = [(m[1], m.end()) for m in re.finditer(r"^===\s+(\S+)\s+===$", text, re.M)]
    drop = text.find("Dropped for budget:")
    sections = []
    for i, (path, start) in enumerate(marks):
        if i + 1 < len(marks):
            end = marks[i + 1][1] - len(marks[i + 1][0]) - 8
        else:
            end = drop if drop >= 0 else len(text)
        sections.append((path, text[start:end].strip()))
    dropped = re.findall(r"^- (\S+) \(", text[drop:], re.M) if drop >= 0 else []
    return sections, dropped


# ---------------------------------------------------------------------------------------------
# hybrid


async def test_hybrid_lines_without_vectors_are_all_keyword_only(make_root: Callable[..., Path]):
    async with mcp_session(make_root(PAGES)) as client:
        text = await ok(client, "kiwi_search_hybrid", {"query": "kiwi"})
    hits = hybrid_hits(text)
    assert len(hits) == 3 and {m for _, m, _ in hits} == {"keyword only"}
    assert [rank for _, _, rank in hits] == [1, 2, 3]  # the keyword rank
    assert text.endswith("Semantic search is not enabled: these are keyword results only.")


async def test_hybrid_lines_with_vectors(make_root: Callable[..., Path], model: Path) -> None:
    root = make_root({**PAGES, ".kiwi/config.toml": local_config(model)})
    async with mcp_session(root) as client:
        text = await ok(client, "kiwi_search_hybrid", {"query": "kiwi bird", "limit": 4})
    hits = hybrid_hits(text)
    assert len(hits) == 4 and "both" in {m for _, m, _ in hits}
    lines = text.splitlines()
    for at, line in enumerate(lines):
        found = HYBRID_LINE.match(line)
        if not found:
            continue
        detail = lines[at + 1]  # below the line: each side's rank and the fused score
        assert re.fullmatch(
            r"   (keyword|semantic) #\d+(, semantic #\d+)?; score \d\.\d{4}", detail
        )
        ranks = [int(r) for r in re.findall(r"#(\d+)", detail)]
        assert int(found[3]) == min(ranks)  # for both: the better of its two ranks
        assert (found[2] == "both") == (len(ranks) == 2)


# ---------------------------------------------------------------------------------------------
# brief


async def test_brief_parses_into_sections_and_dropped(root: Path) -> None:
    async with mcp_session(root) as client:
        await ok(client, "kiwi_write", {"path": "n/small.md", "content": "an axolotl\n"})
        await ok(client, "kiwi_write", {"path": "n/mid.md", "content": "axolotl gills\n" * 3})
        await ok(client, "kiwi_write", {"path": "n/big.md", "content": "the axolotl " * 40})
        text = await ok(client, "kiwi_brief", {"query": "axolotl", "budget_tokens": 30})
        full = await ok(client, "kiwi_brief", {"query": "axolotl", "max_pages": 1})
    sections, dropped = brief_pack(text)
    assert {p for p, _ in sections} == {"n/small.md", "n/mid.md"}
    bodies = dict(sections)
    assert bodies["n/small.md"] == "an axolotl"  # the page's text and nothing else
    assert bodies["n/mid.md"] == ("axolotl gills\n" * 3).strip()
    assert dropped == ["n/big.md"]
    assert text.startswith("# Context pack: axolotl\n")
    assert re.search(r"^- n/small\.md \(3 tokens, score: \S+, ETag: \w+\)$", text, re.M)
    assert re.search(
        r"^- n/big\.md \(120 tokens, .*\): budget \(over the token budget\)$", text, re.M
    )
    one, rest = brief_pack(full)
    assert len(one) == 1 and len(rest) == 2
    assert "): max_pages (past max_pages)" in full


# ---------------------------------------------------------------------------------------------
# forget and remember


async def test_forget_takes_superseded_reason(root: Path) -> None:
    async with mcp_session(root) as client:
        for name in ("a", "b", "c"):
            await ok(client, "kiwi_write", {"path": f"m/{name}.md", "content": "a memory\n"})
        said = await ok(
            client, "kiwi_forget", {"path": "m/a.md", "superseded_reason": "moved", "opId": "x"}
        )
        await ok(client, "kiwi_forget", {"path": "m/b.md", "reason": "old"})
        await ok(
            client,
            "kiwi_forget",
            {"path": "m/c.md", "reason": "loses", "superseded_reason": "wins"},
        )
        remembered = await ok(client, "kiwi_remember", {"content": "saw it", "episode_id": "e1"})
    assert re.fullmatch(
        r"Forgot m/a\.md \(memory_status: superseded, ETag: \w+\) reason: moved", said
    )
    assert re.fullmatch(r"Remembered episodes/\S+/e1\.md \(episode_id: e1, ETag: \w+\)", remembered)
    with Knowledge.open(root) as kb:
        reasons = [kb.frontmatter(f"m/{n}.md").get("superseded_reason") for n in "abc"]
    assert reasons == ["moved", "old", "wins"]


# ---------------------------------------------------------------------------------------------
# numbers


def numbered(text: str) -> list[int]:
    return [int(m[1]) for m in re.finditer(r"^(\d+)\. ", text, re.M)]


async def each(client: Client, tool: str, arg: str, base: dict[str, Any]) -> list[str]:
    """The tool's answer for each odd value of ``arg`` (and as a JSON null); never an error."""
    return [await ok(client, tool, {**base, arg: value}) for value in ODD_NUMBERS]


async def test_search_numbers_are_read_as_kiwifs_reads_them(many: Path) -> None:
    async with mcp_session(many) as client:
        texts = await each(client, "kiwi_search", "limit", {"query": "zebra"})
        assert [len(numbered(t)) for t in texts] == [20, 20, 2, 20, 20, 50]
        texts = await each(client, "kiwi_search", "offset", {"query": "zebra", "limit": 1})
        assert [numbered(t) for t in texts[:5]] == [[1], [1], [3], [1], [1]]
        assert texts[5] == "No results found."
        await each(client, "kiwi_search", "recency_weight", {"query": "zebra"})
        texts = await each(client, "kiwi_search_hybrid", "limit", {"query": "zebra"})
        assert [len(numbered(t)) for t in texts] == [15, 15, 2, 15, 15, 50]
        texts = await each(client, "kiwi_query_meta", "limit", {"filters": []})
        counts = [t.count("\n- ") + t.startswith("- ") for t in texts]
        assert counts[2] == 2 and counts[0] == counts[1] == counts[3] == counts[4] == 20
        assert counts[5] > 60  # every file: the cap is 200
        texts = await each(client, "kiwi_query_meta", "offset", {"filters": [], "limit": 1})
        assert texts[0] == texts[1] == texts[3] == texts[4] != texts[2]
        assert texts[5] == "No matching files found."
        texts = await each(client, "kiwi_changes", "limit", {})
        counts = [len(t.splitlines()) - 1 for t in texts]  # one line a change, then last_seq
        assert counts == [50, 50, 2, 50, 50, counts[5]] and 60 < counts[5] <= 500
        texts = await each(client, "kiwi_tree", "depth", {})
        assert texts[0] == texts[1] == texts[3] == texts[4] == texts[5]
        texts = await each(client, "kiwi_eligible", "limit", {})
        assert [len(numbered(t)) for t in texts] == [2, 2, 2, 2, 2, 2]


async def test_brief_and_memory_numbers(many: Path) -> None:
    async with mcp_session(many) as client:
        texts = await each(client, "kiwi_brief", "budget_tokens", {"query": "zebra"})
        used = [re.search(r"of (\d+) tokens used", t)[1] for t in texts]  # type: ignore[index]
        assert used == ["4000", "4000", "2", "4000", "4000", str(10**9)]
        texts = await each(client, "kiwi_brief", "max_pages", {"query": "zebra"})
        pages = [int(re.search(r"(\d+) page\(s\),", t)[1]) for t in texts]  # type: ignore[index]
        assert pages == [20, 20, 2, 20, 20, 60]  # 60 is every match (the cap is 100)
        await each(client, "kiwi_memory_report", "limit", {})
        await each(client, "kiwi_memory_report", "offset", {})
        await ok(client, "kiwi_remember", {"content": "zebra seen", "episode_id": "e1"})
        await each(client, "kiwi_memory_claim", "limit", {"worker": "w"})
        texts = await each(client, "kiwi_memory_claim", "lease", {"worker": "w"})
    now = dt.datetime.now(dt.UTC)
    minutes = []
    for text in texts:
        until = re.search(r"until (\S+)", text)
        assert until, text
        left = dt.datetime.fromisoformat(until[1].replace("Z", "+00:00")) - now
        minutes.append(round(left.total_seconds() / 60))
    assert minutes == [10, 10, 1, 10, 10, 24 * 60]  # default 10m, clamped to 1m-24h


async def test_semantic_numbers(make_root: Callable[..., Path], model: Path) -> None:
    root = make_root({**PAGES, ".kiwi/config.toml": local_config(model)})
    async with mcp_session(root) as client:
        texts = await each(client, "kiwi_search_semantic", "limit", {"query": "kiwi"})
        assert [len(numbered(t)) for t in texts] == [4, 4, 2, 4, 4, 4]  # default 5, 4 pages
        texts = await each(client, "kiwi_search_semantic", "threshold", {"query": "kiwi"})
        assert texts[0] == texts[1]  # unreadable: no threshold
        assert texts[5] == "No results found."  # clamped to 1: nothing is that similar
