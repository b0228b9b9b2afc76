"""The web pages' links, in-process: a file page lists its outbound links (resolved ones as
links to their pages, broken ones marked) and its backlinks (superseded sources marked); the
dashboard counts the broken links and /links/broken lists them; hostile names stay text."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.rest.web.render import file_url

HOSTILE = "<script>alert(1)</script>"
HOSTILE_PAGE = 'concepts/x"><img src=x onerror=alert(2)>.md'


def get(app: object, url: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(url)

    return anyio.run(go)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[object]:
    root = tmp_path_factory.mktemp("weblinks") / "kb"
    Knowledge.init(root, "knowledge")
    kb = Knowledge.open(root)
    kb.write(
        "concepts/auth.md", f"# Auth\n\nSee [[tokens]] and [[missing-page]] and [[{HOSTILE}]].\n"
    )
    kb.write("concepts/tokens.md", "# Tokens\n\nBack to [auth](auth.md#top).\n")
    kb.write(
        "old/auth-v1.md",
        "---\nmemory_status: superseded\nsuperseded_by: concepts/auth.md\n---\nOld auth.\n",
    )
    kb.write(HOSTILE_PAGE, "# Hostile\n\n[[auth]] [[nowhere]]\n")
    yield create_app(kb)
    kb.close()


def section(page: str, ident: str) -> str:
    match = re.search(rf'<section id="{ident}">(.*?)</section>', page, re.S)
    assert match is not None, ident
    return match.group(1)


def test_file_page_lists_outbound_links_resolved_and_broken(app: object) -> None:
    resp = get(app, "/file/concepts/auth.md")
    assert resp.status_code == 200
    out = section(resp.text, "links-out")
    assert f'href="{file_url("concepts/tokens.md")}"' in out
    assert out.count('<span class="badge">broken</span>') == 2
    assert '<code class="link-target">missing-page</code>' in out
    assert "<script>alert(1)" not in resp.text
    assert html.escape(HOSTILE, quote=False) in out
    assert "3, 2 broken" in out


def test_file_page_lists_backlinks_with_superseded_sources_marked(app: object) -> None:
    resp = get(app, "/file/concepts/auth.md")
    back = section(resp.text, "backlinks")
    items = re.findall(r"<li>(.*?)</li>", back, re.S)
    by_path = {}
    for item in items:
        name = re.search(r">([^<]*)</a>", item)
        assert name is not None
        by_path[html.unescape(name.group(1))] = item
    assert set(by_path) == {"concepts/tokens.md", "old/auth-v1.md", HOSTILE_PAGE}
    old = by_path["old/auth-v1.md"]
    assert '<span class="badge"' in old and "superseded-by" in old
    assert '<span class="badge"' not in by_path["concepts/tokens.md"]
    assert f'href="{file_url(HOSTILE_PAGE)}"' in back
    assert "<img src=x" not in resp.text


def test_hostile_page_shows_its_links_escaped(app: object) -> None:
    resp = get(app, file_url(HOSTILE_PAGE))
    assert resp.status_code == 200
    assert "<img src=x onerror" not in resp.text
    out = section(resp.text, "links-out")
    assert f'href="{file_url("concepts/auth.md")}"' in out and "nowhere" in out


def test_dashboard_counts_broken_links_and_the_page_lists_them(app: object) -> None:
    dash = get(app, "/")
    assert 'id="broken-count" data-source="/ui/links.json"' in dash.text  # counted after
    assert get(app, "/ui/links.json").json() == {"broken": 3}
    assert 'href="/links/broken"' in dash.text
    page = get(app, "/links/broken")
    assert page.status_code == 200
    rows = re.findall(r"<tr><td>(.*?)</tr>", page.text, re.S)
    assert len(rows) == 3
    assert "<script>alert(1)" not in page.text and "<img src=x" not in page.text
    assert html.escape(HOSTILE, quote=False) in page.text
    assert f'href="{file_url(HOSTILE_PAGE)}"' in page.text
