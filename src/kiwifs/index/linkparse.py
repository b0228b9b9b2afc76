"""The links of one markdown file, parsed from its text and frontmatter (pure: no I/O).

A link is a ``[[wiki link]]`` (``|alias`` and ``#heading`` allowed), a relative markdown link
to a ``.md`` file (``[text](../x.md#h)``), or a frontmatter edge: the ``[links] typed_fields``
(``typed:<field>``, default ``contradicts``), ``superseded_by``, ``derived-from`` entries that
name a ``path``, and ``merged-from`` entries (by path, or by episode id). Code (fenced blocks
and inline spans) holds no link: a TOML ``[[table]]`` in a code block is text.

Each link is kept with the keys the index resolves it by at query time (:mod:`index.links`),
so a link to a page created later resolves as soon as the page's row exists, and one to a
deleted or renamed page is broken at once, with no row of the target to keep in step:

* ``norm``: the root-relative path it names, ASCII-lowercased, ``.md`` added to a wiki or
  typed target without it (a wiki link names a page);
* ``name``: for a wiki or typed target with no folder, its file name (``auth.md``): the
  target matches by path first, then by file name anywhere in the root, the first in walk
  order (KiwiFS's resolution: ``[[auth]]`` finds ``concepts/auth.md``);
* ``ident``: a ``merged-from`` entry's episode id, resolved to the file holding that id.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

from kiwifs.memory.rules import ID_TYPES

DEFAULT_TYPED_FIELDS = ("contradicts",)
_FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

WIKI = re.compile(r"!?\[\[([^\]\[|\n]+)(?:\|[^\]\n]*)?\]\]")
MARKDOWN = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"\n]*\")?\s*\)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# what makes a line matter to the links, each with its first character
_RELEVANT_TOKENS = (("[", "[["), ("]", "]("), ("`", "```"), ("~", "~~~"))
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a source file: the target as written, its kind, its heading anchor (``""``
    for none) and the resolution keys (see the module docstring)."""

    target: str
    kind: str
    heading: str = ""
    norm: str | None = None
    name: str | None = None
    ident: str | None = None


# A Link's fields as a tuple, in its order (what the index's rows are made from)
Fields = tuple[str, str, str, str | None, str | None, str | None]


def fold(text: str) -> str:
    """ASCII lowercase: the same fold as SQLite's ``lower()``, so keys made here and columns
    made in SQL compare equal (``str.lower`` on ASCII text, the common case: 4× faster)."""
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


def file_name(path: str) -> str:
    return path.rpartition("/")[2]


def valid_fields(fields: Iterable[str]) -> tuple[str, ...]:
    """The configured typed fields that are plain frontmatter keys (others are ignored)."""
    if isinstance(fields, tuple) and all(isinstance(f, str) for f in fields):
        return _known_fields(fields)  # a root's setting, asked once a file: worked out once
    return _field_names(fields)


def _field_names(fields: Iterable[Any]) -> tuple[str, ...]:
    return tuple(f for f in fields if isinstance(f, str) and _FIELD_NAME.fullmatch(f))


_known_fields = lru_cache(maxsize=64)(_field_names)


def parse_links(
    path: str,
    text: str,
    frontmatter: Mapping[str, Any],
    typed_fields: Iterable[str] = DEFAULT_TYPED_FIELDS,
    merged_ids: Iterable[str] = (),
    merged_paths: Iterable[str] = (),
) -> list[Link]:
    """Every link of the file at ``path`` (its whole ``text`` and parsed ``frontmatter``),
    duplicates dropped. ``merged_ids`` (``type:id`` keys) and ``merged_paths`` (normalised
    paths) are its ``merged-from`` entries as the memory rules read them, so the links and
    the report agree on what an entry cites. Only markdown files have body links."""
    found = link_fields(path, text, frontmatter, typed_fields, merged_ids, merged_paths)
    return [Link(*fields) for fields in found]


