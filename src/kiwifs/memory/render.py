"""The memory report as text: the CLI's lines and the MCP tool's answer.

Kept apart from the rules so that the rules stay pure facts; both interfaces render from here so
the labels live in one place. The ``superseded`` line appears only when some episode was
forgotten, so a root that never forgets prints KiwiFS's text unchanged.
"""

from __future__ import annotations

from .brief import Brief
from .rules import MemoryReport

ALL_MERGED_CLI = "all episodic files are referenced by at least one merged-from list"
ALL_MERGED_MCP = "All episodic files are referenced by at least one merged-from list."


def render_cli(report: MemoryReport) -> str:
    """The CLI text, with KiwiFS's labels (warnings are printed separately, to stderr)."""
    lines = [
        f"episodic files:          {report.episodic_count}",
        f"merged-from references:  {report.merged_from_refs}",
    ]
    if report.superseded_count:
        lines.append(f"superseded (forgotten):  {report.superseded_count}")
    lines.append(f"unmerged (no merged-from): {report.unmerged_count}")
    if report.unmerged_count == 0:
        lines.append(ALL_MERGED_CLI)
    for e in report.unmerged:
        suffix = f"(episode_id={e.episode_id})" if e.episode_id else "(set episode_id)"
        lines.append(f"  - {e.path}  {suffix}")
    return "\n".join(lines) + "\n"


def render_mcp(report: MemoryReport) -> str:
    """The MCP tool text, with KiwiFS's labels (warnings inline)."""
    lines = [
        f"Episodic files:           {report.episodic_count}",
        f"merged-from references:   {report.merged_from_refs}",
    ]
    if report.superseded_count:
        lines.append(f"Superseded (forgotten):   {report.superseded_count}")
    lines.append(f"Unmerged (no merged-from): {report.unmerged_count}")
    for e in report.unmerged:
        lines.append(f"  - {e.path}" + (f"  episode_id={e.episode_id}" if e.episode_id else ""))
    lines.extend(f"warning: {w}" for w in report.warnings)
    if report.unmerged_count == 0:
        lines.append(ALL_MERGED_MCP)
    return "\n".join(lines) + "\n"


def render_brief(brief: Brief, read_hint: str = "read one by path if you need it") -> str:
    """A brief as text for a prompt: a header with the totals, each page under a ``===`` line
    with its path, score, token cost and ETag, then the manifest of pages left out."""
    if not brief.pages and not brief.left_out:
        return f"No pages match {brief.query!r}.\n"
    lines = [
        f"Brief for {brief.query!r}: {len(brief.pages)} page(s), {brief.total_tokens} of "
        f"{brief.budget_tokens} tokens, {len(brief.left_out)} left out."
    ]
    for page in brief.pages:
        lines.append("")
        lines.append(
            f"=== {page.path} (score: {page.score:.2f}, {page.tokens} tokens, "
            f"ETag: {page.etag}) ==="
        )
        lines.append(page.text.rstrip("\n"))
    if brief.left_out:
        lines.append("")
        lines.append(f"Left out ({read_hint}):")
        for out in brief.left_out:
            why = "over the token budget" if out.reason == "budget" else "past max_pages"
            lines.append(
                f"- {out.path} ({out.tokens} tokens, score: {out.score:.2f}): {out.reason} ({why})"
            )
    return "\n".join(lines) + "\n"
