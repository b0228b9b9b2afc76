"""The navigation reads on real files: peek, section and context through ``Knowledge`` (rules:
:mod:`kiwifs.memory.navigation`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiwifs.errors import NotFound, UsageError
from kiwifs.knowledge import Knowledge

PAGE = """\
---
title: Alpha page
tags: [a, b, c, d, e, f, g]
merged-from:
  - {type: episode, id: e1, path: episodes/e1.md}
  - {type: episode, id: e2}
derived-from:
  - {type: run, id: r1, path: runs/r1.md}
superseded_by: notes/new.md
---
# Alpha

First paragraph with [[Beta|the beta]], [[Gamma#Part]], [a link](../other.md#x), `[[not a link]]`
and [a site](https://example.com/page.md).

## Setup

setup one

```
# not a heading
## nor this
```

### Detail

detail text

## Setup

setup two

Setext heading
--------------

the end
"""


@pytest.fixture
def kb(tmp_path: Path) -> Knowledge:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text(PAGE)
    (tmp_path / "notes" / "flat.md").write_text("no headings here, [[Only]] a link\n")
    return Knowledge.open(tmp_path)


def test_peek(kb: Knowledge) -> None:
    with kb:
        peek = kb.peek("notes/a.md").to_json()
    assert peek["path"] == "notes/a.md"
    assert peek["title"] == "Alpha page"  # the frontmatter's title before the first heading
    assert peek["headings"] == ["Alpha", "Setup", "Detail", "Setup", "Setext heading"]
    assert peek["snippet"].startswith("First paragraph with [[Beta|the beta]]")
    assert peek["links_out"] == [
        "Beta",
        "Gamma",
        "other.md",
        "episodes/e1.md",
        "runs/r1.md",
        "notes/new.md",
    ]
    assert peek["links_in"] == []  # no link index yet: the hook is empty
    assert peek["frontmatter"]["tags"] == ["a", "b", "c", "d", "e", "\u2026 2 more"]
    assert peek["word_count"] > 20
    assert list(peek) == [
        "path",
        "title",
        "frontmatter",
        "snippet",
        "links_out",
        "links_in",
        "word_count",
        "headings",
    ]


def test_peek_links_in_come_from_the_link_index_within_the_prefix(kb: Knowledge) -> None:
    """Each source once (a page linking twice, in two kinds, is one source); a key's prefix
    leaves out sources outside it."""
    root = kb.root
    (root / "x.md").write_text("see [[a]] and [again](notes/a.md)\n")
    (root / "notes" / "y.md").write_text("---\ncontradicts: notes/a.md\n---\nbody\n")
    with kb:
        assert kb.peek("notes/a.md").links_in == ("notes/y.md", "x.md")
        assert kb.peek("notes/a.md", prefix="notes").links_in == ("notes/y.md",)


def test_peek_without_headings_titles_by_file_name(kb: Knowledge) -> None:
    with kb:
        peek = kb.peek("notes/flat.md")
    assert (peek.title, peek.headings, peek.links_out) == ("flat.md", (), ("Only",))


def test_section_same_named_headings_first_wins(kb: Knowledge) -> None:
    with kb:
        first = kb.section("notes/a.md", "setup")
        second = kb.section("notes/a.md", index=3)
    assert first.heading == "Setup" and "setup one" in first.content
    # up to the next heading of the same level: the sub-heading and the fenced code stay in
    assert "### Detail" in first.content and "## nor this" in first.content
    assert "setup two" not in first.content
    assert first.line_start == 16  # 1-based lines of the whole file, frontmatter included
    assert first.content.splitlines()[0] == "## Setup"
    assert first.line_end - first.line_start + 1 == len(first.content.splitlines())
    assert second.content == "## Setup\n\nsetup two"


def test_section_fenced_heading_is_not_a_heading(kb: Knowledge) -> None:
    with kb, pytest.raises(NotFound, match="matches 'nor this'"):
        kb.section("notes/a.md", "nor this")


def test_section_setext_and_partial_match(kb: Knowledge) -> None:
    with kb:
        setext = kb.section("notes/a.md", "## SETEXT")
        detail = kb.section("notes/a.md", "etai")
    assert (setext.level, setext.content) == (2, "Setext heading\n--------------\n\nthe end")
    assert (detail.level, detail.content) == (3, "### Detail\n\ndetail text")


def test_section_errors(kb: Knowledge) -> None:
    with kb:
        with pytest.raises(NotFound, match="has no headings"):
            kb.section("notes/flat.md", "x")
        with pytest.raises(NotFound, match="index 5"):
            kb.section("notes/a.md", index=5)
        with pytest.raises(UsageError, match="heading or index"):
            kb.section("notes/a.md")
        with pytest.raises(UsageError):
            kb.section("notes/a.md", index=-1)
        with pytest.raises(NotFound):
            kb.section("notes/missing.md", "x")


def test_context_without_files(kb: Knowledge) -> None:
    with kb:
        context = kb.context()
    assert (context.schema, context.playbook, context.index, context.rules) == ("", "", "", "")
    text = context.to_text()
    assert "=== SCHEMA ===\n(no SCHEMA.md found)" in text
    assert "(no .kiwi/rules.md found)" in text
    assert "=== MEMORY ===\nepisodes_prefix: episodes/" in text
    assert context.to_json()["memory"]["episodes_prefix"] == "episodes/"


def test_context_with_files(tmp_path: Path) -> None:
    (tmp_path / "SCHEMA.md").write_text("# Schema\nfolders\n")
    (tmp_path / "index.md").write_text("# Index\n" + "x" * 40_000)
    (tmp_path / ".kiwi").mkdir()
    (tmp_path / ".kiwi" / "rules.md").write_text("be brief\n")
    (tmp_path / ".kiwi" / "config.toml").write_text('[memory]\nepisodes_path_prefix = "log/"\n')
    with Knowledge.open(tmp_path) as kb:
        doc = kb.context().to_json()
    assert doc["schema"] == "# Schema\nfolders\n"
    assert doc["rules"] == "be brief\n"
    assert doc["playbook"] == ""
    assert len(doc["index"]) < 17_000 and "[cut: 16384 of" in doc["index"]  # bounded
    assert doc["memory"]["episodes_prefix"] == "log/"


def test_context_ignores_a_linked_rules_file(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("outside\n")
    (tmp_path / ".kiwi").mkdir()
    (tmp_path / ".kiwi" / "rules.md").symlink_to(tmp_path / "secret.txt")
    with Knowledge.open(tmp_path) as kb:
        assert kb.context().rules == ""
