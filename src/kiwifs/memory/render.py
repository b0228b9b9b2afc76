"""The memory answers as text: the report, recall (a brief, a hybrid search hit's lines), the
queue, the check and lineage, for the CLI and MCP.

Kept apart from the rules so that the rules stay pure facts; both interfaces render from here so
the labels live in one place. The ``superseded`` line appears only when some episode was
forgotten, so a root that never forgets prints KiwiFS's text unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kiwifs.memory.brief import Brief
from kiwifs.memory.check import Coverage, MemoryCheck
from kiwifs.memory.leases import Claim
from kiwifs.memory.lineage import Entry, Lineage
from kiwifs.memory.queue import ClaimBatch, Released
from kiwifs.memory.rules import EpisodicFile, MemoryReport, ReportText

ALL_MERGED_CLI = "all episodic files are referenced by at least one merged-from list"
ALL_MERGED_MCP = "All episodic files are referenced by at least one merged-from list."


def _claimed(e: EpisodicFile) -> str:
    return f"  [claimed by {e.claim.holder} until {e.claim.lease_expires}]" if e.claim else ""


def render_cli(report: MemoryReport) -> str:
    """The CLI text, with KiwiFS's labels (warnings are printed separately, to stderr)."""
    lines = [
        f"episodic files:          {report.episodic_count}",
        f"merged-from references:  {report.merged_from_refs}",
    ]
    if report.superseded_count:
        lines.append(f"superseded (forgotten):  {report.superseded_count}")
    lines.append(f"unmerged (no merged-from): {report.unmerged_count}")
    if report.claimed_count:
        lines.append(f"claimed (live lease):    {report.claimed_count}")
    if report.unmerged_count == 0:
        lines.append(ALL_MERGED_CLI)
    for e in report.unmerged:
        suffix = f"(episode_id={e.episode_id})" if e.episode_id else "(set episode_id)"
        lines.append(f"  - {e.path}  {suffix}{_claimed(e)}")
    return "\n".join(lines) + "\n"


def report_text(report: MemoryReport) -> ReportText:
    """The report as ``kiwifs memory report`` prints it: :func:`render_cli`, and the warnings
    for stderr (a million episodes can carry tens of thousands: one text, written at once)."""
    warnings = "".join(f"warning: {w}\n" for w in report.warnings)
    return ReportText(render_cli(report), warnings, report.unmerged_count)


def render_mcp(report: MemoryReport) -> str:
    """The MCP tool text, with KiwiFS's labels (warnings inline)."""
    lines = [
        f"Episodic files:           {report.episodic_count}",
        f"merged-from references:   {report.merged_from_refs}",
    ]
    if report.superseded_count:
        lines.append(f"Superseded (forgotten):   {report.superseded_count}")
    lines.append(f"Unmerged (no merged-from): {report.unmerged_count}")
    if report.claimed_count:
        lines.append(f"Claimed (live lease):     {report.claimed_count}")
    for e in report.unmerged:
        ident = f"  episode_id={e.episode_id}" if e.episode_id else ""
        lines.append(f"  - {e.path}{ident}{_claimed(e)}")
    lines.extend(f"warning: {w}" for w in report.warnings)
    if report.unmerged_count == 0:
        lines.append(ALL_MERGED_MCP)
    return "\n".join(lines) + "\n"


DROPPED = "Dropped for budget:"  # KiwiFS's manifest heading, which its clients look for
WHY_LEFT_OUT = {"budget": "over the token budget", "max_pages": "past max_pages"}


def render_brief(brief: Brief, read_hint: str = "read one by path if you need it") -> str:
    """A brief as text for a prompt, in the shape KiwiFS's clients parse.

    A header (``# Context pack: <query>``, the totals, and one ``- path (…)`` line per page with
    its token cost, score and ETag), then each page's text alone under a ``=== <path> ===`` line,
    then ``Dropped for budget:`` and one ``- <path> (…)`` line per page left out, saying why.
    The per-page facts sit in the header and the manifest so that a section holds the page's
    text and nothing else, and a ``=== path ===`` line holds the path and nothing else.
    """
    if not brief.pages and not brief.left_out:
        return f"No pages match {brief.query!r}.\n"
    lines = [
        f"# Context pack: {brief.query}",
        f"{brief.total_tokens} of {brief.budget_tokens} tokens used (1 token ~ 4 characters), "
        f"{len(brief.pages)} page(s), {len(brief.left_out)} left out.",
    ]
    lines += [
        f"- {p.path} ({p.tokens} tokens, score: {p.score:.2f}, ETag: {p.etag})" for p in brief.pages
    ]
    for page in brief.pages:
        lines += ["", f"=== {page.path} ===", page.text.rstrip("\n")]
    if brief.left_out:
        lines += ["", f"{DROPPED} {len(brief.left_out)} page(s) left out ({read_hint})"]
        lines += [
            f"- {out.path} ({out.tokens} tokens, score: {out.score:.2f}, ETag: {out.etag}): "
            f"{out.reason} ({WHY_LEFT_OUT[out.reason]})"
            for out in brief.left_out
        ]
    return "\n".join(lines) + "\n"


class RankedHit(Protocol):
    """A hybrid search hit as its lines read it (:class:`~kiwifs.knowledge.HybridHit`), by its
    shape, since the index that makes it sits above this package."""

    @property
    def path(self) -> str: ...

    @property
    def score(self) -> float: ...

    @property
    def match(self) -> str: ...

    @property
    def keyword_rank(self) -> int | None: ...

    @property
    def semantic_rank(self) -> int | None: ...


