"""The web search box: hybrid search (keyword ranks fused with meaning) offered, and the default,
when the root has vectors on, with a real local model2vec model built on disk; keyword only
otherwise."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx

from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from vectorkit import local_config

MakeRoot = Callable[..., Path]
PAGES = {
    # shares no word with the query below: only its meaning (birds) finds it
    "birds/kiwi.md": "The kiwi is flightless and lays one egg in a nest.\n",
    "tech/db.md": "sqlite stores the index table on disk.\n",
    "home/cake.md": "A recipe: bake with flour and sugar in the oven.\n",
}
QUERY = "feathers wing"


def get(kb: Knowledge, url: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(kb))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(url)

    return anyio.run(go)


def hits(page: str) -> list[tuple[str, str]]:
    """(path, match) of each result; match is empty for keyword results."""
    found = []
    for item in re.findall(r"<li>(.*?)</li>", page.split('id="results"', 1)[1], re.S):
        path = re.search(r'<a href="/file/[^"]*">(.*?)</a>', item)
        match = re.search(r'class="match muted">(.*?)<', item)
        assert path, item
        found.append((html.unescape(path.group(1)), match.group(1) if match else ""))
    return found


def modes(page: str) -> list[str]:
    return re.findall(r'<option value="([^"]+)"', page)


def test_with_vectors_the_box_offers_hybrid_first_and_it_finds_by_meaning(
    make_root: MakeRoot, model: Path
) -> None:
    root = make_root({**PAGES, ".kiwi/config.toml": local_config(model)})
    with Knowledge.open(root) as kb:
        kb.reindex_vectors()
        form = get(kb, "/search")
        assert form.status_code == 200 and modes(form.text) == ["hybrid", "keyword"]
        hybrid = get(kb, f"/search?q={QUERY}")  # hybrid is the default
        assert hybrid.status_code == 200
        assert hits(hybrid.text)[0] == ("birds/kiwi.md", "semantic only")
        assert '<option value="hybrid" selected>' in hybrid.text
        expected = kb.hybrid_search(QUERY, limit=20)
        assert [p for p, _ in hits(hybrid.text)] == [h.path for h in expected.results]
        keyword = get(kb, f"/search?q={QUERY}&mode=keyword")
        assert keyword.status_code == 200 and hits(keyword.text) == []
        both = get(kb, "/search?q=kiwi&mode=hybrid&prefix=birds/")
        assert hits(both.text) == [("birds/kiwi.md", "both")]


def test_without_vectors_only_keyword_is_offered(make_root: MakeRoot) -> None:
    root = make_root(PAGES, name="plain")
    with Knowledge.open(root) as kb:
        form = get(kb, "/search?q=kiwi")
        assert form.status_code == 200 and modes(form.text) == []  # no selector: one mode
        assert hits(form.text) == [("birds/kiwi.md", "")]
        refused = get(kb, "/search?q=kiwi&mode=hybrid")
        assert refused.status_code == 400
        assert "unknown search mode &#39;hybrid&#39; (this root offers keyword)" in refused.text


def test_hybrid_pages_keep_the_mode(make_root: MakeRoot, model: Path) -> None:
    pages: dict[str, Any] = {f"birds/b{i:02d}.md": f"kiwi note {i}\n" for i in range(25)}
    root = make_root({**pages, ".kiwi/config.toml": local_config(model)})
    with Knowledge.open(root) as kb:
        kb.reindex_vectors()
        first = get(kb, "/search?q=kiwi")
        assert len(hits(first.text)) == 20
        assert "mode=hybrid&amp;page=2" in first.text
        second = get(kb, "/search?q=kiwi&mode=hybrid&page=2")
        assert len(hits(second.text)) == 5
