"""PATCH /api/kiwi/file/frontmatter and GET /api/kiwi/blame in process, on a real git root:
KiwiFS's bodies and answers, If-Match, one commit per patch, blame after two actors' commits,
and a scoped key's prefix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from asgiclient import app_on, serve_in_process
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.server.access import Gate

API = "/api/kiwi"
PAGE = "---\ntitle: Auth\nstatus: draft\nmeta:\n  a: 1\n---\n# Auth\n\nbody\n"
KEYS = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-team"
space = "default"
scope = "write"
prefix = "team"

[[auth.api_keys]]
key = "k-read"
space = "default"
scope = "read"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    Knowledge.init(tmp_path)
    with Knowledge.open(tmp_path) as kb:
        kb.write("p.md", PAGE, actor="alice")
    return tmp_path


def commits(root: Path) -> int:
    out = subprocess.run(
        ["git", "-C", str(root), "rev-list", "--count", "HEAD"], capture_output=True, check=True
    )
    return int(out.stdout)


def test_patch_sets_removes_merges_in_one_commit(root: Path) -> None:
    before = commits(root)
    with app_on(root) as client:
        r = client.request(
            "PATCH",
            f"{API}/file/frontmatter",
            params={"path": "p.md"},
            json={"fields": {"status": "done", "title": None, "meta": {"b": 2}, "tags": ["x"]}},
            headers={"X-Actor": "bob"},
        )
        versions = client.get(f"{API}/versions", params={"path": "p.md"}).json()["versions"]
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"path", "etag"} and r.headers["etag"] == f'"{r.json()["etag"]}"'
    text = (root / "p.md").read_text()
    assert text == "---\nstatus: done\nmeta:\n  a: 1\n  b: 2\ntags:\n  - x\n---\n# Auth\n\nbody\n"
    assert commits(root) == before + 1 and versions[0]["author"] == "bob"


def test_merge_patch_media_type_and_no_change(root: Path) -> None:
    before = commits(root)
    with app_on(root) as client:
        bare = client.request(
            "PATCH",
            f"{API}/file/frontmatter",
            params={"path": "p.md"},
            content=b'{"status": "draft"}',
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert bare.status_code == 200 and (root / "p.md").read_text() == PAGE
    assert commits(root) == before  # nothing changed: no commit


def test_if_match_conflict_leaves_the_file(root: Path) -> None:
    with app_on(root) as client:
        stale = client.request(
            "PATCH",
            f"{API}/file/frontmatter",
            params={"path": "p.md"},
            json={"fields": {"status": "done"}},
            headers={"If-Match": '"' + "0" * 40 + '"'},
        )
        etag = client.get(f"{API}/file", params={"path": "p.md"}).headers["etag"]
        fresh = client.request(
            "PATCH",
            f"{API}/file/frontmatter",
            params={"path": "p.md"},
            json={"fields": {"status": "done"}},
            headers={"If-Match": etag},
        )
    assert stale.status_code == 409
    assert fresh.status_code == 200 and "status: done" in (root / "p.md").read_text()


def test_refusals(root: Path) -> None:
    (root / "bad.md").write_text("---\na: [1\n---\nbody\n")
    (root / "plain.md").write_text("no frontmatter\n")
    (root / "x.txt").write_text("x")
    with app_on(root) as client:

        def patch(path: str, body: object) -> int:
            r = client.request("PATCH", f"{API}/file/frontmatter", params={"path": path}, json=body)
            return r.status_code

        assert patch("bad.md", {"fields": {"a": 2}}) == 400
        assert patch("missing.md", {"fields": {"a": 2}}) == 404
        assert patch("p.md", {"fields": {}}) == 400
        assert patch("p.md", {"other": 1}) == 400
        assert patch("x.txt", {"fields": {"a": 1}}) == 400
        assert patch("plain.md", {"fields": {"status": "new"}}) == 200
    assert (root / "bad.md").read_text() == "---\na: [1\n---\nbody\n"
    assert (root / "plain.md").read_text() == "---\nstatus: new\n---\nno frontmatter\n"


def test_blame_after_two_actors(root: Path) -> None:
    with app_on(root) as client:
        client.put(
            f"{API}/file",
            params={"path": "p.md"},
            content=PAGE + "more\n",
            headers={"X-Actor": "bob"},
        )
        r = client.get(f"{API}/blame", params={"path": "p.md"})
        missing = client.get(f"{API}/blame", params={"path": "nope.md"})
    (root / "new.md").write_text("uncommitted\n")
    with app_on(root) as client:
        fresh = client.get(f"{API}/blame", params={"path": "new.md"})
    assert r.status_code == 200
    body = r.json()
    assert body["path"] == "p.md" and body["total_lines"] == 10 and body["truncated"] is False
    assert [line["line"] for line in body["lines"]] == list(range(1, 11))
    assert {line["author"] for line in body["lines"][:9]} == {"alice"}
    last = body["lines"][9]
    assert last["author"] == "bob" and last["text"] == "more" and len(last["hash"]) == 40
    assert last["date"].endswith("Z") and body["lines"][0]["text"] == "---"
    assert set(last) == {"line", "author", "date", "hash", "text"}
    assert missing.status_code == 404
    assert fresh.status_code == 200 and fresh.json()["lines"] == []


def test_scoped_keys(root: Path) -> None:
    (root / ".kiwi" / "config.toml").write_text(KEYS)
    (root / "team").mkdir()
    (root / "team" / "t.md").write_text(PAGE)
    with Knowledge.open(root) as kb:
        app = create_app(kb, gate=Gate.of(kb.config, root))
        with serve_in_process(app) as client:

            def call(method: str, route: str, path: str, key: str) -> int:
                return client.request(
                    method,
                    f"{API}{route}",
                    params={"path": path},
                    json={"fields": {"a": 1}},
                    headers={"Authorization": f"Bearer {key}"},
                ).status_code

            assert call("PATCH", "/file/frontmatter", "p.md", "k-team") == 403
            assert call("PATCH", "/file/frontmatter", "team/t.md", "k-team") == 200
            assert call("PATCH", "/file/frontmatter", "team/t.md", "k-read") == 403
            assert call("GET", "/blame", "p.md", "k-team") == 403
            assert call("GET", "/blame", "team/t.md", "k-team") == 200
            assert call("GET", "/blame", "p.md", "k-read") == 200