def link_fields(
    path: str,
    text: str,
    frontmatter: Mapping[str, Any],
    typed_fields: Iterable[str] = DEFAULT_TYPED_FIELDS,
    merged_ids: Iterable[str] = (),
    merged_paths: Iterable[str] = (),
) -> list[Fields]:
    """:func:`parse_links` as each link's fields (a :class:`Link` as a tuple: what the index
    stores, made without the objects)."""
    out: list[Fields] = []
    if path.lower().endswith(".md"):
        for line in _link_lines(_without_frontmatter(text)):
            if "[[" in line:
                for target in _wiki_targets(line):
                    link = _page_fields(target, "wiki")
                    if link is not None:
                        out.append(link)
            if "](" in line:
                for m in MARKDOWN.finditer(line):
                    link = _markdown_fields(path, m.group(1))
                    if link is not None:
                        out.append(link)
    for field in valid_fields(typed_fields):
        for value in _strings(frontmatter.get(field)):
            link = _page_fields(_unwrap(value), "typed:" + field)
            if link is not None:
                out.append(link)
    for value in _strings(frontmatter.get("superseded_by")):
        link = _page_fields(_unwrap(value), "superseded-by")
        if link is not None:
            out.append(link)
    derived = frontmatter.get("derived-from")
    if isinstance(derived, list):
        for item in derived:
            cited = item.get("path") if isinstance(item, dict) else None
            if isinstance(cited, str) and cited.strip():
                link = _page_fields(cited.strip(), "derived-from", by_name=False)
                if link is not None:
                    out.append(link)
    for key in merged_ids:
        typ, _, ident = key.partition(":")
        if typ in ID_TYPES and ident:
            out.append((key, "merged-from", "", None, None, ident))
    for cited in merged_paths:
        out.append((cited, "merged-from", "", fold(cited), None, None))
    return list(dict.fromkeys(out))


def _wiki_targets(text: str) -> list[str]:
    """The targets of ``WIKI.finditer(text)``, found by jumping from ``[[`` to ``[[`` (the
    regex alone tries every position: its ``!?`` leaves it no literal to search for)."""
    out: list[str] = []
    i = text.find("[[")
    while i >= 0:
        m = WIKI.match(text, i - 1 if i and text[i - 1] == "!" else i)
        if m is None:
            i = text.find("[[", i + 1)
        else:
            out.append(m.group(1))
            i = text.find("[[", m.end())
    return out


def _page_link(raw: str, kind: str, by_name: bool = True) -> Link | None:
    """A wiki-style target (``path``, ``path#heading``): resolved by path, then by name."""
    fields = _page_fields(raw, kind, by_name)
    return None if fields is None else Link(*fields)


def _page_fields(raw: str, kind: str, by_name: bool = True) -> Fields | None:
    target, _, heading = raw.partition("#")
    target, heading = target.strip(), heading.strip()
    if not target:
        return None  # a link to a heading of the same page
    clean = target.lstrip("/")
    if not clean or "//" in clean or "/." in clean or clean[0] == "." or clean[-1] == "/":
        clean = posixpath.normpath(clean)  # else it is its own normal form: the common case
        if clean.startswith("..") or clean == ".":
            return (target, kind, heading, None, None, None)  # outside the root: never resolves
    norm = fold(clean)
    if not norm.endswith(".md"):
        norm += ".md"
    name = norm if by_name and "/" not in norm else None
    return (target, kind, heading, norm, name, None)


def _markdown_link(source: str, href: str) -> Link | None:
    """A relative markdown link to a ``.md`` file, resolved against the source's folder."""
    fields = _markdown_fields(source, href)
    return None if fields is None else Link(*fields)


def _markdown_fields(source: str, href: str) -> Fields | None:
    if _SCHEME.match(href) or href.startswith(("#", "//")):
        return None
    target, _, heading = href.partition("#")
    target = unquote(target.partition("?")[0])
    if not fold(target).endswith(".md"):
        return None
    if target.startswith("/"):
        joined = target.lstrip("/")
    else:
        joined = posixpath.join(posixpath.dirname(source), target)
    clean = posixpath.normpath(joined)
    if clean.startswith("..") or clean == ".":
        return (href.partition("#")[0], "markdown", unquote(heading), None, None, None)
    return (href.partition("#")[0], "markdown", unquote(heading), fold(clean), None, None)


