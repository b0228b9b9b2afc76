"""The query rule: natural language unless clearly FTS5, and never an error — in the library
and through every interface that takes a query (REST, MCP, CLI; keyword, hybrid, brief)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asgiclient import app_on
from kiwifs.cli import cli
from kiwifs.index.search import query
from kiwifs.knowledge import Knowledge
from mcpsession import call, mcp_session

API = "/api/kiwi"
PAGES = {
    "notes/book.md": 'Melanie read "Nothing is Impossible" last week.\n',
    "notes/support.md": "Caroline went to the LGBTQ support group on Tuesday.\n",
    "notes/ep.md": "---\nepisode_id: ep-1\n---\nThe first episode of the run.\n",
    "notes/cjk.md": "知识库 and Привет мир\n",
    "notes/coffee.md": "A group of friends met for coffee; no support was needed.\n",
    "notes/cpp.md": "C++ and C# compilers.\n",
}
TRICKY = [
    'When did Melanie read the book "nothing is impossible"?',
    "When did Caroline go to the LGBTQ support group?",
    '"unbalanced quote group',
    'group "',
    "unbalanced paren (group",
    "group)",
    "(group OR",
    "episode_id: ep-1",
    "Note: support",
    "x:y:z group",
    "NEAR",
    "NEAR(support group, 3",
    "support*",
    "*",
    "* group *",
    "-",
    "- group",
    "-group",
    "group^",
    "^",
    ":",
    '"',
    '""',
    "()",
    "body:",
    "Привет",
    "知识库",
    "\U0001f389 support \U0001f389",
    "\U0001f389",
    "the and of",
    "?!...",
    "support AND",
    "NOT group",
    "OR",
    "group and coffee or not",
    "C++ and C#",
    "\x00support\x00",
    " ".join(["word"] * 990 + [f"w{i}" for i in range(10)]),
]


def paths(results: Any) -> list[str]:
    return [hit.path for hit in results.results]


@pytest.fixture
def pages_root(make_root: Callable[..., Path]) -> Path:
    """``PAGES`` in a plain folder (no git)."""
    return make_root(PAGES)


@pytest.fixture
def pages_kb(pages_root: Path) -> Iterator[Knowledge]:
    with Knowledge(pages_root) as k:
        yield k


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fts5"),
    [
        ('"exact phrase"', True),
        ('"a b" "c d"', True),
        ("a AND b", True),
        ("a OR b", True),
        ("a NOT b", True),
        ("(a OR b) c", True),
        ("NEAR(a b, 3)", True),
        ("pre*", True),
        ('"a b"*', True),
        ("^start", True),
        ("body: words", True),
        ("Body:words", True),
        ("plain words", False),
        ("a and b or not c", False),  # lower case: plain words
        ("AND b", False),  # an operator with nothing before it
        ("b NOT", False),
        ("a NEAR b", False),  # bare NEAR is a word to FTS5 too
        ("episode_id: ep-1", False),  # not a column of the index
        ("Note: buy milk", False),
        ('read the book "nothing is impossible"', False),  # a phrase among plain words
        ("*", False),
        ("what is 5*?", False),
        ("", False),
    ],
)
def test_what_is_fts5_syntax(text: str, fts5: bool) -> None:
    assert query.is_fts5(text) is fts5


def test_plain_text_is_its_content_words_or_ed() -> None:
    parsed = query.parse("When did Caroline go to the LGBTQ support group?")
    assert parsed.syntax is None
    assert parsed.any_match == '"Caroline" OR "go" OR "LGBTQ" OR "support" OR "group"'
    assert parsed.words == ("caroline", "go", "lgbtq", "support", "group")


def test_stop_words_alone_are_kept() -> None:
    assert query.parse("what is it").any_match == '"what" OR "is" OR "it"'


def test_a_quoted_phrase_and_joined_words_are_also_phrases() -> None:
    parsed = query.parse('Did Melanie read "nothing is impossible" at run-249?')
    assert parsed.any_match == (
        '"nothing is impossible" OR "Melanie" OR "read" OR "nothing" OR "impossible"'
        ' OR "run" OR "249" OR "run 249"'
    )
    assert query.parse("Caroline's group").any_match == '"Caroline" OR "group"'


def test_words_are_distinct_as_indexed_and_capped() -> None:
    assert query.parse("run running runs").any_match == '"run"'
    many = query.parse(" ".join(f"w{i}" for i in range(1000)))
    assert len(many.terms) == query.MAX_TERMS
    assert many.terms[0].match == '"w0"'


def test_nothing_to_look_for() -> None:
    for text in ("", "?!...", "\U0001f389", "-", "*", '""', "()"):
        assert query.parse(text).terms == (), text


# -- the library --------------------------------------------------------------------------------


def test_no_query_string_is_an_error(pages_kb: Knowledge) -> None:
    for text in TRICKY:
        pages_kb.search(text, limit=10)
        pages_kb.hybrid_search(text, limit=10)
        pages_kb.brief(text, budget_tokens=2000)


def test_questions_find_their_pages(pages_kb: Knowledge) -> None:
    question = 'When did Melanie read the book "nothing is impossible"?'
    assert paths(pages_kb.search(question))[0] == "notes/book.md"
    found = paths(pages_kb.search("When did Caroline go to the LGBTQ support group?"))
    assert found[0] == "notes/support.md" and "notes/coffee.md" in found
    assert paths(pages_kb.search("episode_id: ep-1"))[0] == "notes/ep.md"
    assert paths(pages_kb.search("Привет")) == ["notes/cjk.md"]
    assert paths(pages_kb.search("知识库")) == ["notes/cjk.md"]
    assert paths(pages_kb.search("\U0001f389 support \U0001f389"))[0] == "notes/support.md"
    assert paths(pages_kb.search("support AND")) == paths(pages_kb.search("support"))
    assert paths(pages_kb.search('"unbalanced quote group')) == paths(pages_kb.search("group"))
    assert paths(pages_kb.search("?!...")) == []
    assert "notes/ep.md" in paths(pages_kb.search("the and of"))  # only stop words: still asked
    brief = pages_kb.brief("When did Caroline go to the LGBTQ support group?", budget_tokens=2000)
    assert brief.pages[0].path == "notes/support.md"


def test_fts5_syntax_keeps_its_meaning(pages_kb: Knowledge) -> None:
    assert paths(pages_kb.search('"support group"')) == ["notes/support.md"]
    assert paths(pages_kb.search("group AND coffee")) == ["notes/coffee.md"]
    assert paths(pages_kb.search("group NOT coffee")) == ["notes/support.md"]
    assert sorted(paths(pages_kb.search("supp*"))) == ["notes/coffee.md", "notes/support.md"]
    assert paths(pages_kb.search("NEAR(Caroline group, 5)")) == ["notes/support.md"]
    assert paths(pages_kb.search("NEAR(Caroline coffee)")) == []
    assert paths(pages_kb.search("body: Tuesday")) == ["notes/support.md"]


def test_snippets_mark_the_words_asked(pages_kb: Knowledge) -> None:
    hit = pages_kb.search("When did Caroline go to the support group?").results[0]
    assert hit.snippet == (
        "<mark>Caroline</mark> went to the LGBTQ <mark>support</mark> <mark>group</mark>"
        " on Tuesday."
    )


# -- every interface ----------------------------------------------------------------------------


def test_rest_answers_every_query(pages_root: Path) -> None:
    """In-process with its lifespan: the watcher runs, so the term columns rank as in serve."""
    with app_on(pages_root) as client:
        for text in TRICKY:
            for route, extra in (("search", {}), ("search/hybrid", {}), ("brief", {})):
                resp = client.get(f"{API}/{route}", params={"q": text, **extra})
                if route == "brief" and not text.strip():
                    continue
                assert resp.status_code == 200, (route, text, resp.text)
        question = 'When did Melanie read the book "nothing is impossible"?'
        body = client.get(f"{API}/search", params={"q": question, "limit": 10}).json()
        assert body["results"][0]["path"] == "notes/book.md"
        body = client.get(f"{API}/brief", params={"q": question, "budget_tokens": 2000}).json()
        assert body["pages"][0]["path"] == "notes/book.md"
        body = client.get(f"{API}/search", params={"q": '"support group"'}).json()
        assert [r["path"] for r in body["results"]] == ["notes/support.md"]


@pytest.mark.anyio
async def test_mcp_answers_every_query(pages_root: Path) -> None:
    async with mcp_session(pages_root) as client:
        for text in TRICKY:
            for tool in ("kiwi_search", "kiwi_search_hybrid", "kiwi_brief"):
                error, out = await call(client, tool, {"query": text})
                assert not error, (tool, text, out)
        question = "When did Caroline go to the LGBTQ support group?"
        error, out = await call(client, "kiwi_search", {"query": question})
        assert not error and "notes/support.md" in out.splitlines()[0], out
        error, out = await call(client, "kiwi_brief", {"query": question})
        assert not error and "notes/support.md" in out, out


def test_cli_answers_every_query(pages_root: Path) -> None:
    runner = CliRunner()
    for text in [t for t in TRICKY if t.strip() and "\x00" not in t][::3]:
        for args in (["search", text], ["search", text, "--mode", "hybrid"], ["brief", text]):
            out = runner.invoke(cli, [*args, "--root", str(pages_root)])
            assert out.exit_code == 0, (args, out.output)
    question = 'When did Melanie read the book "nothing is impossible"?'
    out = runner.invoke(cli, ["search", question, "--root", str(pages_root)])
    assert out.exit_code == 0 and out.output.startswith("1. notes/book.md"), out.output
    out = runner.invoke(cli, ["brief", question, "--root", str(pages_root), "--budget", "2000"])
    assert out.exit_code == 0 and "notes/book.md" in out.output, out.output
