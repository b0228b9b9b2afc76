"""The consolidation queue's rules (pure): which episodes a claim hands out, and which claims a
merge runs into.

A worker claims a batch of unmerged episodes in report order; the episodes it already holds under
a live lease are renewed and count in its batch, so claiming again is how a worker extends its
lease. A merge that cites an episode is checked against every claim on that episode: another
holder's live claim refuses it, and so does the merging worker's own claim once it has expired
(the episode may be in someone else's hands by now). An entry cites a claimed episode by the
coverage rule: its id for the id types, or its path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.memory.leases import MEMORY, Claim, check_holder, format_seconds
from kiwifs.memory.rules import EpisodicFile, MergeEntry

if TYPE_CHECKING:  # lineage's rules load with the first merge that needs them
    from kiwifs.memory.lineage import Entry, Lookups

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
DEFAULT_LEASE = 600.0  # memory claims: 10 minutes
DEFAULT_LEASE_TEXT = format_seconds(DEFAULT_LEASE)  # the same, as the CLI and MCP show it
DEFAULT_FILE_LEASE = 1800.0  # generic claims: 30 minutes, as KiwiFS

HELD = "{path} is claimed by {holder} until {until}; only that worker may merge it"
EXPIRED = "the claim of {holder} on {path} expired at {until}; claim it again before merging"
MERGED = (
    "{path} is already merged into {pages}; merging it into {page} as well would merge it twice"
    " (force the merge if you mean it)"
)
DANGLING = (
    "{entry} cites nothing yet ({why}); memory check lists it as dangling until the episode exists"
)


@dataclass(frozen=True)
class Released:
    """What a release gave back, and whose claims they were: the holder as its claims name it
    (trimmed, as :func:`~kiwifs.memory.leases.check_holder` keeps it), whatever spaces were sent."""

    worker: str
    paths: list[str]

    @classmethod
    def of(cls, worker: str, paths: Sequence[str]) -> Released:
        return cls(check_holder(worker), list(paths))

    def to_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "released": self.paths}


@dataclass(frozen=True)
class ClaimedEpisode:
    """One episode of a claimed batch, with the ETag it had when handed out."""

    path: str
    episode_id: str
    etag: str
    lease_expires: str
    content: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "episode_id": self.episode_id,
            "etag": self.etag,
            "lease_expires": self.lease_expires,
        }
        if self.content is not None:
            out["content"] = self.content
        return out


@dataclass(frozen=True)
class ClaimBatch:
    """The answer to a memory claim: everything the worker now holds, renewed, in report order."""

    worker: str
    lease_expires: str
    claimed: tuple[ClaimedEpisode, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "lease_expires": self.lease_expires,
            "claimed": [c.to_json() for c in self.claimed],
        }


def fresh_episodes(
    head: Sequence[EpisodicFile], live: Mapping[str, Claim], wanted: int
) -> list[EpisodicFile]:
    """The first ``wanted`` episodes of ``head`` (the unmerged list's start) no live claim holds.

    ``head`` must be at least ``wanted + len(live)`` long when the queue is that long, so that
    enough free episodes are in it.
    """
    if wanted <= 0:
        return []
    return [e for e in head if e.path not in live][:wanted]


def renewable(live: Mapping[str, Claim], worker: str) -> list[Claim]:
    """The worker's live memory claims (a claim call renews them)."""
    return [c for c in live.values() if c.holder == worker and c.kind == MEMORY]


def entry_of(merge: MergeEntry) -> Entry:
    from kiwifs.memory.lineage import Entry

    return Entry(type=merge.type, id=merge.id, path=merge.path)


def cited_claims(entries: Iterable[MergeEntry], claims: Iterable[Claim]) -> list[Claim]:
    """The claims on episodes that ``entries`` cite (by id for the id types, or by path)."""
    from kiwifs.memory.lineage import cites

    wanted = [entry_of(e) for e in entries]
    return [c for c in claims if any(cites(e, c.path, c.episode_id) for e in wanted)]


def merge_refusal(claim: Claim, worker: str | None, now: float) -> str | None:
    """Why a merge by ``worker`` (``None``: no worker named) may not cite ``claim``'s episode."""
    if worker is not None and claim.holder == worker:
        if claim.live(now):
            return None
        return EXPIRED.format(holder=claim.holder, path=claim.path, until=claim.lease_expires)
    if claim.live(now):
        return HELD.format(path=claim.path, holder=claim.holder, until=claim.lease_expires)
    return None


# What a change to a path is, for the claims that hold it: a content write (PUT, append, bulk,
# restore, a merge into the page), a rename, a delete, a forget.
WRITE, RENAME, DELETE, FORGET = "change", "rename", "delete", "forget"
HOLDS = (
    "{path} is claimed by {holder} until {until}; only {holder} may {verb} it"
    " (until the claim is released or its lease ends)"
)


def change_refusal(claim: Claim, action: str, actor: str, now: float) -> str | None:
    """Why ``actor`` may not ``action`` the path ``claim`` holds, or ``None``.

    A live claim reserves its path for its holder: a file claim against every change by
    anyone else; a memory claim against a rename, a delete or a forget (the episode's identity
    and its place in the queue), not against edits of its text.
    """
    if not claim.live(now) or claim.holder == actor.strip():
        return None
    if action == WRITE and claim.kind == MEMORY:
        return None
    return HOLDS.format(
        path=claim.path, holder=claim.holder, until=claim.lease_expires, verb=action
    )


def released_by_merge(
    cited: Iterable[Claim], worker: str | None, now: float, force: bool = False
) -> list[str]:
    """Memory claims a successful merge ends: the worker's own, and expired ones; a forced
    merge ends every memory claim it cites (the episode is merged, its holder must learn it)."""
    return [
        c.path
        for c in cited
        if c.kind == MEMORY
        and (force or (worker is not None and c.holder == worker) or not c.live(now))
    ]


@dataclass(frozen=True)
class MergeFindings:
    """What a merge's entries run into besides claims: episodes other pages already merged
    (episode path → those pages), and warnings for the entries that cite nothing."""

    merged_elsewhere: dict[str, tuple[str, ...]]
    warnings: tuple[str, ...]


def merge_findings(
    page: str,
    entries: Iterable[MergeEntry],
    lookups: Lookups,
    merged_by: Callable[[str], tuple[str, ...] | None],
) -> MergeFindings:
    """Resolve ``entries`` (lineage's rule, as ``memory check`` does) for a merge into ``page``.

    ``merged_by(path)`` is every page whose ``merged-from`` cites the episode at ``path``
    (``None``: not an episode). An episode ``page`` already cites is not merged elsewhere by
    this merge, whatever else cites it: merging it again changes nothing.
    """
    from kiwifs.memory.lineage import resolve

    elsewhere: dict[str, tuple[str, ...]] = {}
    warnings: list[str] = []
    for merge in entries:
        found = resolve(entry_of(merge), lookups)
        if found.dangling:
            warnings.append(DANGLING.format(entry=_label(merge), why=found.problem))
        for target in found.targets:
            pages = merged_by(target)
            if pages and page not in pages:
                elsewhere[target] = pages
    return MergeFindings(elsewhere, tuple(warnings))


def merged_refusal(findings: MergeFindings, page: str) -> str | None:
    """Why a merge into ``page`` would merge an episode twice (the first such episode), or
    ``None``. A worker whose claim was lost to another worker's merge gets this answer too: it
    holds no claim any more, and the episode is covered elsewhere."""
    for path, pages in findings.merged_elsewhere.items():
        return MERGED.format(path=path, pages=", ".join(pages), page=page)
    return None


def _label(entry: MergeEntry) -> str:
    """An entry as a warning names it: ``episode run-7`` or ``episode path episodes/a.md``."""
    return f"{entry.type} {entry.id}" if entry.id else f"{entry.type} path {entry.path}"
