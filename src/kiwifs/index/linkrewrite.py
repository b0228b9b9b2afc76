"""The links of one file rewritten after files moved (pure: no I/O).

A rename (of a file or of a folder) keeps the links to the moved files working: every link that
resolved to a moved file is made to name its new path, and a moved file's relative markdown
links are made relative to its new folder. What counts as a link, and how it resolves, is
:mod:`kiwifs.index.linkparse`'s rule; this module changes only the target text of the links it
finds there, byte for byte everything else:

* a ``[[wiki link]]`` that names a moved file by path gets the new path, in the form it had
  (with or without ``.md``, a leading ``/``), its ``#heading`` and ``|alias`` kept; one that
  names it by file name alone (``[[auth]]``) is left as it is while the name stays the same
  (it still resolves), and gets the new path when the name changed (``by_name``: only for the
  files the index says this source links to, so a name that resolves elsewhere is not touched);
* a relative markdown link to a ``.md`` file is recomputed from the source's new folder to the
  target's new path, unless its text still leads there (a folder moved whole keeps its inner
  links as written);
* frontmatter edges (the typed fields, ``superseded_by``, ``derived-from`` paths, ``merged-from``
  paths) that name a moved file get its new path; a ``merged-from`` path only when it names
  the file exactly as the memory report matches it (normalised, case and all), so a rename
  never changes which episodes the report counts as merged.

Links in code (fenced blocks, inline spans) are text and are never changed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from kiwifs.base.paths import normalize_ref_path
from kiwifs.frontmatter.edit import edit_frontmatter
from kiwifs.index.linkparse import (
    _SCHEME,
    MARKDOWN,
    WIKI,
    _page_fields,
    body_start,
    file_name,
    fold,
    prose_lines,
    valid_fields,
)
from kiwifs.memory.rules import MERGED_FROM

_MD = ".md"


@dataclass(frozen=True)
class Relocation:
    """Where the moved files went, as one source sees it.

    ``by_norm``: each moved file's old path, ASCII-lowercased (the link index's key), to its new
    path. ``by_name``: for the moved files this source links to whose file name changed, the
    old file name, lowercased, to the new path (a link by name alone follows the file only
    then). ``exact``: old path to new path as written, for ``merged-from``. ``hint``: text,
    lowercased, that a frontmatter naming a moved file must hold (the moved folder, or the
    moved file's name without ``.md``): a block without it is not parsed.
    """

    by_norm: Mapping[str, str]
    by_name: Mapping[str, str] = field(default_factory=dict)
    exact: Mapping[str, str] = field(default_factory=dict)
    hint: str = ""


def relocation(moves: Mapping[str, str], hint: str, linked: Iterable[str] = ()) -> Relocation:
    """The :class:`Relocation` of ``moves`` (old path to new path) for a source that links to
    the moved files ``linked`` (old paths); ``hint`` as :class:`Relocation` has it."""
    by_name = {
        fold(file_name(old)): moves[old]
        for old in linked
        if old in moves and fold(file_name(old)) != fold(file_name(moves[old]))
    }
    by_norm = {fold(old): new for old, new in moves.items()}
    return Relocation(by_norm, by_name, moves, fold(hint))


def rewrite_file(
    data: bytes,
    source: str,
    moved_to: str,
    where: Relocation,
    typed_fields: Iterable[str],
    frontmatter: bool = True,
) -> bytes:
    """``data`` of the file at ``source`` (to be at ``moved_to``, the same path when it stays)
    with its links to moved files, and its relative links, pointing where the files now are.

    Only a ``.md`` file has body links. ``frontmatter`` False skips the frontmatter edges (a
    moved file that links to no moved file: its edges are root-relative and still hold).
    Returns ``data`` itself when nothing changed. A frontmatter block that cannot be edited
    (invalid YAML) keeps its bytes; its body links are still rewritten.
    """
    if not source.lower().endswith(_MD):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    start = body_start(text)
    body = rewrite_body(text[start:], source, moved_to, where)
    out = data if body is None else (text[:start] + body).encode("utf-8")
    if frontmatter and start and where.hint in fold(text[:start]):
        try:
            out = edit_frontmatter(out, lambda doc: _rewrite_edges(doc, where, typed_fields))
        except Exception:  # noqa: BLE001 - an unreadable block is left as it is, not refused
            pass
    return out


def rewrite_body(body: str, source: str, moved_to: str, where: Relocation) -> str | None:
    """The body with its wiki and markdown links rewritten; ``None`` if nothing changed."""
    if "[[" not in body and "](" not in body:
        return None
    lines = body.split("\n")
    changed = False
    for i, line, prose in prose_lines(body):
        if "[[" not in prose and "](" not in prose:
            continue
        new = _rewrite_line(line, prose, source, moved_to, where)
        if new != line:
            lines[i] = new
            changed = True
    return "\n".join(lines) if changed else None


def _rewrite_line(line: str, prose: str, source: str, moved_to: str, where: Relocation) -> str:
    """``line`` with the links found in ``prose`` (the line, code spans blanked, same length)
    rewritten; spans are replaced from the end so earlier offsets hold."""
    edits: list[tuple[int, int, str]] = []
    for m in WIKI.finditer(prose):
        new = _wiki_target(m.group(1), where)
        if new is not None:
            edits.append((m.start(1), m.end(1), new))
    for m in MARKDOWN.finditer(prose):
        new = _markdown_href(m.group(1), source, moved_to, where)
        if new is not None:
            edits.append((m.start(1), m.end(1), new))
    for start, end, new in sorted(edits, reverse=True):
        line = line[:start] + new + line[end:]
    return line


def _wiki_target(raw: str, where: Relocation, by_name: bool = True) -> str | None:
    """The new text of a wiki-style target (``path#heading``), ``None`` to leave it: resolved
    by the parser's own rule (:func:`~kiwifs.index.linkparse._page_fields`)."""
    fields = _page_fields(raw, "wiki", by_name)
    if fields is None:
        return None
    norm, name = fields[3], fields[4]
    new = where.by_norm.get(norm) if norm is not None else None
    if new is None and name is not None:
        new = where.by_name.get(name)
    if new is None:
        return None
    target, hash_, heading = raw.partition("#")
    core = target.strip()
    shown = new if fold(core).endswith(_MD) else new.removesuffix(_MD)
    if core.startswith("/"):
        shown = "/" + shown
    lead = target[: len(target) - len(target.lstrip())]
    trail = target[len(target.rstrip()) :]
    return lead + shown + trail + hash_ + heading


def _markdown_href(href: str, source: str, moved_to: str, where: Relocation) -> str | None:
    """The new href of a relative markdown link to a ``.md`` file, ``None`` to leave it."""
    if _SCHEME.match(href) or href.startswith(("#", "//")):
        return None
    path_part, hash_, anchor = href.partition("#")
    raw_path, q, query = path_part.partition("?")
    target = unquote(raw_path)
    if not fold(target).endswith(_MD):
        return None
    rooted = target.startswith("/")
    joined = target.lstrip("/") if rooted else posixpath.join(posixpath.dirname(source), target)
    clean = posixpath.normpath(joined)
    if clean.startswith("..") or clean == ".":
        return None
    dest = where.by_norm.get(fold(clean), clean)
    if rooted:
        if dest == clean:
            return None
        new_path = "/" + dest
    else:
        here = posixpath.dirname(moved_to)
        if posixpath.normpath(posixpath.join(here, target)) == dest:
            return None  # still leads there from the new folder
        new_path = posixpath.relpath(dest, here or ".")
    if "%" in raw_path or " " in new_path:
        new_path = quote(new_path, safe="/!$&'()*+,;=:@-._~")
    return new_path + q + query + hash_ + anchor


# -- frontmatter edges ------------------------------------------------------------------------


def _rewrite_edges(doc: Any, where: Relocation, typed_fields: Iterable[str]) -> bool:
    """Rewrite the frontmatter edges of ``doc`` (a round-trip mapping) in place; whether any
    changed."""
    changed = False
    for key in (*valid_fields(typed_fields), "superseded_by"):
        if key in doc:
            changed |= _rewrite_values(doc, key, lambda v: _edge_target(v, where))
    derived = doc.get("derived-from")
    if isinstance(derived, list):
        for item in derived:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                changed |= _rewrite_values(
                    item, "path", lambda v: _wiki_target(v.strip(), where, by_name=False)
                )
    merged = doc.get(MERGED_FROM)
    items = merged if isinstance(merged, list) else [merged] if isinstance(merged, dict) else []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            changed |= _rewrite_values(item, "path", lambda v: _merged_path(v, where))
    return changed


def _rewrite_values(holder: Any, key: Any, new_of: Callable[[str], str | None]) -> bool:
    """Replace the strings at ``holder[key]`` (a string, or lists of them nested) by
    ``new_of(string)`` where that is not ``None``, keeping each scalar's style."""
    value = holder[key]
    if isinstance(value, str):
        new = new_of(value)
        if new is None or new == value:
            return False
        holder[key] = _same_style(value, new)
        return True
    if isinstance(value, list):
        return any([_rewrite_values(value, i, new_of) for i in range(len(value))])
    return False


def _same_style(old: str, new: str) -> str:
    """``new`` as a scalar of the same kind as ``old`` (quoted stays quoted)."""
    kind = type(old)
    return new if kind is str else kind(new)


_WRAPPED = re.compile(r"^(\s*\[\[)([^\]|]*)(\|[^\]]*)?(\]\]\s*)$")


def _edge_target(value: str, where: Relocation) -> str | None:
    """A typed field's or ``superseded_by``'s value, ``[[x|y]]``-wrapped or bare."""
    m = _WRAPPED.match(value)
    if m is not None:
        new = _wiki_target(m.group(2).strip(), where)
        return None if new is None else m.group(1) + new + (m.group(3) or "") + m.group(4)
    return _wiki_target(value.strip(), where)


def _merged_path(value: str, where: Relocation) -> str | None:
    """A ``merged-from`` path, rewritten only when it names a moved file exactly."""
    norm = normalize_ref_path(value)
    return where.exact.get(norm) if norm else None
