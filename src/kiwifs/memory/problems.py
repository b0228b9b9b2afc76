"""The problems ``memory check`` finds, one row each, as a viewer lists them (pure data).

:class:`~kiwifs.memory.check.MemoryCheck` groups them by kind (dangling entries, duplicate ids,
double merges); a dashboard wants one flat list it can cache, count and page: each problem has a
kind, the file it is about (linked), a one-line message and the other files involved.
:func:`problems_of` is the one translation, so the list always has exactly
``MemoryCheck.problems`` rows, in the check's own order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from kiwifs.memory.check import EpisodeRow, MemoryCheck, PageRow, build_check
from kiwifs.memory.lineage import Entry

DANGLING = "dangling"  # a merged-from entry that cites nothing
DUPLICATE_ID = "duplicate id"  # one episode id on several episodes
DOUBLE_MERGE = "double merge"  # an episode cited by several pages


@dataclass(frozen=True)
class Problem:
    """One problem: ``path`` is the file to open first (the citing page of a dangling entry, the
    first episode holding a duplicate id, the episode merged twice); ``related`` the others."""

    kind: str
    path: str
    message: str
    related: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "message": self.message,
            "related": list(self.related),
        }


def problems_of(check: MemoryCheck) -> list[Problem]:
    """The check's problems as one list: dangling entries, then duplicate ids, then double
    merges, each in the check's order."""
    out = [
        Problem(DANGLING, d.page, f"merged-from entry ({cited(d.entry)}) cites nothing: {d.why}")
        for d in check.dangling
    ]
    out += [
        Problem(DUPLICATE_ID, d.paths[0], f"episode id {d.id!r} is on {n} episodes", d.paths[1:])
        for d in check.duplicate_ids
        if (n := len(d.paths))
    ]
    out += [
        Problem(DOUBLE_MERGE, d.path, f"merged by {len(d.pages)} pages", d.pages)
        for d in check.double_merges
    ]
    return out


def cited(entry: Entry) -> str:
    """What an entry names (type, id, path), without its date, actor and note."""
    return " ".join(x for x in (entry.type or "(no type)", entry.id, entry.path) if x)


def problems_in(
    prefix: str, episodes: list[EpisodeRow], pages: list[PageRow], existing: set[str]
) -> list[Problem]:
    """The problems of a root whose check rows are given (the oldest episode's first commit is
    not looked up: no problem depends on it)."""
    check = build_check(prefix, episodes, pages, existing.__contains__, lambda _: {}, 0.0)
    return problems_of(check)


@dataclass(frozen=True)
class CheckState:
    """The last background check as a dashboard shows it.

    ``computed_at`` is ``None`` while the first check has not finished; ``current`` is False when
    files changed after it (a new check is due or running). ``shown`` holds the first problems
    only (a broken root can have thousands); ``total`` counts them all.
    """

    computed_at: float | None
    total: int
    shown: tuple[Problem, ...]
    current: bool

    @property
    def ready(self) -> bool:
        return self.computed_at is not None

    def to_json(self) -> dict[str, Any]:
        when = None
        if self.computed_at is not None:
            stamp = dt.datetime.fromtimestamp(self.computed_at, dt.UTC)
            when = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "ready": self.ready,
            "computed_at": when,
            "current": self.current,
            "total": self.total,
            "shown": [p.to_json() for p in self.shown],
        }


NOT_YET = CheckState(computed_at=None, total=0, shown=(), current=False)
