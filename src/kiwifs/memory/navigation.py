"""Navigation reads: a page's outline, one of its sections, its outbound links and a short
glance at it (``kiwi_peek``), and the text an agent reads first (``kiwi_context``).

Pure rules over text already read: no I/O. The markdown is parsed with markdown-it (CommonMark,
already a dependency for the web pages), so what counts as a heading is what a renderer shows as
one: ATX (``## Setup``) and setext (a line underlined with ``===`` or ``---``) headings, never a
``#`` line inside a fenced or indented code block. Only top-level headings count: a heading inside
a block quote or a list item does not start a section, since its end would cut the quote open.

Links are read from the same parse, so a link written inside code is not a link. The backlinks of
a page need every other page: they are not found here but handed in (``backlinks``), from the
link index when the root has one.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from kiwifs.base.paths import normalize_ref_path
from kiwifs.errors import NotFound, UsageError

if TYPE_CHECKING:
    from markdown_it.token import Token

SNIPPET_CHARS = 300  # the first paragraph's length in a peek, as KiwiFS cuts it
LIST_ITEMS = 5  # a frontmatter list in a peek keeps this many items, then says how many more
STRING_CHARS = 200  # a frontmatter string in a peek is cut after this many characters
CONTEXT_DOC_BYTES = 16 * 1024  # each document of kiwi_context, cut beyond (a bounded answer)

MERGED_FROM = "merged-from"
DERIVED_FROM = "derived-from"
SUPERSEDED_BY = "superseded_by"

# [[target]], [[target|alias]], [[target#heading]], [[target#heading|alias]]
_WIKI_LINK = re.compile(r"\[\[([^\[\]|#\n]*)(?:#[^\[\]|\n]*)?(?:\|[^\[\]\n]*)?\]\]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Heading:
    """A top-level heading: its level (1-6), its text as written, and the 0-based lines of the
    body where it starts and where the block after it begins."""

    level: int
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Section:
    """One heading's section, from its heading line up to the next heading of the same or a
    higher level (or the end of the file). Lines are 1-based lines of the whole file,
    frontmatter included, so an editor can jump to them; ``line_end`` is the last line shown."""

    path: str
    heading: str
    level: int
    content: str
    line_start: int
    line_end: int

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "heading": self.heading,
            "level": self.level,
            "content": self.content,
            "line_start": self.line_start,
            "line_end": self.line_end,
        }


@dataclass(frozen=True)
class Peek:
    """A glance at a page (KiwiFS's ``peek`` answer): title, compact frontmatter, the first
    paragraph, outbound links, backlinks (``links_in``, as handed in), the heading outline and
    the body's word count."""

    path: str
    title: str
    frontmatter: dict[str, Any]
    snippet: str
    links_out: tuple[str, ...]
    links_in: tuple[str, ...]
    word_count: int
    headings: tuple[Heading, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "title": self.title,
            "frontmatter": self.frontmatter,
            "snippet": self.snippet,
            "links_out": list(self.links_out),
            "links_in": list(self.links_in),
            "word_count": self.word_count,
            "headings": [h.text for h in self.headings],
        }

    def to_text(self) -> str:
        """The glance for a person (``kiwifs peek``): the outline indented by level."""
        lines = [f"{self.title}  ({self.path}, {self.word_count} words)"]
        if self.frontmatter:
            fields = ", ".join(f"{k}: {_shown(v)}" for k, v in self.frontmatter.items())
            lines.append(f"frontmatter: {fields}")
        if self.snippet:
            lines += ["", self.snippet]
        if self.headings:
            lines += ["", "outline:"]
            top = min(h.level for h in self.headings)
            lines += [f"  {'  ' * (h.level - top)}{h.text}" for h in self.headings]
        for label, links in (("links out", self.links_out), ("links in", self.links_in)):
            if links:
                lines += ["", f"{label}:"] + [f"  {link}" for link in links]
        return "\n".join(lines)


@dataclass(frozen=True)
class Context:
    """What an agent reads first: the root's ``SCHEMA.md``, ``.kiwi/playbook.md``, ``index.md``
    and ``.kiwi/rules.md`` (each ``""`` when missing, each cut at :data:`CONTEXT_DOC_BYTES`),
    and the memory conventions of the root."""

    schema: str
    playbook: str
    index: str
    rules: str
    episodes_prefix: str

    @property
    def memory(self) -> dict[str, str]:
        return memory_conventions(self.episodes_prefix)

    def to_json(self) -> dict[str, Any]:
        """KiwiFS's four documents, then ``memory``."""
        return {
            "playbook": self.playbook,
            "schema": self.schema,
            "index": self.index,
            "rules": self.rules,
            "memory": self.memory,
        }

    def to_text(self) -> str:
        """KiwiFS's ``kiwi_context`` text (``=== SCHEMA ===`` …), then ``=== MEMORY ===``."""
        parts = [
            ("SCHEMA", self.schema, "(no SCHEMA.md found)"),
            ("PLAYBOOK", self.playbook, "(no playbook found)"),
            ("CURRENT INDEX", self.index, "(no index.md found)"),
            ("RULES", self.rules, "(no .kiwi/rules.md found)"),
        ]
        text = "\n\n".join(f"=== {name} ===\n{doc or missing}" for name, doc, missing in parts)
        memory = "\n".join(f"{key}: {value}" for key, value in self.memory.items())
        return f"{text}\n\n=== MEMORY ===\n{memory}"


def memory_conventions(prefix: str) -> dict[str, str]:
    """How this root keeps episodic memory, in the words of the tools that do it."""
    return {
        "episodes_prefix": prefix,
        "remember": (
            f"kiwi_remember writes a new episode under {prefix} (never overwrites; pass an "
            "episode_id to make a retry safe)"
        ),
        "merge": (
            "consolidate episodes into a page, then kiwi_memory_merge records them in the "
            f"page's {MERGED_FROM}; kiwi_memory_report lists the episodes no page cites yet"
        ),
        "forget": (
            f"kiwi_forget marks a page superseded ({SUPERSEDED_BY} names its replacement); "
            "kiwi_restore undoes it"
        ),
    }


def bounded(data: bytes, limit: int = CONTEXT_DOC_BYTES, total: int | None = None) -> str:
    """``data`` (the start of a file of ``total`` bytes) as text, cut at ``limit`` bytes (on a
    character boundary) with a note saying how much was left out, so that one large document
    cannot flood an agent's context."""
    size = len(data) if total is None else total
    if size <= limit:
        return data.decode("utf-8", errors="replace")
    head = data[:limit].decode("utf-8", errors="ignore")
    return f"{head}\n\n[cut: {limit} of {size} bytes shown; read the file for the rest]"


# ---------------------------------------------------------------------------------------------
# parsing


def _tokens(body: str) -> list[Token]:
    # markdown-it loads with the first navigation read, not with every command
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").parse(body)


def _lines(body: str) -> list[str]:
    """The body's lines as markdown-it counts them (it reads ``\\r\\n`` and ``\\r`` as ends)."""
    return body.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _outline(tokens: Sequence[Token]) -> list[Heading]:
    found: list[Heading] = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.level == 0 and token.map is not None:
            text = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            found.append(Heading(int(token.tag[1:]), text, token.map[0], token.map[1]))
    return found


def outline(body: str) -> list[Heading]:
    """The top-level headings of a body (frontmatter removed), in order."""
    return _outline(_tokens(body))


def find_section(
    path: str, body: str, heading: str | None, index: int | None, first_line: int = 1
) -> Section:
    """The section of ``body`` under the first heading whose text contains ``heading`` (case
    ignored, leading ``#`` marks ignored), else under the ``index``-th heading (0-based, in
    :func:`outline`'s order). Same-named headings: the first wins; ask by ``index`` for another.
    ``first_line`` is the file line the body starts on (after the frontmatter).

    :class:`UsageError` when neither is given or ``index`` is negative; :class:`NotFound` when
    the page has no heading or none matches.
    """
    needle = heading.strip().lstrip("#").strip().casefold() if heading else ""
    if not needle and index is None:
        raise UsageError("heading or index is required")
    if not needle and index is not None and index < 0:
        raise UsageError(f"index must be 0 or more, got {index}")
    headings = outline(body)
    if not headings:
        raise NotFound(f"{path} has no headings")
    if needle:
        at = next((i for i, h in enumerate(headings) if needle in h.text.casefold()), None)
        if at is None:
            names = ", ".join(repr(h.text) for h in headings[:20])
            raise NotFound(f"no heading of {path} matches {heading!r}; its headings: {names}")
    else:
        assert index is not None
        if index >= len(headings):
            raise NotFound(f"{path} has {len(headings)} headings; index {index} is past the last")
        at = index
    chosen = headings[at]
    lines = _lines(body)
    stop = next(
        (h.start for h in headings[at + 1 :] if h.level <= chosen.level),
        len(lines),
    )
    shown = lines[chosen.start : stop]
    while len(shown) > 1 and not shown[-1].strip():
        shown.pop()
    return Section(
        path=path,
        heading=chosen.text,
        level=chosen.level,
        content="\n".join(shown),
        line_start=first_line + chosen.start,
        line_end=first_line + chosen.start + len(shown) - 1,
    )


def _link_target(href: str, path: str) -> str | None:
    """A markdown link's target as a root-relative ``.md`` path, ``None`` for anything else
    (another site, an anchor, a file that is not markdown, a path leaving the root)."""
    href = href.strip()
    if not href or href.startswith("#") or _SCHEME.match(href) or href.startswith("//"):
        return None
    target = unquote(href.split("#", 1)[0].split("?", 1)[0])
    if not target.lower().endswith(".md"):
        return None
    if not target.startswith("/"):
        target = posixpath.join(posixpath.dirname(path), target)
    norm = posixpath.normpath(target).lstrip("/")
    if norm == ".." or norm.startswith("../"):
        return None  # above the root
    return normalize_ref_path(norm)


def _memory_edges(frontmatter: Mapping[str, Any]) -> Iterable[str]:
    """The paths ``merged-from`` and ``derived-from`` entries cite, and ``superseded_by``."""
    for key in (MERGED_FROM, DERIVED_FROM):
        raw = frontmatter.get(key)
        items = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else []
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                if (norm := normalize_ref_path(item["path"])) is not None and norm:
                    yield norm
    replaced = frontmatter.get(SUPERSEDED_BY)
    if isinstance(replaced, str) and (norm := normalize_ref_path(replaced)):
        yield norm


def _body_links(tokens: Sequence[Token], path: str) -> Iterable[str]:
    for token in tokens:
        for child in token.children or ():
            if child.type == "text":
                for match in _WIKI_LINK.finditer(child.content):
                    if target := match.group(1).strip():
                        yield target
            elif child.type == "link_open":
                href = child.attrGet("href")
                if isinstance(href, str) and (target := _link_target(href, path)):
                    yield target


def outbound_links(path: str, body: str, frontmatter: Mapping[str, Any]) -> list[str]:
    """The pages ``path`` points to, each once, in order: wiki links (the target as written,
    without its ``#heading`` or ``|alias``), relative markdown links to ``.md`` files (made
    root-relative), then the memory edges of its frontmatter."""
    return _unique([*_body_links(_tokens(body), path), *_memory_edges(frontmatter)])


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _snippet(tokens: Sequence[Token]) -> str:
    """The first top-level paragraph, on one line, cut at a word within SNIPPET_CHARS."""
    for i, token in enumerate(tokens):
        if token.type == "paragraph_open" and token.level == 0 and i + 1 < len(tokens):
            text = " ".join(tokens[i + 1].content.split())
            if len(text) <= SNIPPET_CHARS:
                return text
            cut = text[:SNIPPET_CHARS]
            space = cut.rfind(" ")
            return (cut[:space] if space > 0 else cut) + "\u2026"
    return ""


def compact(value: Any) -> Any:
    """A frontmatter value kept short for a peek: long strings cut, long lists cut to their
    first :data:`LIST_ITEMS` items and a note of how many more (a consolidated page's
    ``merged-from`` can cite hundreds of episodes)."""
    if isinstance(value, str):
        return value if len(value) <= STRING_CHARS else value[:STRING_CHARS] + "\u2026"
    if isinstance(value, dict):
        return {k: compact(v) for k, v in value.items()}
    if isinstance(value, list):
        kept = [compact(v) for v in value[:LIST_ITEMS]]
        more = len(value) - LIST_ITEMS
        return kept + [f"\u2026 {more} more"] if more > 0 else kept
    return value


def peek(
    path: str, body: str, frontmatter: Mapping[str, Any], backlinks: Sequence[str] = ()
) -> Peek:
    """A glance at the page at ``path``: its title is the frontmatter's ``title``, else its
    first heading, else its file name."""
    tokens = _tokens(body)
    headings = _outline(tokens)
    title = frontmatter.get("title")
    if not isinstance(title, str) or not title.strip():
        title = headings[0].text if headings else posixpath.basename(path)
    return Peek(
        path=path,
        title=title.strip(),
        frontmatter={str(k): compact(v) for k, v in frontmatter.items()},
        snippet=_snippet(tokens),
        links_out=tuple(_unique([*_body_links(tokens, path), *_memory_edges(frontmatter)])),
        links_in=tuple(_unique(backlinks)),
        word_count=len(body.split()),
        headings=tuple(headings),
    )


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    return str(value)
