"""POST /api/kiwi/rename-dir and the links a rename rewrites, over REST in process and through
the official MCP client: KiwiFS's answers (``renamed``, ``updated_links``), ``update_links=false``,
the errors, and a scoped key that rewrites only under its prefix and learns of nothing outside."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from asgiclient import app_on, serve_in_process
from gitrepo import commit_count as commits
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.server.access import Gate
from mcpsession import mcp_session, ok

API = "/api/kiwi"
KEYS = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-team"
space = "default"
scope = "write"
prefix = "team"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    Knowledge.init(tmp_path, template="blank")
    with Knowledge.open(tmp_path) as kb:
        kb.write("drafts/a.md", "# A\n[b](b.md)\n", actor="alice")
        kb.write("drafts/b.md", "# B\n", actor="alice")
        kb.write("index.md", "[[drafts/a]] and [[drafts/b|B]]\n", actor="alice")
    return tmp_path


def test_rename_dir_answers_as_kiwifs(root: Path) -> None:
    before = commits(root)
    with app_on(root) as client:
        r = client.post(
            f"{API}/rename-dir",
            json={"from": "/drafts", "to": "archive/drafts"},
            headers={"X-Actor": "bob"},
        )
        back = client.get(f"{API}/backlinks", params={"path": "archive/drafts/a.md"}).json()
    assert r.status_code == 200, r.text
    assert r.json() == {
        "from": "/drafts",
        "to": "archive/drafts",
        "renamed": 2,
        "updated_links": ["index.md"],
    }
    assert commits(root) == before + 1
    assert (root / "index.md").read_text() == "[[archive/drafts/a]] and [[archive/drafts/b|B]]\n"
    assert (root / "archive/drafts/a.md").read_text() == "# A\n[b](b.md)\n"
    assert [b["path"] for b in back["backlinks"]] == ["index.md"]


def test_rename_dir_errors_change_nothing(root: Path) -> None:
    before = commits(root)
    with app_on(root) as client:
        cases = [
            ({"from": "drafts", "to": "drafts/x"}, 400, "into itself"),
            ({"from": "drafts/a.md", "to": "x"}, 400, "is a file"),
            ({"from": "nope", "to": "x"}, 404, "source directory not found"),
            ({"from": "drafts", "to": "index.md"}, 409, "already exists"),
            ({"from": "drafts", "to": "../x"}, 400, ".."),
            ({"from": "drafts"}, 400, "to is required"),
        ]
        for body, status, words in cases:
            r = client.post(f"{API}/rename-dir", json=body)
            assert r.status_code == status, (body, r.text)
            assert words in r.json()["error"], (body, r.text)
    assert commits(root) == before and (root / "drafts/a.md").exists()


def test_rename_rewrites_unless_asked_not_to(root: Path) -> None:
    with app_on(root) as client:
        r = client.post(f"{API}/rename", json={"from": "drafts/b.md", "to": "drafts/c.md"})
        assert r.status_code == 200, r.text
        assert r.json()["updated_links"] == ["drafts/a.md", "index.md"]
        assert set(r.json()) == {"from", "to", "etag", "updated_links"}
        r = client.post(
            f"{API}/rename",
            params={"update_links": "false"},
            json={"from": "drafts/c.md", "to": "drafts/d.md"},
        )
        assert r.status_code == 200 and "updated_links" not in r.json()
    assert (root / "index.md").read_text() == "[[drafts/a]] and [[drafts/c|B]]\n"
    assert (root / "drafts/a.md").read_text() == "# A\n[b](c.md)\n"


def test_a_scoped_key_rewrites_only_under_its_prefix(root: Path) -> None:
    (root / ".kiwi" / "config.toml").write_text(KEYS)
    with Knowledge.open(root) as kb:
        kb.write("team/x/p.md", "# P\n")
        kb.write("team/uses.md", "[[team/x/p]]\n")
        kb.write("secret.md", "[[team/x/p]]\n")
        app = create_app(kb, gate=Gate.of(kb.config, root))
        with serve_in_process(app) as client:
            auth = {"Authorization": "Bearer k-team"}
            outside = client.post(
                f"{API}/rename-dir", json={"from": "team/x", "to": "y"}, headers=auth
            )
            r = client.post(
                f"{API}/rename-dir", json={"from": "team/x", "to": "team/y"}, headers=auth
            )
    assert outside.status_code == 403
    assert r.status_code == 200, r.text
    assert r.json()["updated_links"] == ["team/uses.md"]  # secret.md is neither changed nor named
    assert (root / "team/uses.md").read_text() == "[[team/y/p]]\n"
    assert (root / "secret.md").read_text() == "[[team/x/p]]\n"


def test_kiwi_rename_reports_the_files_it_rewrote(root: Path) -> None:
    async def go() -> tuple[str, str]:
        async with mcp_session(root) as client:
            first = await ok(client, "kiwi_rename", {"from": "drafts/a.md", "to": "kept/a.md"})
            second = await ok(
                client,
                "kiwi_rename",
                {"from": "kept/a.md", "to": "kept/a2.md", "update_links": False},
            )
            return first, second

    first, second = anyio.run(go)
    assert first.startswith("Renamed drafts/a.md \u2192 kept/a.md (ETag: ")
    assert first.endswith("\nUpdated links in 2 files:\n  - index.md\n  - kept/a.md")
    assert "Updated links" not in second
    assert (root / "index.md").read_text() == "[[kept/a]] and [[drafts/b|B]]\n"
    assert (root / "kept/a2.md").read_text() == "# A\n[b](../drafts/b.md)\n"  # from its new folder
