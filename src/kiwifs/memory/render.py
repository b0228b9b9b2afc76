"""The memory report as text: the CLI's lines and the MCP tool's answer.

Kept apart from the rules so that the rules stay pure facts; both interfaces render from here so
the labels live in one place. The ``superseded`` line appears only when some episode was
forgotten, so a root that never forgets prints KiwiFS's text unchanged.
"""

from __future__ import annotations

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
