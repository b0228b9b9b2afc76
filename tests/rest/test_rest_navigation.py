"""GET /api/kiwi/peek, /section and /context in process, KiwiFS's JSON shapes, and the prefix
of a scoped key: peek and section are checked on ``path``, context is refused to a prefix."""

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
PAGE = "---\ntitle: T\n---\n# T\n\nintro\n\n## A\n\none\n"
KEYS = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-all"
space = "default"
scope = "read"

[[auth.api_keys]]
key = "k-team"
space = "default"
scope = "read"
prefix = "team"
"""


@pytest.fixture
def page_root(tmp_path: Path) -> Path:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "p.md").write_text(PAGE)
    (tmp_path / "secret.md").write_text(PAGE)
    return tmp_path


def test_peek_section_context(page_root: Path) -> None:
    with app_on(page_root) as client:
        peek = client.get(f"{API}/peek", params={"path": "team/p.md"})
        section = client.get(f"{API}/section", params={"path": "team/p.md", "heading": "a"})
        by_index = client.get(f"{API}/section", params={"path": "team/p.md", "index": "0"})
        context = client.get(f"{API}/context")
        assert client.get(f"{API}/section", params={"path": "team/p.md"}).status_code == 400
        assert (
            client.get(f"{API}/section", params={"path": "team/p.md", "index": "x"}).status_code
            == 400
        )
        no_match = client.get(f"{API}/section", params={"path": "team/p.md", "heading": "zz"})
        assert client.get(f"{API}/peek", params={"path": "nope.md"}).status_code == 404
    assert peek.status_code == 200 and peek.json()["headings"] == ["T", "A"]
    assert set(peek.json()) == {
        "path",
        "title",
        "frontmatter",
        "snippet",
        "links_out",
        "links_in",
        "word_count",
        "headings",
    }
    assert section.json() == {
        "path": "team/p.md",
        "heading": "A",
        "level": 2,
        "content": "## A\n\none",
        "line_start": 8,
        "line_end": 10,
    }
    assert by_index.json()["heading"] == "T"
    assert no_match.status_code == 404 and "zz" in no_match.json()["error"]
    assert set(context.json()) == {"playbook", "schema", "index", "rules", "memory"}


@pytest.fixture
def scoped(page_root: Path) -> Iterator[AppClient]:
    (page_root / ".kiwi").mkdir(exist_ok=True)
    (page_root / ".kiwi" / "config.toml").write_text(KEYS)
    tuning = Tuning(commit_process=False)
    with Knowledge.open(page_root, tuning=tuning) as kb:
        with serve_in_process(create_app(kb, gate=Gate.of(kb.config, page_root))) as client:
            yield client


def test_prefix_checks(scoped: AppClient) -> None:
    team, every = {"Authorization": "Bearer k-team"}, {"Authorization": "Bearer k-all"}
    for route in ("peek", "section"):
        params = {"path": "team/p.md", "heading": "a"}
        assert scoped.get(f"{API}/{route}", params=params, headers=team).status_code == 200
        params = {"path": "secret.md", "heading": "a"}
        assert scoped.get(f"{API}/{route}", params=params, headers=team).status_code == 403
        assert scoped.get(f"{API}/{route}", params=params, headers=every).status_code == 200
    assert scoped.get(f"{API}/context", headers=team).status_code == 403
    assert scoped.get(f"{API}/context", headers=every).status_code == 200
