"""The dashboard's figures answered by SQL over the index rows (the rules stay in ``memory/``).

Each query reads only the episodic rows (the same two-part selection as the memory report:
``kind_class`` 1, or 2 inside the prefix's key range) and aggregates in SQLite, so a 100k-episode
root costs a few index scans and never a Python object per episode. At a million episodes those
scans cost ~0.7 s, so a server keeps the folders' counts and rolls them forward over the report
log after each write (:func:`coverage`), as it does the report's totals.
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

from kiwifs.index.memory.timeline import added_times
from kiwifs.index.record import key_to_rel, py_text
from kiwifs.index.report import _EPISODES as EPISODES
from kiwifs.index.report import (
    UNMERGED,
    LogPosition,
    changes_since,
    log_position,
    logged_episode,
    prefix_range,
)
from kiwifs.index.schema import added_hash
from kiwifs.memory.check import AGE_FROM_COMMIT, AGE_FROM_CREATED, AGE_FROM_MTIME, Oldest
from kiwifs.memory.overview import FolderCoverage, QueueItem, QueuePage
from kiwifs.memory.rules import EpisodicFile

LOOKUP_CHUNK = 500  # undated episodes whose first commit is looked up per statement


class Coverage(NamedTuple):
    """The folders' coverage and the superseded count of one prefix, and the report log's
    position they were read at (``None``: no log to roll them over)."""

    position: LogPosition | None
    folders: tuple[FolderCoverage, ...]
    superseded: int


def coverage(conn: sqlite3.Connection, prefix: str, kept: Coverage | None = None) -> Coverage:
    """:func:`folder_coverage` and :func:`superseded_count` in ``conn``'s snapshot: ``kept``
    (read earlier from the same index for ``prefix``) rolled forward over the changes logged
    since, when the log tells them all, else counted again; the same answer either way."""
    position = log_position(conn)
    if kept is not None and kept.position is not None and position is not None:
        changes = changes_since(conn, kept.position)
        if changes is not None:
            return _rolled(kept, changes, prefix, position)
    return Coverage(position, tuple(folder_coverage(conn, prefix)), superseded_count(conn, prefix))


def _rolled(
    kept: Coverage, changes: list[tuple[Any, ...]], prefix: str, position: LogPosition
) -> Coverage:
    """``kept`` with each logged change applied: the row as it was leaves its folder's counts,
    the row as it is enters its own (an episode by the memory report's rule, unmerged when
    neither covered nor superseded)."""
    if not changes:
        return kept._replace(position=position)
    lo, hi = prefix_range(prefix)
    counts = {f.folder: [f.episodic, f.unmerged] for f in kept.folders}
    superseded = kept.superseded
    for change in changes:
        for sign, (key, cls, covered, sup) in ((-1, change[0:4]), (1, change[8:12])):
            if not isinstance(key, bytes) or not logged_episode(key, cls, lo, hi):
                continue  # no row on this side, or no episode
            held = counts.setdefault(_folder_of(key, prefix, lo, hi), [0, 0])
            held[0] += sign
            held[1] += sign * (not covered and not sup)
            superseded += sign * bool(sup)
    folders = tuple(FolderCoverage(f, e, u) for f, (e, u) in sorted(counts.items()) if e)
    return Coverage(position, folders, superseded)


def _folder_of(key: bytes, prefix: str, lo: bytes, hi: bytes) -> str:
    """The folder an episode at ``key`` counts in (see :func:`folder_coverage`)."""
    if lo and lo <= key < hi:
        name, sep, _ = key[len(lo) :].partition(b"\0")
        return prefix + key_to_rel(name) + "/" if sep else prefix
    segment, sep, _ = key.partition(b"\0")
    return key_to_rel(segment) + "/" if sep else ""


def folder_coverage(conn: sqlite3.Connection, prefix: str) -> list[FolderCoverage]:
    """Episodic and unmerged counts per top-level folder under ``prefix``.

    An episode under the prefix counts in ``<prefix><first segment>/`` (``<prefix>`` itself
    for a file directly under it); an episode outside the prefix (``memory_kind: episodic``)
    counts in its own top-level folder (``""`` for the root). The folders are found by skipping
    through the key index, one seek per folder, and counted by key range.
    """
    lo, hi = prefix_range(prefix)
    out: list[FolderCoverage] = []
    if lo:
        base = lo  # the prefix's key and a NUL: every key under the prefix starts with it
        names, direct = _subfolders(conn, base, hi)
        for name in names:
            episodic, unmerged = _count(conn, lo, hi, base + name + b"\0", base + name + b"\1")
            if episodic:
                out.append(FolderCoverage(prefix + key_to_rel(name) + "/", episodic, unmerged))
        episodic = unmerged = 0
        for key in direct:
            found = _count(conn, lo, hi, key, key + b"\0")
            episodic, unmerged = episodic + found[0], unmerged + found[1]
        if episodic:
            out.append(FolderCoverage(prefix, episodic, unmerged))
    outside: dict[str, list[int]] = {}
    rows = conn.execute(  # two ranges, so that the index skips the prefix's own rows
        f"SELECT key, {UNMERGED} FROM files WHERE kind_class = 1 AND key < ?"
        f" UNION ALL SELECT key, {UNMERGED} FROM files WHERE kind_class = 1 AND key >= ?",
        (lo or b"\xff", hi or b"\xff"),
    )
    for key, unmerged in rows:
        counts = outside.setdefault(_folder_of(key, prefix, lo, hi), [0, 0])
        counts[0] += 1
        counts[1] += bool(unmerged)
    out.extend(FolderCoverage(f, e, u) for f, (e, u) in outside.items())
    return sorted(out, key=lambda f: f.folder)


def _subfolders(
    conn: sqlite3.Connection, base: bytes, end: bytes
) -> tuple[list[bytes], list[bytes]]:
    """The folder names and the file keys directly under the folder whose keys start with
    ``base``."""
    names: list[bytes] = []
    files: list[bytes] = []
    cursor = base
    while True:
        row = conn.execute(
            "SELECT key FROM files WHERE key >= ? AND key < ? ORDER BY key LIMIT 1", (cursor, end)
        ).fetchone()
        if row is None:
            return names, files
        name, sep, _ = row[0][len(base) :].partition(b"\0")
        if sep:
            names.append(name)
            cursor = base + name + b"\1"  # past every key inside that folder
        else:
            files.append(row[0])
            cursor = row[0] + b"\0"  # a file directly under: on to the next key


def _count(
    conn: sqlite3.Connection, lo: bytes, hi: bytes, start: bytes, stop: bytes
) -> tuple[int, int]:
    """Episodes (and unmerged ones) whose key is in ``[start, stop)``, inside the prefix."""
    sql = EPISODES.format(cols=f"count(*), total({UNMERGED})", extra=" AND key >= ? AND key < ?")
    episodic = unmerged = 0
    for n, u in conn.execute(sql, (start, stop, lo, hi, start, stop)):
        episodic += n
        unmerged += int(u)
    return episodic, unmerged


def oldest_unmerged(conn: sqlite3.Connection, prefix: str) -> Oldest | None:
    """The unmerged episode that entered the root first (ties: walk order).

    Its time is its ``created`` (kept in the row at index time), else the first commit that
    added it (the timeline's table), else its modification time. Episodes with a ``created`` are
    read in that order from an index, so only the first match is read; the ones without are
    read whole, unless no first commit is as old as the oldest dated one: then only those
    modified by then can be older (a million-episode root had 81k undated ones, 1 s to read).
    """
    lo, hi = prefix_range(prefix)
    best: tuple[float, bytes, str, str, str] | None = None
    dated = (
        "SELECT created, key, path, episode_id FROM files WHERE kind_class = ? AND covered = 0"
        " AND created IS NOT NULL AND +superseded = 0{extra} ORDER BY created, key LIMIT 1"
    )
    # ``+key``: walk the age index in order and stop at the first row inside the prefix
    for cls, extra, params in ((1, "", ()), (2, " AND +key >= ? AND +key < ?", (lo, hi))):
        row = conn.execute(dated.format(extra=extra), (cls, *params)).fetchone()
        if row is not None:
            best = _older(
                best, (row[0], row[1], py_text(row[2]), py_text(row[3]), AGE_FROM_CREATED)
            )
    extra = " AND covered = 0 AND created IS NULL AND superseded = 0"
    bound: tuple[int, ...] = ()
    if best is not None and not _added_by(conn, best[0]):
        # no file entered the history by then: only an undated episode modified by then can be
        # older (typically none: this reads an index range instead of every undated episode)
        extra, bound = extra + " AND mtime_ns <= ?", (_ns_bound(best[0]),)
    undated = EPISODES.format(cols="key, path, episode_id, mtime_ns", extra=extra)
    cursor = conn.execute(undated, (*bound, lo, hi, *bound))
    while rows := cursor.fetchmany(LOOKUP_CHUNK):
        hashes = [added_hash(row[0]) for row in rows]
        added_at = added_times(conn, hashes)
        for (key, path, episode_id, mtime_ns), h in zip(rows, hashes, strict=True):
            added = added_at.get(h)
            if added is not None:
                since, source = float(added), AGE_FROM_COMMIT
            else:
                since, source = mtime_ns / 1e9, AGE_FROM_MTIME
            best = _older(best, (since, key, py_text(path), py_text(episode_id), source))
    if best is None:
        return None
    since, _key, path, episode_id, source = best
    return Oldest(path, episode_id, since, source)


Candidate = tuple[float, bytes, str, str, str]  # since, key, path, episode id, source


def _ns_bound(since: float) -> int:
    """A modification time in ns a second past ``since``, within SQLite's integers."""
    return max(-(2**63), min(2**63 - 1, int(since * 1e9) + 10**9))


def _added_by(conn: sqlite3.Connection, since: float) -> bool:
    """Whether a file's first commit in the timeline is at ``since`` or before (a second's
    margin: the times are whole seconds)."""
    sql = "SELECT 1 FROM timeline_added WHERE time <= ? LIMIT 1"
    return conn.execute(sql, (int(since) + 1,)).fetchone() is not None


def _older(best: Candidate | None, other: Candidate) -> Candidate:
    return other if best is None or other[:2] < best[:2] else best


def superseded_count(conn: sqlite3.Connection, prefix: str) -> int:
    """Episodes that were forgotten (``memory_status: superseded``): the column
    ``files.superseded``, the same rule as the memory report's ``superseded_count``."""
    lo, hi = prefix_range(prefix)
    sql = EPISODES.format(cols="total(superseded)", extra="")
    return sum(int(n) for (n,) in conn.execute(sql, (lo, hi)))


def queue_page(
    conn: sqlite3.Connection,
    prefix: str,
    path_prefix: str,
    limit: int,
    offset: int,
    total: int | None = None,
) -> QueuePage:
    """Unmerged episodes whose path starts with ``path_prefix``, in walk order, paged;
    ``total``: how many there are, when known already (else counted)."""
    lo, hi = prefix_range(prefix)
    n = len(path_prefix)
    extra = f" AND {UNMERGED} AND substr(path, 1, ?) = ?"
    params = (n, path_prefix, lo, hi, n, path_prefix)
    if total is None:
        count_sql = f"SELECT count(*) FROM ({EPISODES.format(cols='1', extra=extra)})"
        total = int(conn.execute(count_sql, params).fetchone()[0])
    page_sql = (
        EPISODES.format(cols="key, path, episode_id, memory_kind", extra=extra)
        + " ORDER BY 1 LIMIT ? OFFSET ?"
    )
    items = tuple(
        QueueItem(EpisodicFile(py_text(p), py_text(e), py_text(k)))
        for _key, p, e, k in conn.execute(page_sql, (*params, limit, offset))
    )
    return QueuePage(path_prefix, items, total, limit, offset)
