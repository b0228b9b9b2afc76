"""Files over the size limit (32 MiB) are skipped by the index and the report, refused by reads.

A 1 GB ``.md`` file once broke the index for good (SQLite: "string or blob too big"; the
reconcile retried forever, ``/readyz`` never turned ready, search answered 500), and a smaller
one cost three times its size in memory. The files here are sparse (``truncate``): just over
the limit, they take no disk space, and nothing reads them. Real files, real git, real SQLite,
the in-process app and MCP server; nothing of ours is mocked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from mcp.types import TextContent

from asgiclient import app_on
from kiwifs.base.limits import MAX_READ_BYTES
from kiwifs.cli import cli
from kiwifs.errors import PayloadTooLarge
from kiwifs.frontmatter.reader import FRONTMATTER_WINDOW, read_frontmatter
from kiwifs.index.record import read_record
from kiwifs.knowledge import Knowledge
from kiwifs.memory import scan
from mcpsession import mcp_session

API = "/api/kiwi"
BIG = ("big.md", "episodes/huge.md")
WARNINGS = {f"cannot read {rel}: file over the 32 MiB size limit, not indexed" for rel in BIG}


def sparse(path: Path, head: bytes, size: int) -> None:
    """``head``, then zeros up to ``size`` bytes, none of them on disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)


@pytest.fixture
def big_files_root(root: Path) -> Path:
    """The blank root with a small episode and two sparse files just over the read limit."""
    (root / "episodes").mkdir()
    (root / "episodes" / "small.md").write_text("---\nepisode_id: small\n---\nfine words\n")
    head = b"---\nmemory_kind: episodic\nepisode_id: big\n---\nbigword fine\n"
    for rel in BIG:
        sparse(root / rel, head, MAX_READ_BYTES + 1)
    return root


def assert_skipped(kb: Knowledge) -> None:
    """Not in search or ``/meta``; named by the report's warnings; never an episode."""
    assert [hit.path for hit in kb.search("fine").results] == ["episodes/small.md"]
    assert kb.search("bigword").results == []
    assert not {r.path for r in kb.meta().results} & set(BIG)
    report = kb.memory_report()
    assert WARNINGS <= set(report.warnings)
    assert [e.path for e in report.episodic_files] == ["episodes/small.md"]
    assert kb.memory_report(use_index=False).to_json() == report.to_json()


def test_the_library_skips_and_refuses_a_file_over_the_limit(big_files_root: Path) -> None:
    with Knowledge.open(big_files_root) as kb:
        assert_skipped(kb)  # the first reconcile
        assert kb.reindex() == 4  # index.md, small.md and the two big ones, as skipped rows
        assert_skipped(kb)
        with pytest.raises(PayloadTooLarge, match="over the 32 MiB size limit"):
            kb.read("big.md")
        kb.write("big.md", b"# small again\n")  # a write may replace it
        assert kb.read("big.md").content == b"# small again\n"
        assert [h.path for h in kb.search('"small again"').results] == ["big.md"]


def test_a_file_that_grows_past_the_limit_leaves_the_index(big_files_root: Path) -> None:
    (big_files_root / "big.md").unlink()
    (big_files_root / "big.md").write_text("---\nscope: x\n---\nbigword\n")
    with Knowledge.open(big_files_root) as kb:
        assert [hit.path for hit in kb.search("bigword").results] == ["big.md"]
        sparse(big_files_root / "big.md", b"---\nscope: x\n---\nbigword\n", MAX_READ_BYTES + 1)
        assert kb.search("bigword").results == []
        assert kb.meta(where=["$.scope=x"]).results == []


def test_the_cli_reindexes_searches_and_reports_around_it(big_files_root: Path) -> None:
    runner = CliRunner()
    where = ["--root", str(big_files_root)]
    for args in (["reindex"], ["search", "fine"], ["memory", "report"]):
        result = runner.invoke(cli, [*args, *where])
        assert result.exit_code == 0, result.output
    for flags in ([], ["--no-index"]):
        result = runner.invoke(cli, ["memory", "report", "--json", *flags, *where])
        assert result.exit_code == 0, result.output
        assert WARNINGS <= set(json.loads(result.output)["warnings"])


