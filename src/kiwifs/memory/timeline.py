"""The consolidation picture over time: the memory rules folded commit by commit.

:class:`CoverageState` holds, for one state of a root, each episode and the ``merged-from``
citations in force (in a private temporary database, not the index), and keeps two numbers
current as files change: how many files are episodic and how many of those no ``merged-from``
cites. A change re-examines only the episodes it can affect (the changed files and the episodes
whose id or path a changed file cites or cited), so replaying a long history costs what its
commits changed, not commits × files. The totals are the ones
:func:`kiwifs.memory.rules.build_report` gives for the same files (a test holds them equal).

:class:`TimelinePoint` is one day of the picture as the dashboard draws it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from kiwifs.memory.rules import ID_TYPES, FileFacts, coverage_share, is_episodic

CITES_ID = 0  # a ``cites`` row naming an episode id
CITES_PATH = 1  # a ``cites`` row naming a path

_SCHEMA = """
PRAGMA journal_mode = MEMORY;
PRAGMA synchronous = OFF;
PRAGMA cache_size = -8192;
CREATE TABLE episodes (path TEXT PRIMARY KEY, eid TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX episodes_eid ON episodes (eid);
CREATE TABLE cites (
    path TEXT NOT NULL, kind INTEGER NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (path, kind, target)
) WITHOUT ROWID;
CREATE INDEX cites_target ON cites (kind, target);
CREATE TABLE staged (path TEXT PRIMARY KEY, episodic INTEGER NOT NULL, eid TEXT NOT NULL)
    WITHOUT ROWID;
CREATE TABLE staged_cites (
    path TEXT NOT NULL, kind INTEGER NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (path, kind, target)
) WITHOUT ROWID;
CREATE TABLE affected (path TEXT PRIMARY KEY) WITHOUT ROWID;
"""

# (CROSS JOIN keeps SQLite's order, the small staged side first: without statistics it chose to
# scan every citation of a kind and probe the staged rows, 147 ms a one-file commit at 1M files)
# the changed files themselves
_AFFECTED_CHANGED = "INSERT OR IGNORE INTO affected SELECT path FROM staged"
# the paths their old and new merged-from cite
_AFFECTED_PATHS = f"""
INSERT OR IGNORE INTO affected
SELECT c.target FROM staged s CROSS JOIN cites c ON c.path = s.path AND c.kind = {CITES_PATH}
UNION SELECT target FROM staged_cites WHERE kind = {CITES_PATH}
"""
# the episodes holding an id their old or new merged-from cites
_AFFECTED_HOLDERS = f"""
INSERT OR IGNORE INTO affected
SELECT e.path FROM (
    SELECT c.target AS ident FROM staged s
    CROSS JOIN cites c ON c.path = s.path AND c.kind = {CITES_ID}
    UNION SELECT target FROM staged_cites WHERE kind = {CITES_ID}
) i CROSS JOIN episodes e ON e.eid = i.ident
"""
# the affected episodes and how many of them nothing covers
_TALLY = f"""
SELECT count(*), coalesce(sum(NOT (
    (e.eid <> '' AND EXISTS (SELECT 1 FROM cites c WHERE c.kind = {CITES_ID} AND c.target = e.eid))
    OR EXISTS (SELECT 1 FROM cites c WHERE c.kind = {CITES_PATH} AND c.target = e.path)
)), 0)
FROM affected a CROSS JOIN episodes e ON e.path = a.path
"""


def covered_idents(id_keys: Iterable[str]) -> frozenset[str]:
    """The episode ids that ``type:id`` keys cover (only the id types cover by id; an empty id
    covers nothing: no episode is matched by a missing id)."""
    out: set[str] = set()
    for key in id_keys:
        typ, sep, ident = key.partition(":")
        if sep and ident and typ in ID_TYPES:
            out.add(ident)
    return frozenset(out)


class CoverageState:
    """Episodic and unmerged counts of a changing set of files, for one episodes prefix.

    The state lives in a private temporary SQLite database (deleted when closed), not in Python
    objects: a server keeps it between replays, and a million files' paths, ids and citations
    took ~370 MB of its memory as dicts. SQLite holds a few MB of it in its page cache and the
    rest in a temporary file. Table ``episodes`` has each episodic file and its stripped id
    (``""`` for none); ``cites`` what each file's ``merged-from`` covers, an episode id (kind
    :data:`CITES_ID`) or a path (:data:`CITES_PATH`). An episode is covered when a row of
    ``cites`` names its id or its path.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.episodic = 0
        self.unmerged = 0
        # used by one thread at a time (the timeline's lock), not always by the one making it
        self._db = sqlite3.connect("", check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def apply(self, changes: Iterable[tuple[str, FileFacts | None]]) -> None:
        """Apply one commit's changes: each path with its new facts, or ``None`` if removed
        (a path given twice counts as its last change).

        Only the episodes the changes can affect are counted before and after: the changed
        files, the paths their old or new ``merged-from`` cites and the episodes holding an id
        it cites. A commit of one file costs a few indexed lookups, not a pass over the root.
        A change that fails part way leaves the state as it was.
        """
        db = self._db
        db.execute("BEGIN")
        try:
            self._stage(dict(changes))
            db.execute(_AFFECTED_CHANGED)
            db.execute(_AFFECTED_PATHS)
            db.execute(_AFFECTED_HOLDERS)
            before = db.execute(_TALLY).fetchone()
            db.execute("DELETE FROM episodes WHERE path IN (SELECT path FROM staged)")
            db.execute("DELETE FROM cites WHERE path IN (SELECT path FROM staged)")
            db.execute("INSERT INTO episodes SELECT path, eid FROM staged WHERE episodic")
            db.execute("INSERT INTO cites SELECT path, kind, target FROM staged_cites")
            after = db.execute(_TALLY).fetchone()
            for table in ("staged", "staged_cites", "affected"):
                db.execute(f"DELETE FROM {table}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self.episodic += after[0] - before[0]
        self.unmerged += after[1] - before[1]

    def _stage(self, changes: dict[str, FileFacts | None]) -> None:
        rows: list[tuple[str, int, str]] = []
        cites: list[tuple[str, int, str]] = []
        for path, facts in changes.items():
            if facts is None:
                rows.append((path, 0, ""))
                continue
            episodic = not facts.unreadable and is_episodic(path, facts.memory_kind, self.prefix)
            rows.append((path, int(episodic), facts.episode_id.strip()))
            cites.extend((path, CITES_ID, ident) for ident in covered_idents(facts.id_keys))
            cites.extend((path, CITES_PATH, cited) for cited in set(facts.path_keys))
        self._db.executemany("INSERT INTO staged VALUES (?, ?, ?)", rows)
        self._db.executemany("INSERT OR IGNORE INTO staged_cites VALUES (?, ?, ?)", cites)


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
