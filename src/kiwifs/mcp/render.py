"""The texts the MCP tools read and write, kept apart from the protocol plumbing.

Models read tool results as plain text, so these functions decide the exact wording (KiwiFS's
where KiwiFS gives it). Nothing here imports ``mcp``; every function is pure, which keeps
the formats testable without a server and the adapters in :mod:`kiwifs.mcp.server` short.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kiwifs.knowledge import marked_parts
from kiwifs.memory.render import hybrid_detail, hybrid_line

if TYPE_CHECKING:
    from kiwifs.knowledge import (
        Change,
        FileContent,
        HybridResults,
        MetaHit,
        MetaResults,
        SearchHit,
        SemanticResults,
        Task,
        TreeNode,
        Version,
    )

NOT_FOUND_FILE = "File not found at {path}. Use kiwi_tree to see available files."
NOT_FOUND_FOLDER = "Folder not found at {path}. Use kiwi_tree without a path to see the root."
NOT_MODIFIED = "File not modified (etag: {etag}). Content unchanged since your last read."


# ---------------------------------------------------------------------------------------------
# files


def render_read(file: FileContent, metadata_only: bool, frontmatter: Mapping[Any, Any]) -> str:
    """``[ETag: <etag>]`` then a blank line, then the content or the frontmatter as JSON."""
    if metadata_only:
        body = json.dumps(frontmatter, indent=2, ensure_ascii=False, default=str)
    else:
        body = file.text
    return f"[ETag: {file.etag}]\n\n{body}"


def human_size(size: int | None) -> str:
    """A file size the way the tree shows it: ``512 B``, ``1.5 KB``, ``2.0 MB``."""
    n = size or 0
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def render_tree(node: TreeNode) -> str:
    """Indented listing (two spaces a level): folders as ``name/``, files as ``name (size)``."""
    lines: list[str] = []

    def walk(children: Iterable[TreeNode], level: int) -> None:
        for child in children:
            pad = "  " * level
            if child.is_dir:
                lines.append(f"{pad}{child.name}/")
                walk(child.children, level + 1)
            else:
                lines.append(f"{pad}{child.name} ({human_size(child.size)})")

    walk(node.children, 0)
    return "\n".join(lines) if lines else "(empty)"


# ---------------------------------------------------------------------------------------------
# search and meta


def strip_marks(snippet: str) -> str:
    """Snippets carry ``<mark>`` highlights for the web UI; a model reads them as noise."""
    return " ".join("".join(text for text, _ in marked_parts(snippet)).split())


def render_search(
    hits: Sequence[SearchHit], limit: int, offset: int, path_prefix: str | None
) -> str:
    """Numbered hits; ``hits`` may hold one more than ``limit`` to tell that more exist."""
    if not hits:
        return f"No results found in {path_prefix}." if path_prefix else "No results found."
    shown = list(hits[:limit])
    lines: list[str] = []
    for number, hit in enumerate(shown, start=offset + 1):
        lines.append(f"{number}. {hit.path} (score: {hit.score:.2f})")
        snippet = strip_marks(hit.snippet or "")
        if snippet:
            lines.append(f"   {snippet}")
    if len(hits) > limit:
        end = offset + len(shown)
        lines.append("")
        lines.append(f"Showing {offset + 1}-{end}. Use offset={end} to see more.")
    return "\n".join(lines)


def render_semantic(found: SemanticResults) -> str:
    """KiwiFS's lines: ``N. path (score: 0.123)``, best first."""
    if not found.results:
        return "No results found."
    return "\n".join(
        f"{n}. {hit.path} (score: {hit.score:.3f})"
        for n, hit in enumerate(found.results, start=found.offset + 1)
    )


def render_hybrid(found: HybridResults) -> str:
    """Per page :func:`~kiwifs.memory.render.hybrid_line`, then indented its ranks and score,
    and its snippet."""
    lines: list[str] = []
    for n, hit in enumerate(found.results, start=found.offset + 1):
        lines += [hybrid_line(n, hit), f"   {hybrid_detail(hit)}"]
        snippet = strip_marks(hit.snippet or "")
        if snippet:
            lines.append(f"   {snippet}")
    if not lines:
        lines.append("No results found.")
    if not found.semantic:
        lines += ["", "Semantic search is not enabled: these are keyword results only."]
    return "\n".join(lines)


