"""``memory check``: the integrity of consolidation, as pure rules over a root's facts.

What it finds (docs/memory.md):

* **dangling** ``merged-from`` entries: an entry that cites nothing, with why (no episode has that
  id, no file at that path, no type, …), by the lineage rule of :mod:`kiwifs.memory.lineage`;
* **duplicate episode ids**: one id on two or more episodes;
* **double merges**: an episode cited by more than one page (two consolidation jobs took it);
* the **oldest unmerged** episode and its age: from its ``created``, else the first commit that
  added it, else its modification time;
* **coverage** (episodic, merged, unmerged) per top-level folder under the episodes prefix and per
  day of ``created``.

Coverage is the memory report's own rule (:func:`kiwifs.memory.rules.file_facts`), and a forgotten
(superseded) episode is never unmerged, so the check's unmerged episodes are the report's. The
index and the plain scan both feed :func:`build_check` the same rows, which is what keeps their
answers identical.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiwifs.memory.lineage import Entry, Lookups, entries, resolve
from kiwifs.memory.rules import ID_TYPES, MERGED_FROM, as_id, file_facts

# Where an episode's age is taken from, in order of preference (the check's and the
# dashboard's one rule: :func:`_oldest` here, ``index/overview.oldest_unmerged`` in SQL).
AGE_FROM_CREATED = "created"  # its frontmatter ``created`` (RFC 3339, or a date)
AGE_FROM_COMMIT = "first commit"  # the first commit that added it
AGE_FROM_MTIME = "modified"  # the file's modification time (no usable date, no history)


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    """An episode as the check needs it: path, id (as the report reads it), its ``created`` and
    its modification time, both as POSIX seconds (``created`` is ``None`` when it has no usable
    one; the index keeps it parsed)."""

    path: str
    episode_id: str
    created: float | None = None
    mtime: float | None = None
    superseded: bool = False  # forgotten: needs no consolidation, so never unmerged


@dataclass(frozen=True)
class PageRow:
    """A file whose ``merged-from`` has entries, with that list as parsed (JSON-safe)."""

    path: str
    merged_from: list[Any]


@dataclass(frozen=True)
class DanglingRef:
    page: str
    entry: Entry
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"page": self.page, "entry": self.entry.to_json(), "why": self.why}


@dataclass(frozen=True)
class DuplicateId:
    id: str
    paths: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "paths": list(self.paths)}


@dataclass(frozen=True)
class DoubleMerge:
    path: str
    episode_id: str
    pages: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "episode_id": self.episode_id, "pages": list(self.pages)}


@dataclass(frozen=True)
class Oldest:
    """The unmerged episode waiting longest and the instant it entered the root (the check's
    and the dashboard's)."""

    path: str
    episode_id: str
    since: float  # POSIX seconds
    age_from: str  # one of the AGE_FROM_* values

    def age_seconds(self, now: float) -> float:
        return max(0.0, now - self.since)

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "path": self.path,
            "episode_id": self.episode_id,
            "since": dt.datetime.fromtimestamp(self.since, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "age_seconds": max(0, int(now - self.since)),
            "age_from": self.age_from,
        }


@dataclass(frozen=True)
class Coverage:
    """Episodes of one folder or one day: how many, how many merged."""

    key: str | None
    episodic: int
    unmerged: int

    @property
    def merged(self) -> int:
        return self.episodic - self.unmerged

    def to_json(self, name: str) -> dict[str, Any]:
        return {
            name: self.key,
            "episodic": self.episodic,
            "merged": self.merged,
            "unmerged": self.unmerged,
        }


@dataclass(frozen=True)
class MemoryCheck:
    """The answer of ``memory check``; ``problems`` counts what ``--fail-on-problems`` fails on."""

    prefix: str
    episodic_count: int
    unmerged_count: int
    dangling: tuple[DanglingRef, ...]
    duplicate_ids: tuple[DuplicateId, ...]
    double_merges: tuple[DoubleMerge, ...]
    oldest: Oldest | None
    folders: tuple[Coverage, ...]
    days: tuple[Coverage, ...]
    now: float

    @property
    def problems(self) -> int:
        return len(self.dangling) + len(self.duplicate_ids) + len(self.double_merges)

    def to_json(self) -> dict[str, Any]:
        return {
            "episodes_prefix": self.prefix,
            "episodic_count": self.episodic_count,
            "unmerged_count": self.unmerged_count,
            "problems": self.problems,
            "dangling": [d.to_json() for d in self.dangling],
            "duplicate_ids": [d.to_json() for d in self.duplicate_ids],
            "double_merges": [d.to_json() for d in self.double_merges],
            "oldest_unmerged": None if self.oldest is None else self.oldest.to_json(self.now),
            "coverage": {
                "folders": [f.to_json("folder") for f in self.folders],
                "days": [d.to_json("day") for d in self.days],
            },
        }


FirstAdded = Callable[[Sequence[str]], Mapping[str, float]]  # paths -> first commit time


def top_folder(path: str, prefix: str) -> str:
    """The coverage folder of an episode: ``<prefix><first segment>/`` under the prefix (the
    prefix itself for a file directly in it), else the path's own top-level folder (``""`` for
    a file at the root)."""
    if prefix and path.startswith(prefix):
        rest = path[len(prefix) :]
        head, sep, _ = rest.partition("/")
        return prefix + head + "/" if sep else prefix
    head, sep, _ = path.partition("/")
    return head + "/" if sep else ""


def _citations(pages: Sequence[PageRow]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Pages citing each episode id and each path, by the report's coverage rule."""
    by_id: dict[str, list[str]] = {}
    by_path: dict[str, list[str]] = {}
    for page in pages:
        facts = file_facts(page.path, {MERGED_FROM: page.merged_from})
        idents = {
            key[len(t) + 1 :] for key in facts.id_keys for t in ID_TYPES if key.startswith(t + ":")
        }
        for ident in idents:
            by_id.setdefault(ident, []).append(page.path)
        for cited in set(facts.path_keys):
            by_path.setdefault(cited, []).append(page.path)
    return by_id, by_path


def build_check(
    prefix: str,
    episodes: Sequence[EpisodeRow],
    pages: Sequence[PageRow],
    file_exists: Callable[[str], bool],
    first_added: FirstAdded,
    now: float,
) -> MemoryCheck:
    """The check of a root whose episodes (walk order, for ``prefix``) and citing pages (walk
    order) are given; ``file_exists`` answers for the paths entries cite, ``first_added`` dates
    episodes that have no ``created``."""
    by_id, by_path = _citations(pages)
    with_id: dict[str, list[str]] = {}
    for e in episodes:
        ident = e.episode_id.strip()
        if ident:
            with_id.setdefault(ident, []).append(e.path)
    unmerged: list[EpisodeRow] = []
    doubles: list[DoubleMerge] = []
    for e in episodes:
        ident = e.episode_id.strip()
        by_ident = by_id.get(ident) if ident else None
        by_its_path = by_path.get(e.path)
        if by_ident is None and by_its_path is None:
            if not e.superseded:
                unmerged.append(e)
            continue
        citing = dict.fromkeys(by_ident or ())
        citing.update(dict.fromkeys(by_its_path or ()))
        if len(citing) > 1:
            doubles.append(DoubleMerge(e.path, e.episode_id, tuple(citing)))
    lookups = Lookups(lambda ident: list(with_id.get(ident, [])), file_exists)
    dangling = [
        DanglingRef(page.path, entry, found.problem)
        for page in pages
        for item in page.merged_from
        if not _cites_a_known_id(item, with_id)
        for entry in entries({MERGED_FROM: [item]}, MERGED_FROM)
        if (found := resolve(entry, lookups)).dangling
    ]
    duplicates = [DuplicateId(i, tuple(p)) for i, p in with_id.items() if len(p) > 1]
    folders, days = _coverage(episodes, {e.path for e in unmerged}, prefix)
    return MemoryCheck(
        prefix=prefix,
        episodic_count=len(episodes),
        unmerged_count=len(unmerged),
        dangling=tuple(dangling),
        duplicate_ids=tuple(duplicates),
        double_merges=tuple(doubles),
        oldest=_oldest(unmerged, first_added),
        folders=folders,
        days=days,
        now=now,
    )


def _cites_a_known_id(item: Any, with_id: Mapping[str, list[str]]) -> bool:
    """The common case, decided without building the entry: an id-type entry whose id names an
    episode resolves to it, so it cannot be dangling (:func:`resolve` decides the rest)."""
    if not isinstance(item, dict):
        return False
    typ = item.get("type")
    if not isinstance(typ, str) or typ.strip().lower() not in ID_TYPES:
        return False
    return as_id(item.get("id")).strip() in with_id


def _oldest(unmerged: Sequence[EpisodeRow], first_added: FirstAdded) -> Oldest | None:
    """The unmerged episode that entered the root first (ties: walk order)."""
    best: tuple[float, int, Oldest] | None = None

    def consider(order: int, e: EpisodeRow, since: float, source: str) -> None:
        nonlocal best
        if best is None or (since, order) < best[:2]:
            best = (since, order, Oldest(e.path, e.episode_id, since, source))

    undated: list[tuple[int, EpisodeRow]] = []
    for order, e in enumerate(unmerged):
        if e.created is None:
            undated.append((order, e))
        else:
            consider(order, e, e.created, AGE_FROM_CREATED)
    if undated:
        added = first_added([e.path for _, e in undated])
        for order, e in undated:
            if e.path in added:
                consider(order, e, added[e.path], AGE_FROM_COMMIT)
            elif e.mtime is not None:
                consider(order, e, e.mtime, AGE_FROM_MTIME)
    return None if best is None else best[2]


def _coverage(
    episodes: Iterable[EpisodeRow], waiting: set[str], prefix: str
) -> tuple[tuple[Coverage, ...], tuple[Coverage, ...]]:
    """Counts per top-level folder and per UTC day of ``created``, each sorted by key (the
    undated day, ``None``, last). One pass; a day's name is computed once."""
    by_folder: dict[str, list[int]] = {}
    by_day: dict[int | None, list[int]] = {}
    folder_of: dict[str, str] = {}  # an episode's parent folder -> its coverage folder
    for e in episodes:
        late = e.path in waiting
        parent = e.path.rpartition("/")[0]
        folder = folder_of.get(parent)
        if folder is None:
            folder = folder_of[parent] = top_folder(e.path, prefix)
        pair = by_folder.setdefault(folder, [0, 0])
        pair[0] += 1
        pair[1] += late
        day = None if e.created is None else int(e.created // 86400)
        pair = by_day.setdefault(day, [0, 0])
        pair[0] += 1
        pair[1] += late
    folders = tuple(Coverage(k, n, u) for k, (n, u) in sorted(by_folder.items()))
    named = [(None if d is None else _day_name(d), n, u) for d, (n, u) in by_day.items()]
    named.sort(key=lambda row: (row[0] is None, row[0] or ""))
    return folders, tuple(Coverage(k, n, u) for k, n, u in named)


def _day_name(day: int) -> str:
    return dt.datetime.fromtimestamp(day * 86400, dt.UTC).strftime("%Y-%m-%d")
