"""GET /api/kiwi/graph, /graph/walk, /graph/path and /health-check in process: KiwiFS's shapes,
the bounds, the 404s, and a key with a prefix learning of no node or edge outside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from asgiclient import AppClient, app_on, serve_in_process
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.server.access import Gate
from kiwifs.tuning import Tuning

API = "/api/kiwi"
KEYS = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-team"
space = "default"
scope = "read"
prefix = "team"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "team").mkdir()
    (tmp_path / "a.md").write_text("---\nowner: o\nstatus: s\n---\n[[b]] [[team/c]]\n")
    (tmp_path / "b.md").write_text("[[team/c]] [[gone]]\n")
    (tmp_path / "team" / "c.md").write_text("[[d]] [[a]]\n")
    (tmp_path / "team" / "d.md").write_text("---\nmemory_status: superseded\n---\nd\n")
    return tmp_path


def test_graph_routes(root: Path) -> None:
    with app_on(root) as client:
        graph = client.get(f"{API}/graph", params={"limit": 2}).json()
        walk = client.get(f"{API}/graph/walk", params={"path": "team/c.md"}).json()
        bare = client.get(f"{API}/graph/walk", params={"path": "a.md", "include_siblings": "false"})
        path = client.get(f"{API}/graph/path", params={"from": "a.md", "to": "team/d.md"})
        none = client.get(f"{API}/graph/path", params={"from": "team/d.md", "to": "a.md"})
        health = client.get(f"{API}/health-check", params={"path": "b.md"}).json()
        missing = client.get(f"{API}/graph/walk", params={"path": "nope.md"})
        no_from = client.get(f"{API}/graph/path", params={"to": "a.md"})
    assert [n["path"] for n in graph["nodes"]] == ["a.md", "b.md"] and graph["truncated"]
    assert graph["edges"] == [{"source": "a.md", "target": "b.md", "kind": "wiki"}]
    assert walk["links_out"] == ["team/d.md", "a.md"] and walk["superseded"] == ["team/d.md"]
    assert walk["links_in"] == ["a.md", "b.md"] and walk["in_degree"] == 2
    assert bare.json()["siblings"] == []
    assert path.json() == {
        "path": ["a.md", "team/c.md", "team/d.md"],
        "hops": 2,
        "superseded": ["team/d.md"],
    }
    assert none.status_code == 404
    assert none.json()["error"] == "no path exists between the given pages"
    assert "broken-link: [[gone]] doesn't resolve to any file" in health["issues"]
    assert set(health) == {
        "path", "word_count", "link_count", "backlink_count", "days_since_update", "issues",
        "superseded",
    }  # fmt: skip
    assert missing.status_code == 404 and no_from.status_code in (400, 422)


@pytest.fixture
def scoped(root: Path) -> Iterator[AppClient]:
    (root / ".kiwi").mkdir(exist_ok=True)
    (root / ".kiwi" / "config.toml").write_text(KEYS)
    with Knowledge.open(root, tuning=Tuning(commit_process=False)) as kb:
        with serve_in_process(create_app(kb, gate=Gate.of(kb.config, root))) as client:
            yield client


def test_prefixed_key_sees_nothing_outside(scoped: AppClient) -> None:
    team = {"Authorization": "Bearer k-team"}
    graph = scoped.get(f"{API}/graph", headers=team).json()
    assert [n["path"] for n in graph["nodes"]] == ["team/c.md", "team/d.md"]
    assert graph["edges"] == [{"source": "team/c.md", "target": "team/d.md", "kind": "wiki"}]
    other = scoped.get(f"{API}/graph", params={"path_prefix": "elsewhere/"}, headers=team)
    assert other.json() == {"nodes": [], "edges": [], "truncated": False}
    walk = scoped.get(f"{API}/graph/walk", params={"path": "team/c.md"}, headers=team).json()
    assert walk["links_out"] == ["team/d.md"] and walk["links_in"] == []
    assert walk["broken"] == ["a"]  # its target, outside the prefix, is not shown to exist
    health = scoped.get(f"{API}/health-check", params={"path": "team/c.md"}, headers=team)
    assert health.json()["backlink_count"] == 0
    for route, params in (
        ("graph/walk", {"path": "a.md"}),
        ("graph/path", {"from": "team/c.md", "to": "a.md"}),
        ("graph/path", {"from": "a.md", "to": "team/c.md"}),
        ("health-check", {"path": "b.md"}),
    ):
        assert scoped.get(f"{API}/{route}", params=params, headers=team).status_code == 403