def _meta_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def render_meta(found: MetaResults) -> str:
    """``- <path>`` per file, then its frontmatter as ``  key: value`` lines, keys sorted.

    When the page is not the last, a final line says how to get the next one.
    """
    rows: Sequence[MetaHit] = found.results
    if not rows:
        return "No matching files found."
    lines: list[str] = []
    for row in rows:
        lines.append(f"- {row.path}")
        fm = row.frontmatter or {}
        for key in sorted(fm, key=str):
            lines.append(f"  {key}: {_meta_value(fm[key])}")
    end = found.offset + len(rows)
    if found.count > end:
        lines.append("")
        lines.append(
            f"Showing {found.offset + 1}-{end} of {found.count}. Use offset={end} to see more."
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# history


def render_changes(changes: Sequence[Change], since: str | None) -> str:
    """One line per commit (newest first) and ``last_seq:`` to pass as ``since`` next time."""
    if not changes:
        return f"No changes.\nlast_seq: {since or ''}".rstrip()
    lines = [
        f"{c.seq[:8]} {c.action} {c.path or '(several files)'} (by {c.actor} at {c.timestamp})"
        for c in changes
    ]
    lines.append(f"last_seq: {changes[0].seq}")
    return "\n".join(lines)


def render_versions(path: str, versions: Sequence[Version]) -> str:
    """The commits that touched ``path``, newest first."""
    if not versions:
        return f"No versions of {path} (the file has no committed history)."
    lines = [f"{len(versions)} version(s) of {path}, newest first:"]
    lines += [f"{v.hash[:8]} {v.date} by {v.author} \u2014 {v.message}" for v in versions]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# claims


def render_backlinks(path: str, sources: Sequence[tuple[str, int, bool]]) -> str:
    """KiwiFS's backlinks text: ``N pages link to P:`` and one ``  - src (n links)`` line a
    source (a superseded source marked), or ``No pages link to P.``"""
    if not sources:
        return f"No pages link to {path}."
    counts: dict[str, int] = {}
    superseded: set[str] = set()
    for source, count, retired in sources:  # one entry a source and kind: summed by source
        counts[source] = counts.get(source, 0) + count
        if retired:
            superseded.add(source)
    # KiwiFS's words exactly, "1 pages" and "(1 links)" included: clients match on them
    lines = [f"{len(counts)} pages link to {path}:"]
    for source, count in counts.items():
        mark = " [superseded]" if source in superseded else ""
        lines.append(f"  - {source} ({count} links){mark}")
    return "\n".join(lines)


def render_eligible(tasks: Sequence[Task]) -> str:
    """KiwiFS's list: ``N. [P<priority>] path — title``."""
    if not tasks:
        return "No eligible tasks found."
    lines = [f"Eligible tasks ({len(tasks)} found):", ""]
    for n, task in enumerate(tasks, start=1):
        priority = "" if task.priority is None else task.priority
        lines.append(f"{n}. [P{priority}] {task.path} — {task.title}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# graph navigation


def render_graph_path(source: str, target: str, path: Sequence[str], superseded: set[str]) -> str:
    """KiwiFS's path text: ``Shortest path from A to B (n hops):``, then the pages, each after
    the first led by an arrow (a superseded page marked)."""
    lines = [f"Shortest path from {source} to {target} ({len(path) - 1} hops):", ""]
    for i, page in enumerate(path):
        mark = " [superseded]" if page in superseded else ""
        arrow = "\u2192 " if i else ""
        lines.append(f"  {arrow}{page}{mark}")
    return "\n".join(lines)


def render_health(health: dict[str, Any]) -> str:
    """KiwiFS's health text: the counts, the quality score when the page has one, the issues
    (or ``Issues: none``), and (ours) a line when the page is superseded."""
    lines = [
        f"Health: {health['path']}",
        f"  Word count:       {health['word_count']}",
        f"  Link count:       {health['link_count']}",
        f"  Backlink count:   {health['backlink_count']}",
        f"  Days since update: {health['days_since_update']:.1f}",
    ]
    if health.get("quality_score") is not None:
        lines.append(f"  Quality score:    {health['quality_score']:.2f}")
    if health["issues"]:
        lines.append("  Issues:")
        lines += [f"    - {issue}" for issue in health["issues"]]
    else:
        lines.append("  Issues: none")
    if health.get("superseded"):
        lines.append("  Superseded:       yes")
    return "\n".join(lines)
