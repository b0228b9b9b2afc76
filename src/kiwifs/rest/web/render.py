"""How the web pages show what the core returns: markdown, diffs, ages, URLs (presentation only).

File content is untrusted: markdown is rendered by markdown-it-py with raw HTML turned off (a
``<script>`` in a file is shown as text) and its link check (no ``javascript:``, ``vbscript:``,
``file:`` or non-image ``data:`` URLs). Links between knowledge files become links to their pages;
images from other sites are shown as links, so a page never fetches anything from outside.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from markupsafe import Markup, escape

from kiwifs.base.text import shown
from kiwifs.knowledge import marked_parts

EXTERNAL_REL = "noopener noreferrer nofollow"


def file_url(path: str, **query: str) -> str:
    """The web page of a file (each segment percent-encoded)."""
    url = "/file/" + url_path(path)
    return url + _query(query)


def raw_url(path: str) -> str:
    return "/raw/" + url_path(path)


def browse_url(folder: str) -> str:
    return "/browse/" + url_path(folder.strip("/"))


def diff_url(path: str, rev_from: str, rev_to: str) -> str:
    return "/diff/" + url_path(path) + _query({"from": rev_from, "to": rev_to})


def url_path(path: str) -> str:
    """``path`` percent-encoded for a URL, a name that is not UTF-8 first written by the name
    rule (:func:`~kiwifs.base.text.shown`: ``caf\\xe9.md``), the name the page reads it by."""
    return quote(shown(path), safe="/")


def _query(params: dict[str, str]) -> str:
    pairs = [f"{quote(k)}={quote(shown(v), safe='')}" for k, v in params.items() if v]
    return "?" + "&".join(pairs) if pairs else ""


@functools.cache
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("image", _render_image)
    return md


def markdown_html(body: str, path: str) -> Markup:
    """``body`` (markdown, without its frontmatter) as safe HTML; ``path`` is the file's own,
    against which relative links are resolved."""
    md = _markdown()
    tokens = md.parse(body, {"kiwifs_path": path})
    for token in tokens:
        for child in token.children or ():
            if child.type == "link_open":
                _rewrite_link(child, path)
    html = md.renderer.render(tokens, md.options, {"kiwifs_path": path})
    return Markup(html)  # noqa: S704 - markdown-it escaped every text and attribute itself


def _resolve(target: str, path: str) -> str | None:
    """A relative link target as a root-relative path, ``None`` when it leaves the root."""
    base = posixpath.dirname(path)
    joined = (
        posixpath.normpath(posixpath.join(base, target))
        if not target.startswith("/")
        else (posixpath.normpath(target.lstrip("/")))
    )
    if joined in (".", "") or joined.startswith("../") or joined == "..":
        return None
    return joined


def _rewrite_link(token: Token, path: str) -> None:
    href = str(token.attrGet("href") or "")
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        token.attrSet("rel", EXTERNAL_REL)
        return
    if not parts.path:
        return  # "#section": a link within the page
    resolved = _resolve(parts.path, path)
    if resolved is None:
        token.attrSet("href", "#")
        return
    target = file_url(resolved) if resolved.endswith(".md") else raw_url(resolved)
    token.attrSet("href", target + (f"#{parts.fragment}" if parts.fragment else ""))


def _render_image(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    """A local image from the root is shown; another site's becomes a link (nothing is fetched
    from outside)."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env)
    parts = urlsplit(src)
    if parts.scheme or parts.netloc:
        if parts.scheme == "data":
            return f'<img src="{escape(src)}" alt="{escape(alt)}">'
        label = alt or src
        return f'<a href="{escape(src)}" rel="{EXTERNAL_REL}">[image: {escape(label)}]</a>'
    resolved = _resolve(parts.path, str(env.get("kiwifs_path", "")))
    if resolved is None:
        return f"<span>[image: {escape(alt)}]</span>"
    return f'<img src="{escape(raw_url(resolved))}" alt="{escape(alt)}">'


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "meta", "hunk", "add", "del", "ctx"
    text: str


def diff_lines(text: str) -> list[DiffLine]:
    """A unified diff split into lines classified for colouring."""
    out: list[DiffLine] = []
    for line in text.splitlines():
        if line.startswith(("diff --git", "index ", "+++", "---", "new file", "deleted file")):
            kind = "meta"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append(DiffLine(kind, line))
    return out


def highlighted(snippet: str) -> Markup:
    """A search snippet as HTML: its highlights as ``<mark>``, every character of the file's
    text escaped (a snippet is a line of an untrusted file, frontmatter included)."""
    parts = (
        Markup("<mark>%s</mark>") % text if marked else escape(text)
        for text, marked in marked_parts(snippet)
    )
    return Markup("").join(parts)


def age_text(seconds: float) -> str:
    """``3 d 4 h``, ``5 h 12 min``, ``42 min``, ``just now``: two units at most."""
    s = int(seconds)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min"
    return "just now"


def value_text(value: Any) -> str:
    """A frontmatter value as one line of text (lists of scalars comma-separated)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(value_text(v) for v in value)
    if isinstance(value, list):
        return "\n".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return " · ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    return str(value)


def is_entries(value: Any) -> bool:
    """A list of mappings (``merged-from``, ``derived-from``): shown folded, one per line."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def percent(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"
