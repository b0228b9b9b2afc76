"""The consolidation picture of a root at a glance: counts, coverage per folder, the oldest
episode still waiting, the history per day, one page of the queue (pure data).

The index answers each part (:mod:`kiwifs.index.memory.overview`,
:mod:`kiwifs.index.memory.timeline`); the counts are the memory report's own totals, so the picture
and ``kiwifs memory report`` never disagree. Everything here is plain data with a ``to_json`` for
any interface that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiwifs.memory.check import Oldest
from kiwifs.memory.problems import CheckState
from kiwifs.memory.rules import EpisodicFile, coverage_share
from kiwifs.memory.timeline import TimelinePoint


@dataclass(frozen=True)
class FolderCoverage:
    """Episodes under one top-level folder of the episodes prefix (or outside it)."""

    folder: str  # e.g. ``episodes/2024/``; ``episodes/`` for files directly under the prefix
    episodic: int
    unmerged: int

    @property
    def merged(self) -> int:
        return self.episodic - self.unmerged

    @property
    def coverage(self) -> float:
        return coverage_share(self.episodic, self.unmerged)

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "episodic": self.episodic,
            "merged": self.merged,
            "unmerged": self.unmerged,
            "coverage": round(self.coverage, 4),
        }


@dataclass(frozen=True)
class Overview:
    """The dashboard's facts for one episodes prefix. The counts are the memory report's:
    ``episodic`` and ``unmerged`` are the sums over :attr:`folders`, which partition the same
    episodes the report counts.

    ``claimed`` is ``None`` until the root can answer it (a claims store); ``problems`` is the
    last stored ``memory check`` (``None`` for a prefix other than the configured one, which the
    check is not kept for). A viewer shows those parts only when they are not ``None``.
    """

    prefix: str
    episodic: int
    unmerged: int
    superseded: int
    folders: tuple[FolderCoverage, ...]
    oldest: Oldest | None
    timeline: tuple[TimelinePoint, ...]
    timeline_current: bool  # False while commits newer than the last point are being replayed
    computed_at: float
    claimed: int | None = None
    problems: CheckState | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def merged(self) -> int:
        return self.episodic - self.unmerged

    @property
    def coverage(self) -> float:
        return coverage_share(self.episodic, self.unmerged)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "episodes_prefix": self.prefix,
            "episodic_count": self.episodic,
            "merged_count": self.merged,
            "unmerged_count": self.unmerged,
            "superseded_count": self.superseded,
            "coverage": round(self.coverage, 4),
            "folders": [f.to_json() for f in self.folders],
            "oldest_unmerged": None
            if self.oldest is None
            else self.oldest.to_json(self.computed_at),
            "timeline": [p.to_json() for p in self.timeline],
            "timeline_current": self.timeline_current,
        }
        if self.claimed is not None:
            out["claimed_count"] = self.claimed
        if self.problems is not None:
            out["check"] = self.problems.to_json()
        return out


@dataclass(frozen=True)
class QueueItem:
    """One unmerged episode of the queue. ``claimed_by``/``lease_expires`` are set only once
    the root has a claims store and a live claim holds the episode."""

    episode: EpisodicFile
    claimed_by: str | None = None
    lease_expires: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = self.episode.to_json()
        if self.claimed_by is not None:
            out["claimed_by"] = self.claimed_by
            out["lease_expires"] = self.lease_expires
        return out


@dataclass(frozen=True)
class QueuePage:
    """One page of the unmerged episodes whose path starts with ``path_prefix``."""

    path_prefix: str
    items: tuple[QueueItem, ...]
    total: int
    limit: int
    offset: int

    @property
    def has_claims(self) -> bool:
        return any(i.claimed_by is not None for i in self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "path_prefix": self.path_prefix,
            "total": self.total,
            "limit": self.limit,
            "offset": self.offset,
            "unmerged": [i.to_json() for i in self.items],
        }
