"""The consolidation history of a root, replayed from git once and kept in the index database.

Table ``timeline`` holds one row per commit of HEAD's first-parent line (keyed by commit id) with
the episodic and unmerged counts right after it; ``timeline_added`` the first commit time of every
knowledge file, by a hash of its path (an episode's age when it has no ``created``).
:meth:`Timeline.refresh` replays only the commits the table does not hold yet: it walks back from
HEAD to the newest known commit and folds each newer commit's changed files into a
:class:`~kiwifs.memory.timeline.CoverageState`.

A file's facts at a commit are the index row's when the row holds the same blob (the usual case:
git's copy is the file on disk), else the blob is read from git and parsed with the scan's fast
path. History rewritten under the table (a reset, an amended commit) is detected by the walk and
the rows that left the line are dropped. The table is derived, like the rest of the index: a
different episodes prefix clears it, and deleting the database rebuilds it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import operator
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from kiwifs.base.limits import MAX_READ_BYTES, TOO_LARGE
from kiwifs.git.replay import BlobChange, CommitInfo, GitHistory
from kiwifs.index.background import BackgroundLoop
from kiwifs.index.core import Index
from kiwifs.index.record import path_key, py_text, stored_keys
from kiwifs.index.schema import TIMELINE_TABLES, added_hash
from kiwifs.memory.rules import FileFacts, unreadable_facts
from kiwifs.memory.scan import facts_of_bytes
from kiwifs.memory.timeline import CoverageState, TimelinePoint
from kiwifs.tuning import Tuning

log = logging.getLogger(__name__)

MAX_DAYS = 366  # points the dashboard draws (the most recent days)
FLUSH_EVERY = 1000  # commits replayed per transaction
LOOKUP_CHUNK = 500
# files of a tree read into a coverage state at a time: all of a million files' changes and facts
# at once took ~1 GB more memory than the state they made (which a server then kept)
STATE_CHUNK = 10_000
# ``timeline_added`` rows held before they are stored: a commit of a million files made as many
# (~120 MB of tuples); stored a batch at a time in hash order, the table took no more room
ADDED_BATCH = 50_000
QUIET_SECONDS = 1.0

FACT_COLUMNS = "key, etag, memory_kind, episode_id, id_keys, path_keys, unreadable"


def day_of(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).date().isoformat()


class Timeline:
    """Replays the history of one root into its index database; one replay at a time."""

    def __init__(
        self, root: Path, index: Callable[[], Index], tuning: Tuning | None = None
    ) -> None:
        self.root = Path(root)
        self._index = index
        tuned = tuning or Tuning()
        self._history = GitHistory(self.root, tuned.timeline_known, tuned.timeline_by_folder)
        self._lock = threading.Lock()
        self._state: CoverageState | None = None
        self._state_commit: str | None = None

    def close(self) -> None:
        with self._lock:
            self._history.close()
            self._drop_state()

    def _drop_state(self) -> None:
        if self._state is not None:
            self._state.close()
        self._state = None
        self._state_commit = None

    def head(self) -> str | None:
        return self._history.head()

    def index(self) -> Index:
        """The index database the history is replayed into."""
        return self._index()

    def points(self, limit: int = MAX_DAYS) -> list[TimelinePoint]:
        with self._index().reader() as conn:
            return points(conn, limit)

    # -- replay -----------------------------------------------------------------------------

    def refresh(self, prefix: str, stop: Callable[[], bool] = lambda: False) -> int:
        """Replay the commits newer than the table's newest; returns how many were replayed.

        ``stop`` is asked between commits: a server shutting down does not wait for a long
        first replay (what was replayed is kept; the rest is replayed next time).
        """
        with self._lock:
            head = self._history.head()
            if head is None:
                return 0
            index = self._index()
            self._check_prefix(index, prefix)
            with index.reader() as conn:
                newer, base = self._history.first_parents(lambda c: _known(conn, c), head)
            if not newer:
                return 0
            self._cut_after(index, base)
            state = self._state_at(index, base, prefix, stop)
            if state is None:
                return 0
            newer.reverse()
            done = 0
            for start in range(0, len(newer), FLUSH_EVERY):
                done += self._replay(index, state, newer[start : start + FLUSH_EVERY], stop)
                if stop():
                    break
            return done

    def _check_prefix(self, index: Index, prefix: str) -> None:
        with index.reader() as conn:
            if replayed_prefix(conn) == prefix:
                return
        with index.transaction() as conn:
            for table in TIMELINE_TABLES:
                conn.execute(f"DELETE FROM {table}")
            conn.execute("INSERT INTO timeline_meta (key, value) VALUES ('prefix', ?)", (prefix,))
        self._drop_state()

    def _cut_after(self, index: Index, base: str | None) -> None:
        """Drop the rows newer than ``base`` (commits no longer on HEAD's line)."""
        with index.transaction() as conn:
            if base is None:
                conn.execute("DELETE FROM timeline")
                conn.execute("DELETE FROM timeline_added")
                return
            (seq,) = conn.execute(
                "SELECT seq FROM timeline WHERE commit_id = ?", (base,)
            ).fetchone()
            conn.execute("DELETE FROM timeline WHERE seq > ?", (seq,))

    def _state_at(
        self, index: Index, commit: str | None, prefix: str, stop: Callable[[], bool]
    ) -> CoverageState | None:
        """The coverage state right after ``commit``: kept from the last replay when it ended
        there, else made from that commit's tree (``None``: ``stop()`` said so between chunks;
        at a million files the tree takes a minute, which a server stopping would wait for)."""
        if self._state is not None and self._state_commit == commit and commit is not None:
            return self._state
        self._drop_state()
        state = CoverageState(prefix)
        try:
            if commit is not None:
                for chunk in _chunks(BlobChange(p, b) for p, b in self._history.files(commit)):
                    if stop():
                        state.close()
                        return None
                    state.apply(self._facts(index, chunk))
        except BaseException:
            state.close()
            raise
        self._state, self._state_commit = state, commit
        return state

    def _replay(
        self,
        index: Index,
        state: CoverageState,
        commits: list[CommitInfo],
        stop: Callable[[], bool],
    ) -> int:
        """Replay ``commits`` (oldest first) and store their rows; returns how many.

        A commit's changes are applied :data:`STATE_CHUNK` at a time (the totals after the last
        chunk are the commit's): an import of a million files in one commit read all their facts
        at once, and the memory freed after it stayed with the server. A replay that fails part
        way through a commit leaves some of its changes applied, the state still marked as its
        parent's; the next replay applies that commit again, and as every change sets a file to
        what the commit holds, the state comes out the same.
        """
        rows: list[tuple[str, int, str, int, int]] = []
        added: list[tuple[int, int]] = []
        for commit in commits:
            if stop():
                break
            if not self._apply(index, state, commit, added, stop):
                break  # stopped inside the commit: the next replay applies it again
            rows.append(
                (commit.id, commit.time, day_of(commit.time), state.episodic, state.unmerged)
            )
            self._state_commit = commit.id
        with index.transaction() as conn:
            conn.executemany(
                "INSERT INTO timeline (commit_id, time, day, episodic, unmerged)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            _store_added(conn, added)
        return len(rows)

    def _apply(
        self,
        index: Index,
        state: CoverageState,
        commit: CommitInfo,
        added: list[tuple[int, int]],
        stop: Callable[[], bool],
    ) -> bool:
        """Apply ``commit``'s changes a chunk at a time; False when ``stop()`` cut it short."""
        for chunk in _chunks(self._changes(commit)):
            if stop():
                return False
            state.apply(self._facts(index, chunk))
            added.extend(_added(chunk, commit.time))
            if len(added) >= ADDED_BATCH:
                with index.transaction() as conn:
                    _store_added(conn, added)
        return True

    def _changes(self, commit: CommitInfo) -> Iterable[BlobChange]:
        """The files ``commit`` changed; a first commit's read from its tree as they are used."""
        if commit.parent is None:
            return (BlobChange(p, b) for p, b in self._history.files(commit.id))
        return self._history.changes(commit.id, commit.parent)

    def _facts(
        self, index: Index, changes: Iterable[BlobChange]
    ) -> list[tuple[str, FileFacts | None]]:
        """Each change's facts: the index row's when it holds that blob, else the blob's."""
        changes = list(changes)
        stored: dict[bytes, tuple[str, FileFacts]] = {}
        named = [path_key(c.path) if c.blob is not None else None for c in changes]
        keys = [k for k in named if k is not None]
        with index.reader() as conn:
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT {FACT_COLUMNS} FROM files WHERE key IN ({marks})"
                for key, etag, kind, eid, ids, paths, unreadable in conn.execute(sql, chunk):
                    facts = FileFacts(
                        path="",
                        memory_kind=py_text(kind),
                        episode_id=py_text(eid),
                        id_keys=stored_keys(ids),
                        path_keys=stored_keys(paths),
                        unreadable=bool(unreadable),
                    )
                    stored[key] = (etag, facts)
        out: list[tuple[str, FileFacts | None]] = []
        for change, key in zip(changes, named, strict=True):
            if change.blob is None:
                out.append((change.path, None))
                continue
            hit = stored.get(key) if key is not None else None
            if hit is not None and hit[0] == change.blob:
                out.append((change.path, hit[1]))
            else:
                out.append((change.path, self._blob_facts(change.path, change.blob)))
        return out

    def _blob_facts(self, path: str, blob: str) -> FileFacts:
        """The facts of a committed blob, read from git; one over the size limit is never read
        (its size is in the object's header) and counts as the index counts the file: an
        unreadable one, not an episode."""
        if self._history.blob_size(blob) > MAX_READ_BYTES:
            return unreadable_facts(path, TOO_LARGE)
        return facts_of_bytes(path, self._history.blob(blob))


def _chunks(changes: Iterable[BlobChange]) -> Iterator[list[BlobChange]]:
    items = iter(changes)
    while chunk := list(itertools.islice(items, STATE_CHUNK)):
        yield chunk


def _store_added(conn: sqlite3.Connection, added: list[tuple[int, int]]) -> None:
    """Store ``timeline_added`` rows (the first stored for a file is kept) and empty the list.

    In row id order, so the rows are appended and the table's pages filled (hashes in commit
    order split them half empty); a stable sort, so the first kept is the first commit's. A
    later batch holds later commits: the first commit's row is still the one kept."""
    added.sort(key=operator.itemgetter(0))
    conn.executemany("INSERT OR IGNORE INTO timeline_added (h, time) VALUES (?, ?)", added)
    added.clear()


def _added(changes: Iterable[BlobChange], time: int) -> Iterable[tuple[int, int]]:
    """The ``timeline_added`` rows of a commit's changes: a file written has been added by
    then (the table keeps the first)."""
    for change in changes:
        if change.blob is not None and (key := path_key(change.path)) is not None:
            yield added_hash(key), time


def points(conn: sqlite3.Connection, limit: int = MAX_DAYS) -> list[TimelinePoint]:
    """One point per day (its last commit), oldest first, the most recent ``limit`` days."""
    sql = (
        "SELECT t.day, t.episodic, t.unmerged FROM timeline t JOIN (SELECT max(seq) AS s"
        " FROM timeline GROUP BY day ORDER BY day DESC LIMIT ?) d ON t.seq = d.s"
        " ORDER BY t.day"
    )
    return [TimelinePoint(d, e, u) for d, e, u in conn.execute(sql, (limit,))]


def replayed_prefix(conn: sqlite3.Connection) -> str | None:
    """The episodes prefix the table was replayed for (``None``: never replayed)."""
    row = conn.execute("SELECT value FROM timeline_meta WHERE key = 'prefix'").fetchone()
    return None if row is None else str(row[0])


def first_added(conn: sqlite3.Connection, paths: Iterable[str]) -> dict[str, float]:
    """When each of ``paths`` was first committed, from ``timeline_added`` (as far as the table
    is replayed); paths it does not hold are left out."""
    hashes: dict[int, str] = {}
    for path in paths:
        key = path_key(path)
        if key is not None:
            hashes[added_hash(key)] = path
    return {hashes[h]: float(time) for h, time in added_times(conn, list(hashes)).items()}


def added_times(conn: sqlite3.Connection, hashes: list[int]) -> dict[int, int]:
    """The first commit times the table holds for these key hashes (:func:`added_hash`)."""
    found: dict[int, int] = {}
    for start in range(0, len(hashes), LOOKUP_CHUNK):
        chunk = hashes[start : start + LOOKUP_CHUNK]
        sql = f"SELECT h, time FROM timeline_added WHERE h IN ({','.join('?' * len(chunk))})"
        found.update(conn.execute(sql, chunk).fetchall())
    return found


def last_commit(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT commit_id FROM timeline ORDER BY seq DESC LIMIT 1").fetchone()
    return None if row is None else str(row[0])


def _known(conn: sqlite3.Connection, commit: str) -> bool:
    row = conn.execute("SELECT 1 FROM timeline WHERE commit_id = ?", (commit,)).fetchone()
    return row is not None


class TimelineKeeper(BackgroundLoop):
    """Keeps the timeline current in the background while a server runs: a replay shortly after
    it is poked (a write, a dashboard asking) and a look at HEAD every ``period`` seconds, so
    commits made with ``git`` behind kiwifs's back are seen too."""

    thread_name = "kiwifs-timeline"

    def __init__(
        self,
        timeline: Timeline,
        prefix: Callable[[], str],
        period: float = 5.0,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.timeline = timeline
        self._prefix = prefix
        self.period = period
        self._ready = ready
        self.settle = 0.0  # seconds a large root's first replay waits after ready
        self.replayed = threading.Event()  # set after each refresh (for tests and waiting)
        super().__init__()

    def _run(self) -> None:
        # The first replay waits for ``ready()``: the server's first reconcile of the index.
        # A file's facts at a commit come from its index row when the row holds that blob;
        # before the rows are there (a first serve, an index rebuilt) every blob was read
        # from git and parsed, a million at a million files, on the core the rebuild needed.
        # On a large root it then waits ``settle`` seconds more (the first questions first).
        self._settle(self._ready, self.settle, lambda: self.timeline.index().file_count())
        while not self._stop.is_set():
            try:
                self.timeline.refresh(self._prefix(), self._stop.is_set)
            except Exception:  # a background thread must not die; the next poke retries
                log.exception("timeline replay failed; retrying later")
            self.replayed.set()
            self._wake.wait(self.period)
            self._wake.clear()
            # a quiet moment first: a burst of writes ends, and the dashboards that the same
            # change made refresh themselves before the replay competes with them
            self._stop.wait(QUIET_SECONDS)