def _unwrap(value: str) -> str:
    """A frontmatter value as a target: ``[[x|y]]`` is ``x``."""
    value = value.strip()
    if value.startswith("[[") and value.endswith("]]"):
        value = value[2:-2].partition("|")[0].strip()
    return value


def _strings(value: Any) -> list[str]:
    """The strings of a frontmatter value, nested lists flattened (YAML reads ``[[x]]`` as a
    list in a list)."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _without_frontmatter(text: str) -> str:
    return text[body_start(text) :]


def body_start(text: str) -> int:
    """Where the body of ``text`` starts: after its frontmatter block, if it has one."""
    if not text.startswith("---"):
        return 0
    end = text.find("\n---", 3)
    if end < 0:
        return 0
    after = text.find("\n", end + 4)
    return len(text) if after < 0 else after + 1


def _link_lines(body: str) -> list[str]:
    """The lines of :func:`prose_lines` that may hold a link (a ``[[`` or a ``](``), in order,
    found without splitting the body: only a line holding an opener or three backticks or
    tildes (a fence opens and closes on such a line) can matter, and the fences are followed
    over those lines alone."""
    if "[" not in body and "]" not in body:
        return []  # no opener: no link, whatever the fences (most episodes)
    out: list[str] = []
    fence = ""
    for start in _relevant_starts(body):
        end = body.find("\n", start)
        line = body[start:] if end < 0 else body[start:end]
        if fence:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = ""
            continue
        if "```" in line or "~~~" in line:
            f = _FENCE.match(line)
            if f is not None and not (f.group(1)[0] == "`" and "`" in f.group(2)):
                fence = f.group(1)
                continue
        if "`" in line:
            line = _blank_code_spans(line)
        if "[[" in line or "](" in line:
            out.append(line)
    return out


def _relevant_starts(body: str) -> list[int]:
    """Where each line holding a ``[[``, a ``](``, or three backticks or tildes starts, in
    order, a line once. Each token is looked for by its first character: ``str.find`` of one
    character is a ``memchr``, twenty times faster on a page than a search for two or three
    (and a regex alternation of the four tokens, tried at each position, slower still)."""
    starts: set[int] = set()
    for first, token in _RELEVANT_TOKENS:
        at = body.find(first)
        while at >= 0:
            if body.startswith(token, at):
                starts.add(body.rfind("\n", 0, at) + 1)
                end = body.find("\n", at)
                if end < 0:
                    break
                at = body.find(first, end + 1)
            else:
                at = body.find(first, at + 1)
    return sorted(starts)


def prose_lines(body: str) -> Iterator[tuple[int, str, str]]:
    """Each line of ``body`` outside fenced code blocks: its number, the line, and the line
    with its inline code spans blanked (same length, so a match's offsets hold in both). The
    plain rule :func:`_link_lines` finds faster; a link rewrite edits the lines it names."""
    fence = ""
    for i, line in enumerate(body.split("\n")):
        if fence:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = ""
            continue
        m = _FENCE.match(line)
        if m is not None and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
            continue
        yield i, line, _blank_code_spans(line) if "`" in line else line


def _blank_code_spans(line: str) -> str:
    """``line`` with every inline code span (a run of n backticks to the next run of exactly
    n) replaced by spaces."""
    out = list(line)
    i, n = 0, len(line)
    while i < n:
        if line[i] != "`":
            i += 1
            continue
        start = i
        while i < n and line[i] == "`":
            i += 1
        run = i - start
        j = i
        close = -1
        while j < n:
            if line[j] != "`":
                j += 1
                continue
            k = j
            while k < n and line[k] == "`":
                k += 1
            if k - j == run:
                close = k
                break
            j = k
        if close < 0:
            continue
        for x in range(start, close):
            out[x] = " "
        i = close
    return "".join(out)
