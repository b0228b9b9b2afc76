"""The consolidation picture over time: the memory rules folded commit by commit (pure).

:class:`CoverageState` holds, for one state of a root, each file's memory facts and the
``merged-from`` keys in force, and keeps two numbers current as files change: how many files are
episodic and how many of those no ``merged-from`` cites. A change re-examines only the episodes it
can affect (the changed files and the episodes whose id or path a changed file cites or cited), so
replaying a long history costs what its commits changed, not commits × files. The totals are the
ones :func:`kiwifs.memory.rules.build_report` gives for the same files (a test holds them equal).

:class:`TimelinePoint` is one day of the picture as the dashboard draws it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kiwifs.memory.rules import ID_TYPES, FileFacts, coverage_share, is_episodic

# The one empty set every file citing nothing shares (an empty frozenset is not shared by Python:
# two of them in each of a million files' entries took 430 MB).
_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Entry:
    episodic: bool
    eid: str  # stripped episode id, "" for none
    idents: frozenset[str]  # episode ids its merged-from covers
    paths: frozenset[str]  # paths its merged-from covers


def covered_idents(id_keys: Iterable[str]) -> frozenset[str]:
    """The episode ids that ``type:id`` keys cover (only the id types cover by id)."""
    if not id_keys:
        return _NONE
    out: set[str] = set()
    for key in id_keys:
        typ, sep, ident = key.partition(":")
        if sep and typ in ID_TYPES:
            out.add(ident)
    return frozenset(out) if out else _NONE


class CoverageState:
    """Episodic and unmerged counts of a changing set of files, for one episodes prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        # each file's entry; an episode citing nothing is kept as its id alone (the same string
        # as its key in ``_by_eid``): an entry object for each of a million took 64 MB more
        self._files: dict[str, _Entry | str] = {}
        self._id_cites: Counter[str] = Counter()
        self._path_cites: Counter[str] = Counter()
        # the episodes holding each id: one path, or a set of them when several share it (a set
        # for each of a million episodes took 216 MB)
        self._by_eid: dict[str, str | set[str]] = {}
        self.episodic = 0
        self.unmerged = 0

    def apply(self, changes: Iterable[tuple[str, FileFacts | None]]) -> None:
        """Apply one commit's changes: each path with its new facts, or ``None`` if removed."""
        staged = [(path, self._entry(path, facts)) for path, facts in changes]
        affected = self._affected(staged)
        before = self._tally(affected)
        for path, entry in staged:
            self._remove(path)
            if entry is not None:
                self._add(path, entry)
        after = self._tally(affected)
        self.episodic += after[0] - before[0]
        self.unmerged += after[1] - before[1]

    def _entry(self, path: str, facts: FileFacts | None) -> _Entry | None:
        if facts is None:
            return None
        episodic = not facts.unreadable and is_episodic(path, facts.memory_kind, self.prefix)
        return _Entry(
            episodic,
            facts.episode_id.strip(),
            covered_idents(facts.id_keys),
            frozenset(facts.path_keys) if facts.path_keys else _NONE,
        )

    def _affected(self, staged: list[tuple[str, _Entry | None]]) -> set[str]:
        """Every path whose contribution the staged changes may alter."""
        idents: set[str] = set()
        paths: set[str] = set()
        for path, entry in staged:
            paths.add(path)
            for item in (self._get(path), entry):
                if item is not None:
                    idents |= item.idents
                    paths |= item.paths
        for ident in idents:
            holders = self._by_eid.get(ident)
            if isinstance(holders, str):
                paths.add(holders)
            elif holders is not None:
                paths |= holders
        return paths

    def _tally(self, paths: Iterable[str]) -> tuple[int, int]:
        episodic = unmerged = 0
        for path in paths:
            entry = self._get(path)
            if entry is None or not entry.episodic:
                continue
            episodic += 1
            if not self._covered(path, entry):
                unmerged += 1
        return episodic, unmerged

    def _covered(self, path: str, entry: _Entry) -> bool:
        return (bool(entry.eid) and self._id_cites[entry.eid] > 0) or self._path_cites[path] > 0

    def _get(self, path: str) -> _Entry | None:
        entry = self._files.get(path)
        return _Entry(True, entry, _NONE, _NONE) if isinstance(entry, str) else entry

    def _remove(self, path: str) -> None:
        entry = self._get(path)
        if entry is None:
            return
        del self._files[path]
        if entry.idents:  # (most files cite nothing: no call for them)
            self._id_cites.subtract(entry.idents)
        if entry.paths:
            self._path_cites.subtract(entry.paths)
        if entry.episodic and entry.eid:
            holders = self._by_eid.get(entry.eid)
            if holders == path:
                del self._by_eid[entry.eid]
            elif isinstance(holders, set):
                holders.discard(path)
                if len(holders) == 1:
                    self._by_eid[entry.eid] = holders.pop()

    def _add(self, path: str, entry: _Entry) -> None:
        plain = entry.episodic and bool(entry.eid) and not entry.idents and not entry.paths
        self._files[path] = entry.eid if plain else entry
        if entry.idents:
            self._id_cites.update(entry.idents)
        if entry.paths:
            self._path_cites.update(entry.paths)
        if entry.episodic and entry.eid:
            holders = self._by_eid.setdefault(entry.eid, path)
            if isinstance(holders, set):
                holders.add(path)
            elif holders != path:
                self._by_eid[entry.eid] = {holders, path}


@dataclass(frozen=True)
class TimelinePoint:
    """The state at the end of one UTC day (its last commit): episodic and unmerged counts."""

    day: str  # YYYY-MM-DD
    episodic: int
    unmerged: int

    @property
    def merged(self) -> int:
        return self.episodic - self.unmerged

    @property
    def coverage(self) -> float:
        return coverage_share(self.episodic, self.unmerged)

    def to_json(self) -> dict[str, object]:
        return {
            "day": self.day,
            "episodic": self.episodic,
            "unmerged": self.unmerged,
            "coverage": round(self.coverage, 4),
        }