def hybrid_rank(hit: RankedHit) -> int:
    """The rank KiwiFS's line shows: the rank on the side that found the page, or for ``both``
    the better (smaller) of its two ranks."""
    return min(r for r in (hit.keyword_rank, hit.semantic_rank) if r)


def hybrid_line(number: int, hit: RankedHit) -> str:
    """KiwiFS's line, exactly, for clients that parse it: ``N. path (both, #1)``,
    ``(keyword only, #3)`` or ``(semantic only, #2)``; nothing after the parenthesis."""
    return f"{number}. {hit.path} ({hit.match}, #{hybrid_rank(hit)})"


def hybrid_detail(hit: RankedHit) -> str:
    """What the line leaves out, for the reader: each side's rank and the fused score."""
    sides = [
        f"{name} #{rank}"
        for name, rank in (("keyword", hit.keyword_rank), ("semantic", hit.semantic_rank))
        if rank
    ]
    return f"{', '.join(sides)}; score {hit.score:.4f}"


# ---------------------------------------------------------------------------------------------
# the queue


def render_batch(batch: ClaimBatch) -> str:
    """A claimed batch: one line per episode, its content below it when it was asked for."""
    if not batch.claimed:
        return f"nothing to claim: {batch.worker} holds no episode and none is free\n"
    n = len(batch.claimed)
    lines = [f"{batch.worker} holds {n} episode{'' if n == 1 else 's'} until {batch.lease_expires}"]
    for c in batch.claimed:
        ident = f"episode_id={c.episode_id}, " if c.episode_id else ""
        lines.append(f"  - {c.path}  ({ident}etag {c.etag})")
        if c.content is not None:
            lines.extend(["", c.content.rstrip("\n"), ""])
    return "\n".join(lines) + "\n"


def render_released(released: Released) -> str:
    n = len(released.paths)
    lines = [f"released {n} claim{'' if n == 1 else 's'} of {released.worker}"]
    lines += [f"  - {p}" for p in released.paths]
    return "\n".join(lines) + "\n"


def render_claims(claims: Sequence[Claim]) -> str:
    if not claims:
        return "No active claims.\n"
    lines = [f"{len(claims)} active claim(s):"]
    lines += [f"  - {c.path}: {c.holder} until {c.lease_expires}" for c in claims]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# check and lineage


def entry_text(entry: Entry) -> str:
    """A ``merged-from`` / ``derived-from`` entry on one line: ``type id path (date, actor)``."""
    what = " ".join(x for x in (entry.type or "(no type)", entry.id, entry.path) if x)
    extra = ", ".join(x for x in (entry.date, entry.actor) if x)
    note = f" \u2014 {entry.note}" if entry.note else ""
    return what + (f" ({extra})" if extra else "") + note


def age_text(seconds: int) -> str:
    days, rest = divmod(max(0, seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m"


def _coverage_lines(title: str, rows: Sequence[Coverage], undated: str) -> list[str]:
    lines = [f"{title}:"]
    for row in rows:
        share = 100.0 * row.merged / row.episodic if row.episodic else 100.0
        name = row.key if row.key is not None else undated
        lines.append(
            f"  {name or '(root)'}  {row.episodic} episodic, {row.merged} merged,"
            f" {row.unmerged} unmerged ({share:.1f}% merged)"
        )
    return lines if rows else [f"{title}: none"]


def render_check(check: MemoryCheck) -> str:
    """``memory check`` as text: figures, then each kind of problem, then coverage."""
    lines = [
        f"episodic files:          {check.episodic_count}",
        f"unmerged:                {check.unmerged_count}",
    ]
    if check.oldest is not None:
        data = check.oldest.to_json(check.now)
        lines.append(
            f"oldest unmerged:         {data['path']}, waiting {age_text(data['age_seconds'])}"
            f" (since {data['since']}, from {data['age_from']})"
        )
    lines.append(f"problems:                {check.problems}")
    lines.append(f"dangling merged-from entries: {len(check.dangling)}")
    lines += [f"  - {d.page}: {entry_text(d.entry)}: {d.why}" for d in check.dangling]
    lines.append(f"duplicate episode ids: {len(check.duplicate_ids)}")
    lines += [f"  - {d.id!r}: {', '.join(d.paths)}" for d in check.duplicate_ids]
    lines.append(f"double merges (an episode cited by several pages): {len(check.double_merges)}")
    lines += [f"  - {d.path}: {', '.join(d.pages)}" for d in check.double_merges]
    lines += _coverage_lines("coverage by folder", check.folders, "")
    lines += _coverage_lines("coverage by day (created)", check.days, "(no created)")
    return "\n".join(lines) + "\n"


def render_lineage(lineage: Lineage) -> str:
    """Both directions of a file's lineage."""
    kind = "episode" if lineage.episodic else "page"
    ident = f", episode_id={lineage.episode_id}" if lineage.episode_id else ""
    lines = [f"{lineage.path} ({kind}{ident})"]
    if lineage.episodic:
        lines.append(f"merged by: {len(lineage.merged_by) or 'no page yet'}")
        lines += [f"  - {c.page} (by {c.by}): {entry_text(c.entry)}" for c in lineage.merged_by]
    lines.append(f"merged from: {len(lineage.merged_from) or 'nothing'}")
    for c in lineage.merged_from:
        target = ", ".join(c.targets) if c.targets else f"DANGLING: {c.problem}"
        lines.append(f"  - {entry_text(c.entry)} -> {target}")
    lines.append(f"derived from: {len(lineage.derived_from) or 'nothing recorded'}")
    lines += [f"  - {entry_text(e)}" for e in lineage.derived_from]
    return "\n".join(lines) + "\n"
