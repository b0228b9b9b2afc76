"""One size limit for every write path: no write leaves a file over ``MAX_FILE_BYTES``.

A bulk write once took a 100 MB file while PUT stopped at 32 MiB and append at 64 MiB. The rule
is the core's (checked by the write funnel on the file as it would be written), so the library,
every MCP tool, ``remember`` and every REST route refuse alike: REST with a 413, MCP with a tool
error, both naming the limit, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from asgiclient import AppClient, serve_in_process
from kiwifs.base.limits import MAX_BULK_BYTES, MAX_FILE_BYTES
from kiwifs.errors import PayloadTooLarge
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.server import adapt
from kiwifs.mcp.tools import SPECS, Tools
from kiwifs.rest.app import create_app
from kiwifs.server.payloads import FileItem

API = "/api/kiwi"
LIMIT = f"{MAX_FILE_BYTES >> 20} MiB"
OVER = b"x" * (MAX_FILE_BYTES + 1)  # one byte over: shared by the tests, never copied


@pytest.fixture(scope="module")
def shared_kb(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[Knowledge]:
    """One blank root for the module, holding a file just over half the limit."""
    root = tmp_path_factory.mktemp("limit") / "kb"
    Knowledge.init(root, "blank")
    with Knowledge.open(root) as knowledge:
        knowledge.write("half.md", b"y" * (MAX_FILE_BYTES // 2 + 1))
        yield knowledge


@pytest.fixture(scope="module")
def client(shared_kb: Knowledge) -> Iterator[AppClient]:
    with serve_in_process(create_app(shared_kb)) as c:
        yield c


def refused(kb: Knowledge, call: object) -> str:
    """The message of the PayloadTooLarge ``call`` raises; nothing new may be on disk."""
    before = sorted(p.name for p in kb.root.iterdir())
    with pytest.raises(PayloadTooLarge) as exc:
        call()  # type: ignore[operator]
    assert sorted(p.name for p in kb.root.iterdir()) == before
    return exc.value.message


def test_the_library_refuses_every_write_over_the_limit(shared_kb: Knowledge) -> None:
    assert LIMIT in refused(shared_kb, lambda: shared_kb.write("big.md", OVER))
    half = shared_kb.read("half.md").etag
    assert LIMIT in refused(
        shared_kb, lambda: shared_kb.append("half.md", OVER[: MAX_FILE_BYTES // 2])
    )
    assert (
        shared_kb.read("half.md").etag == half
    )  # the file the append would have grown is unchanged
    message = refused(
        shared_kb, lambda: shared_kb.bulk_write([("ok.md", b"small"), ("big.md", OVER)])
    )
    assert message.startswith("big.md: ") and LIMIT in message
    assert not (shared_kb.root / "ok.md").exists()  # all or nothing
    many = [(f"part-{i}.md", OVER[: MAX_FILE_BYTES - 1]) for i in range(4)]
    assert 4 * (MAX_FILE_BYTES - 1) > MAX_BULK_BYTES
    assert f"{MAX_BULK_BYTES >> 20} MiB" in refused(shared_kb, lambda: shared_kb.bulk_write(many))
    text = OVER.decode()
    assert LIMIT in refused(shared_kb, lambda: shared_kb.remember(text, episode_id="big-episode"))


def test_exactly_the_limit_is_written(shared_kb: Knowledge) -> None:
    assert shared_kb.write("full.md", OVER[:MAX_FILE_BYTES]).path == "full.md"
    assert LIMIT in refused(shared_kb, lambda: shared_kb.append("full.md", b"z", separator=""))
    shared_kb.delete("full.md")


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("kiwi_write", {"path": "big.md", "content": OVER.decode()}),
        ("kiwi_append", {"path": "half.md", "content": OVER[: MAX_FILE_BYTES // 2].decode()}),
        ("kiwi_bulk_write", {"files": [FileItem(path="big.md", content=OVER.decode())]}),
    ],
)
def test_mcp_tools_answer_a_tool_error_naming_the_limit(
    shared_kb: Knowledge, tool: str, arguments: dict[str, object]
) -> None:
    (spec,) = [s for s in SPECS if s.name == tool]
    result = adapt(spec, Tools(shared_kb).method(tool))(**arguments)
    assert not isinstance(result, str) and result.is_error
    (block,) = result.content
    assert LIMIT in getattr(block, "text", "")
    assert not (shared_kb.root / "big.md").exists()


def test_rest_answers_413_naming_the_limit(shared_kb: Knowledge, client: AppClient) -> None:
    big = OVER.decode()
    bulk = client.post(f"{API}/bulk", json={"files": [{"path": "big.md", "content": big}]})
    assert bulk.status_code == 413 and LIMIT in bulk.json()["error"], bulk.text
    half = MAX_FILE_BYTES // 2
    grown = client.post(f"{API}/file/append", params={"path": "half.md"}, content=OVER[:half])
    assert grown.status_code == 413 and LIMIT in grown.json()["error"], grown.text
    put = client.put(f"{API}/file", params={"path": "big.md"}, content=OVER)
    assert put.status_code == 413 and LIMIT in put.json()["error"], put.text
    assert not (shared_kb.root / "big.md").exists()