def test_rest_refuses_the_file_and_answers_everything_else(big_files_root: Path) -> None:
    with app_on(big_files_root) as client:
        response = client.get(f"{API}/file", params={"path": "big.md"})
        assert response.status_code == 413, response.text
        assert "over the 32 MiB size limit" in response.json()["error"]
        found = client.get(f"{API}/search", params={"q": "fine"}).json()["results"]
        assert [hit["path"] for hit in found] == ["episodes/small.md"]
        assert client.get("/readyz").json() == {"status": "ready"}
        health = client.get("/health")
        assert health.status_code == 200
        assert health.json()["warnings"] == [
            "2 file(s) over the 32 MiB size limit not indexed (the memory report names them)"
        ]
        report = client.get(f"{API}/memory/report").json()
        assert WARNINGS <= set(report["warnings"])


@pytest.mark.anyio
async def test_mcp_read_is_a_tool_error(big_files_root: Path) -> None:
    async with mcp_session(big_files_root) as client:
        result = await client.call_tool("kiwi_read", {"path": "big.md"})
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent) and "over the 32 MiB size limit" in block.text


@pytest.mark.parametrize(
    "head",
    [
        b"---\nepisode_id: never closed\n",  # unterminated
        b"---\nepisode_id: far\n" + b"x: y\n" * (FRONTMATTER_WINDOW // 5) + b"---\n",  # too far
        b"no newline at all",  # the zeros go on
    ],
    ids=["unterminated", "closed-past-the-window", "no-newline"],
)
def test_the_scan_reads_a_bounded_prefix_and_agrees_with_the_index(
    tmp_path: Path, head: bytes
) -> None:
    """Under the limit, the scan still reads only the window its block is looked for in, and
    finds what the index finds in the whole file."""
    path = tmp_path / "f.md"
    sparse(path, head, 8 * FRONTMATTER_WINDOW)
    read = scan.read_head(str(path))
    assert len(read) <= FRONTMATTER_WINDOW + 1
    record = read_record(b"f.md", "f.md", str(path))
    assert record is not None and not record.facts.unreadable
    assert scan.facts_of_bytes("f.md", read) == record.facts
    data = path.read_bytes()
    assert read_frontmatter(read) == read_frontmatter(data)


def test_a_1_gib_sparse_file_is_never_read(tmp_path: Path) -> None:
    """Neither the index nor the scan opens more than its ``fstat`` of a file over the limit."""
    root = tmp_path / "root"
    root.mkdir()
    sparse(root / "giant.md", b"---\nepisode_id: giant\n", 1 << 30)
    with Knowledge.open(root) as kb:
        assert kb.memory_report().warnings == (
            "cannot read giant.md: file over the 32 MiB size limit, not indexed",
        )
        assert kb.search("giant").results == []
    assert os.stat(root / "giant.md").st_blocks < 64  # still sparse: nothing wrote it out


def test_the_history_replay_reads_no_committed_blob_over_the_limit(big_files_root: Path) -> None:
    """A commit of such a file is the user's business; the timeline of the dashboard reads its
    size from git's object header, and counts it as the index does: not an episode."""
    import subprocess

    subprocess.run(["git", "-C", str(big_files_root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(big_files_root), "commit", "-qm", "big ones"], check=True)
    with Knowledge.open(big_files_root) as kb:
        last = kb.overview().timeline[-1]  # replayed first (no server keeps it)
    assert (last.episodic, last.unmerged) == (1, 1)  # episodes/small.md alone


def test_a_value_sqlite_refuses_is_no_damage() -> None:
    """Resetting the index for it would store the same value and fail again, for ever."""
    import sqlite3

    from kiwifs.index.connections import is_damage

    conn = sqlite3.connect(":memory:")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000)
    with pytest.raises(sqlite3.DataError) as caught:
        conn.execute("SELECT ?", ("x" * 2000,))
    assert not is_damage(caught.value)
