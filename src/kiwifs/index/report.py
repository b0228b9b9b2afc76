"""The memory report answered from the index, identical to :func:`~kiwifs.memory.rules.build_report`
on a scan.

The rules stay in :mod:`memory`; the index stores each file's :class:`FileFacts` plus three
derived columns — ``kind_class`` (episodic never / always / by prefix), ``eid`` (the stripped
episode id) and ``covered`` (some ``merged-from`` cites it) — plus ``superseded`` (forgotten), so
the totals are indexed counts and only the lists asked for become Python objects. An episode is
unmerged when it is neither covered nor superseded (:data:`UNMERGED`). :func:`stored_facts`
rebuilds the exact facts in walk order, which the tests feed to ``build_report`` to prove the two
answers equal.

A report confined to a path prefix (a scoped key's, ``path_prefix``) is the same queries over
the sort-key range of the paths under it (:data:`Within`): the episodes listed and counted, the
``merged-from`` entries counted and the warnings are those of its files, while coverage stays
the whole root's (the ``covered`` column: an episode cited from outside is still covered).
Without one the queries are the very same as before, so the answer is byte for byte the same.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kiwifs.base.printed_json import RawJSON, dumps
from kiwifs.index.record import db_text, path_key, py_text, stored_keys
from kiwifs.memory.rules import (
    DUPLICATE_ID_WARNING,
    MISSING_ID_WARNING,
    ClaimMark,
    Claims,
    EpisodicFile,
    FileFacts,
    MemoryReport,
    check_paging,
    claims_within,
    mark_claimed,
)

T = TypeVar("T")

UNMERGED = "covered = 0 AND superseded = 0"
_EPISODES = (
    "SELECT {cols} FROM files WHERE kind_class = 1{extra}"
    " UNION ALL SELECT {cols} FROM files WHERE kind_class = 2 AND key >= ? AND key < ?{extra}"
)


# The same query confined to a key range (:data:`Within`) in both branches: its parameters are
# that range and, for the episodes by prefix, its intersection with theirs (:func:`_bounds`).
_WITHIN_EPISODES = (
    "SELECT {cols} FROM files WHERE kind_class = 1 AND key >= ? AND key < ?{extra}"
    " UNION ALL SELECT {cols} FROM files WHERE kind_class = 2 AND key >= ? AND key < ?{extra}"
)

Within = tuple[bytes, bytes] | None  # the sort keys a report is confined to (None: everything)


def within_range(path_prefix: str | None) -> Within:
    """The sort-key range of the paths starting with ``path_prefix`` (a leading ``/`` ignored),
    ``None`` for no prefix.

    A path's key is its text with ``/`` as NUL, each character encoded alone, so the paths
    starting with a text are the keys starting with its key: one contiguous range, which a
    string prefix such as ``team/pro`` (``team/projects/…``, ``team/pro.md``) needs too.
    """
    prefix = (path_prefix or "").lstrip("/")
    if not prefix:
        return None
    key = path_key(prefix)
    stem = (key or b"").rstrip(b"\xff")
    if key is None or not stem:  # no text encodes so (a checked prefix is UTF-8): nothing
        return b"", b""
    return key, stem[:-1] + bytes([stem[-1] + 1])


def _episodes(cols: str, extra: str, within: Within) -> str:
    """The episodes query over ``cols`` (``extra`` added to both branches), confined to
    ``within`` when given; its parameters are :func:`_bounds`."""
    shape = _EPISODES if within is None else _WITHIN_EPISODES
    return shape.format(cols=cols, extra=extra)


def _bounds(lo: bytes, hi: bytes, within: Within) -> tuple[bytes, ...]:
    """The parameters of :func:`_episodes` for the episodes prefix's range ``lo``–``hi``."""
    if within is None:
        return lo, hi
    start, end = within
    return start, end, max(lo, start), min(hi, end)


def prefix_range(prefix: str) -> tuple[bytes, bytes]:
    """Sort-key bounds of the files under ``prefix`` (a normalised prefix ending in ``/``)."""
    key = path_key(prefix.rstrip("/")) if prefix.strip("/") else None
    if key is None:
        return b"", b""
    return key + b"\0", key + b"\1"


@dataclass(frozen=True)
class Totals:
    """The parts of a report that do not depend on paging (cacheable per index generation)."""

    count: int
    unmerged_count: int
    refs: int
    warnings: tuple[str, ...]
    superseded_count: int = 0

    def report(
        self,
        prefix: str,
        limit: int | None,
        offset: int,
        files: tuple[EpisodicFile, ...] = (),
        unmerged: tuple[EpisodicFile, ...] = (),
        claimed_count: int = 0,
    ) -> MemoryReport:
        return MemoryReport(
            episodic_count=self.count,
            merged_from_refs=self.refs,
            episodic_files=files,
            unmerged=unmerged,
            warnings=self.warnings,
            unmerged_count=self.unmerged_count,
            episodes_prefix=prefix,
            limit=limit,
            offset=offset,
            superseded_count=self.superseded_count,
            claimed_count=claimed_count,
        )


# -- rolling kept totals forward (a server) ---------------------------------------------------

# The report log (:func:`advanced`): each change of a file row's part in the memory
# report's totals, its values before and after, logged by triggers in the transaction that makes
# it, whatever process writes; a server rolls the totals it keeps forward over it instead of
# counting a million rows after each write. Trimmed to the last REPORT_LOG_KEEP entries.
REPORT_LOG_KEEP = 50_000
_REPORT_PARTS = ("cls", "cov", "sup", "refs", "eid", "noid", "warn")
_REPORT_VALUES = (
    "{r}.key, {r}.kind_class, {r}.covered, {r}.superseded, {r}.refs, {r}.eid,"
    " {r}.episode_id = '', {r}.warnings IS NOT NULL"
)
_OLD_COLUMNS = ", ".join(f"old_{c}" for c in ("key", *_REPORT_PARTS))
_NEW_COLUMNS = ", ".join(f"new_{c}" for c in ("key", *_REPORT_PARTS))
REPORT_LOG_TABLE = (
    "CREATE TABLE IF NOT EXISTS report_log (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " old_key BLOB, old_cls INTEGER, old_cov INTEGER, old_sup INTEGER, old_refs INTEGER,"
    " old_eid TEXT, old_noid INTEGER, old_warn INTEGER,"
    " new_key BLOB, new_cls INTEGER, new_cov INTEGER, new_sup INTEGER, new_refs INTEGER,"
    " new_eid TEXT, new_noid INTEGER, new_warn INTEGER)"
)
_REPORT_COLUMNS = ("key", "kind_class", "covered", "superseded", "refs", "eid", "episode_id")
REPORT_TRIGGERS = ("insert", "delete", "update", "trim")


def report_log_schema() -> list[str]:
    """The report log's table and its triggers: a row inserted, deleted, or updated in a
    column the totals read (when a value really changed); and the log trimmed each thousand."""
    changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in (*_REPORT_COLUMNS, "warnings"))
    log = "INSERT INTO report_log"
    return [
        REPORT_LOG_TABLE,
        "CREATE TRIGGER IF NOT EXISTS report_log_insert AFTER INSERT ON files BEGIN"
        f" {log} ({_NEW_COLUMNS}) VALUES ({_REPORT_VALUES.format(r='NEW')}); END",
        "CREATE TRIGGER IF NOT EXISTS report_log_delete AFTER DELETE ON files BEGIN"
        f" {log} ({_OLD_COLUMNS}) VALUES ({_REPORT_VALUES.format(r='OLD')}); END",
        "CREATE TRIGGER IF NOT EXISTS report_log_update AFTER UPDATE OF"
        f" {', '.join(_REPORT_COLUMNS)}, warnings ON files WHEN {changed} BEGIN"
        f" {log} ({_OLD_COLUMNS}, {_NEW_COLUMNS}) VALUES"
        f" ({_REPORT_VALUES.format(r='OLD')}, {_REPORT_VALUES.format(r='NEW')}); END",
        "CREATE TRIGGER IF NOT EXISTS report_log_trim AFTER INSERT ON report_log"
        " WHEN NEW.seq % 1000 = 0 BEGIN"
        f" DELETE FROM report_log WHERE seq <= NEW.seq - {REPORT_LOG_KEEP}; END",
    ]


# Past this many logged changes the totals are counted again (each change costs a row and, for
# one naming an episode id, an index lookup; counting a million rows costs ~0.8 s).
MAX_ROLLED = 20_000
_POSITION = (
    "SELECT (SELECT schema_version FROM pragma_schema_version),"
    " (SELECT coalesce(max(seq), 0) FROM report_log), (SELECT min(seq) FROM report_log),"
    " (SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN"
    " ('files', 'report_log') AND name IN ({names}))"
).format(names=", ".join(f"'report_log_{n}'" for n in REPORT_TRIGGERS))
_LOGGED = (
    "SELECT old_key, old_cls, old_cov, old_sup, old_refs, old_eid, old_noid, old_warn,"
    " new_key, new_cls, new_cov, new_sup, new_refs, new_eid, new_noid, new_warn"
    " FROM report_log WHERE seq > ? ORDER BY seq"
)
_SHARING = "SELECT count(*) FROM files WHERE eid = ? AND kind_class != 0"

LogPosition = tuple[int, int]  # (schema version, the report log's last entry)


def log_position(conn: sqlite3.Connection) -> LogPosition | None:
    """Where the report log stands in ``conn``'s snapshot, ``None`` when there is no log to
    roll totals over (an index made before it, or its triggers missing)."""
    try:
        schema, last, _, triggers = conn.execute(_POSITION).fetchone()
    except sqlite3.OperationalError:  # no report_log table
        return None
    return (int(schema), int(last)) if triggers == len(REPORT_TRIGGERS) else None


def changes_since(conn: sqlite3.Connection, since: LogPosition) -> list[tuple[Any, ...]] | None:
    """The changes logged after ``since`` in ``conn``'s snapshot, oldest first, each the row's
    report values before (``old_*``) and after (``new_*``): key, class, covered, superseded,
    refs, episode id, no id, warnings (a side's key is ``None`` when the row did not exist).
    ``None`` when they cannot be told: another schema, the log cut past ``since``, more than
    :data:`MAX_ROLLED` of them, or the triggers missing."""
    schema, last, first, triggers = conn.execute(_POSITION).fetchone()
    if triggers != len(REPORT_TRIGGERS) or schema != since[0] or last < since[1]:
        return None
    if last == since[1]:
        return []
    if (first is not None and first > since[1] + 1) or last - since[1] > MAX_ROLLED:
        return None
    return conn.execute(_LOGGED, (since[1],)).fetchall()


def logged_episode(key: bytes, cls: int, lo: bytes, hi: bytes) -> bool:
    """Whether a logged row (its key and ``kind_class``) is an episode of the prefix whose key
    range is ``[lo, hi)``: the report's rule (:data:`_EPISODES`) on one side of a change."""
    return cls == 1 or (cls == 2 and lo <= key < hi)


def advanced(
    conn: sqlite3.Connection, totals: Totals, since: LogPosition, prefix: str
) -> Totals | None:
    """``totals`` (of the whole root for ``prefix``, counted at log position ``since``) rolled
    forward over the changes logged after it, in ``conn``'s snapshot: the same totals as
    counting them again. ``None``: count again (another schema, the log cut past ``since`` or
    too long since, or a change that may move the warnings, which are then read again)."""
    changes = changes_since(conn, since)
    if changes is None:
        return None
    if not changes:
        return totals
    lo, hi = prefix_range(prefix)
    count, unmerged, superseded, refs = (
        totals.count,
        totals.unmerged_count,
        totals.superseded_count,
        totals.refs,
    )
    eids: dict[Any, int] = {}  # an episode id the changes touched: how often it left a row
    for row in changes:
        held: list[Any] = []  # the id each side counts among duplicates (or None)
        for sign, (key, cls, cov, sup, ref, eid, noid, warn) in ((-1, row[:8]), (1, row[8:])):
            if key is None:  # the row did not exist on this side
                held.append(None)
                continue
            episode = logged_episode(key, cls, lo, hi)
            if warn or (noid and episode):
                return None  # its own warnings, or an episode without an id: they move
            if episode:
                count += sign
                unmerged += sign * (not cov and not sup)
                superseded += sign * bool(sup)
            refs += sign * (ref if ref and ref > 0 else 0)
            held.append(eid if eid is not None and cls else None)
        before, after = held
        if before is not None:
            eids[before] = eids.get(before, 0) + (before != after)
        if after is not None:
            eids.setdefault(after, 0)
    for eid, left in eids.items():
        # rows holding it now, and at most that many plus the ones it left back then
        sharing = conn.execute(_SHARING, (eid,)).fetchone()[0]
        if sharing + left >= 2:
            return None  # a duplicate id now, or one that may have been before: read again
    return Totals(count, unmerged, int(refs), totals.warnings, superseded)


def report(
    conn: sqlite3.Connection,
    prefix: str,
    limit: int | None = None,
    offset: int = 0,
    totals: Totals | None = None,
    claims: Claims | None = None,
    path_prefix: str | None = None,
    unmerged_only: bool = False,
) -> tuple[MemoryReport, Totals]:
    """The memory report of the indexed root for ``prefix`` (already normalised); ``claims``
    (live claims by path) mark the unmerged episodes they hold; ``path_prefix``: only what lies
    under it (see the module's docstring); ``unmerged_only``: the list of every episodic file
    left empty, only the unmerged ones read (the counts are the same).

    ``totals`` computed earlier on the same state of the index (and ``path_prefix``) may be
    passed in to skip the counting; the ones used are returned for the caller to keep.
    """
    limit, offset = check_paging(limit, offset)
    lo, hi = prefix_range(prefix)
    within = within_range(path_prefix)
    claims = claims_within(claims or {}, path_prefix)
    with snapshot(conn):
        totals = totals if totals is not None else _totals(conn, lo, hi, within)
        files, unmerged = _lists(
            conn, lo, hi, limit, offset, EPISODE_COLUMNS, _episodic, within, not unmerged_only
        )
        claimed = len(unmerged_among(conn, claims, prefix)) if claims else 0
    marked = mark_claimed(unmerged, claims)
    result = totals.report(prefix, limit, offset, tuple(files), marked, claimed)
    return result, totals


class snapshot:
    """A read transaction, so every query of one report sees the same state of the index."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.began = False

    def __enter__(self) -> None:
        # nested inside another snapshot it joins that one (and leaves it open)
        self.began = not self.conn.in_transaction
        if self.began:
            self.conn.execute("BEGIN")

    def __exit__(self, *exc: object) -> None:
        if self.began:
            self.conn.rollback()


def _counts(conn: sqlite3.Connection, lo: bytes, hi: bytes, within: Within) -> tuple[int, int, int]:
    sql = _episodes(f"count(*), total({UNMERGED}), total(superseded)", "", within)
    total = unmerged = superseded = 0
    for n, u, s in conn.execute(sql, _bounds(lo, hi, within)):
        total += n
        unmerged += int(u)
        superseded += int(s)
    return total, unmerged, superseded


_REFS = "SELECT total(refs) FROM files WHERE refs > 0"
_IN_RANGE = " AND key >= ? AND key < ?"


def _totals(conn: sqlite3.Connection, lo: bytes, hi: bytes, within: Within = None) -> Totals:
    count, unmerged_count, superseded_count = _counts(conn, lo, hi, within)
    if within is None:
        refs = conn.execute(_REFS).fetchone()[0]
    else:
        refs = conn.execute(_REFS + _IN_RANGE, within).fetchone()[0]
    warnings = _warnings(conn, lo, hi, within)
    return Totals(count, unmerged_count, int(refs), warnings, superseded_count)


EPISODE_COLUMNS = "path, episode_id, memory_kind"


def _lists(
    conn: sqlite3.Connection,
    lo: bytes,
    hi: bytes,
    limit: int | None,
    offset: int,
    columns: str,
    make: Callable[..., T],
    within: Within = None,
    files: bool = True,
) -> tuple[list[T], list[T]]:
    """The two lists of a report (episodic files, unmerged), paged; ``make`` builds an item from
    a row's ``columns``. Unpaged, both come from one pass (unmerged is a subset). ``files``
    False: the first list left empty and the unmerged read alone (a third of the episodes at
    a million, read without the others)."""
    unmerged_sql = f" AND {UNMERGED}"
    if not files:  # LIMIT -1: SQLite's "no limit", the offset still applied
        unpaged = -1 if limit is None else limit
        return [], _page(conn, lo, hi, unmerged_sql, unpaged, offset, columns, make, within)
    if limit is None:
        cols = f"key, covered OR superseded, {columns}"
        sql = _episodes(cols, "", within) + " ORDER BY 1"
        rows = conn.execute(sql, _bounds(lo, hi, within)).fetchall()
        every = [make(*row[2:]) for row in rows]
        unmerged = [f for f, row in zip(every, rows, strict=True) if not row[1]]
        return every[offset:], unmerged[offset:]
    return (
        _page(conn, lo, hi, "", limit, offset, columns, make, within),
        _page(conn, lo, hi, unmerged_sql, limit, offset, columns, make, within),
    )


def _page(
    conn: sqlite3.Connection,
    lo: bytes,
    hi: bytes,
    extra: str,
    limit: int,
    offset: int,
    columns: str,
    make: Callable[..., T],
    within: Within = None,
) -> list[T]:
    """One page of the episodes matching ``extra``, by key (``limit`` -1: every one past
    ``offset``)."""
    if limit == 0:
        return []
    sql = _episodes(f"key, {columns}", extra, within) + " ORDER BY 1 LIMIT ? OFFSET ?"
    return [make(*row[1:]) for row in conn.execute(sql, (*_bounds(lo, hi, within), limit, offset))]


def _episodic(path: str | bytes, episode_id: str | bytes, kind: str | bytes) -> EpisodicFile:
    if type(path) is str and type(episode_id) is str and type(kind) is str:
        return EpisodicFile(path, episode_id, kind)
    return EpisodicFile(py_text(path), py_text(episode_id), py_text(kind))


# Unmerged episodes without an id. Named to its partial index: SQLite's planner otherwise picks the
# recall index on ``superseded`` for the first branch and reads every live file (0.4 s at 100k).
def _missing_ids(within: Within) -> str:
    return _episodes("key, path", f" AND episode_id = '' AND {UNMERGED}", within).replace(
        "FROM files WHERE", "FROM files INDEXED BY files_noid WHERE"
    )


_MISSING_IDS = _missing_ids(None)
_OWN_WARNINGS = "SELECT key, warnings FROM files WHERE warnings IS NOT NULL"


def _warnings(
    conn: sqlite3.Connection, lo: bytes, hi: bytes, within: Within = None
) -> tuple[str, ...]:
    """Each file's own warnings then its report-time ones (missing id, duplicate), walk order;
    ``within``: only those about its files, naming no file outside it."""
    by_key: dict[bytes, list[str]] = {}
    own = (
        conn.execute(_OWN_WARNINGS)
        if within is None
        else conn.execute(_OWN_WARNINGS + _IN_RANGE, within)
    )
    for key, text in own:
        by_key[key] = list(json.loads(text))
    missing = _MISSING_IDS if within is None else _missing_ids(within)
    for key, path in conn.execute(missing, _bounds(lo, hi, within)):
        by_key.setdefault(key, []).append(MISSING_ID_WARNING.format(path=py_text(path)))
    for key, text in _duplicates(conn, lo, hi, within):
        by_key.setdefault(key, []).append(text)
    return tuple(w for key in sorted(by_key) for w in by_key[key])


def _duplicates(
    conn: sqlite3.Connection, lo: bytes, hi: bytes, within: Within = None
) -> Iterator[tuple[bytes, str]]:
    """The duplicate-id warnings: each episode after the first with its id (the first over the
    whole root); ``within``: only those whose two files both lie in it."""
    shared = conn.execute(
        "SELECT eid FROM files WHERE eid IS NOT NULL AND kind_class != 0"
        " GROUP BY eid HAVING count(*) > 1"
    ).fetchall()
    for (eid,) in shared:
        rows = conn.execute(
            "SELECT key, path, kind_class FROM files WHERE eid = ? AND kind_class != 0"
            " ORDER BY key",
            (eid,),
        )
        first: str | None = None
        first_key = b""
        for key, path, cls in rows:
            if cls == 2 and not lo <= key < hi:
                continue
            if first is None:
                first, first_key = py_text(path), key
                continue
            if within is not None and not (_inside(key, within) and _inside(first_key, within)):
                continue
            text = DUPLICATE_ID_WARNING.format(id=py_text(eid), path=py_text(path), first=first)
            yield key, text


def _inside(key: bytes, within: tuple[bytes, bytes]) -> bool:
    return within[0] <= key < within[1]


def episode_paths(conn: sqlite3.Connection, episode_id: str, prefix: str) -> list[str]:
    """The episodes (for ``prefix``) whose trimmed id is ``episode_id``, in walk order.

    One indexed lookup, the classification the report uses: a file counts when its
    ``memory_kind`` says episodic, or says nothing decisive and it lies under the prefix.
    """
    lo, hi = prefix_range(prefix)
    rows = conn.execute(
        "SELECT key, path, kind_class FROM files WHERE eid = ? AND kind_class != 0 ORDER BY key",
        (db_text(episode_id.strip()),),
    )
    return [py_text(path) for key, path, cls in rows if cls == 1 or lo <= key < hi]


ENTRY_DEPTH = 2  # report object > list > entry
_ITEM = "\n" + "  " * ENTRY_DEPTH  # what precedes an entry in its list
_LIST_END = "\n" + "  " * (ENTRY_DEPTH - 1) + "]"


def entry_text(path: str, episode_id: str, memory_kind: str) -> str:
    """An episode's entry as the JSON report prints it."""
    text = dumps(EpisodicFile(path, episode_id, memory_kind).to_json(), "surrogatepass")
    return text.decode("utf-8", "surrogatepass").replace("\n", _ITEM)


# An entry is the three columns between fixed texts whenever JSON escapes none of their
# characters, as for nearly every file: then the row stores no entry (NULL) and the query
# writes it (the same text, checked when the row is made). Stored, it was 12.6 MB of a
# 100k-episode index (twice: its covering index held it too).
_ENTRY_PARTS = ('{\n      "path": "', '",\n      "episode_id": "', '",\n      "memory_kind": "')
_ENTRY_END = '"\n    }'


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


ENTRY_SQL = (
    f"coalesce(entry, {_sql_text(_ENTRY_PARTS[0])} || path || {_sql_text(_ENTRY_PARTS[1])}"
    f" || episode_id || {_sql_text(_ENTRY_PARTS[2])} || memory_kind || {_sql_text(_ENTRY_END)})"
)


def stored_entry(path: str, episode_id: str, memory_kind: str) -> str | bytes | None:
    """What a row stores as its entry: ``None`` when :data:`ENTRY_SQL` writes it from the
    row's columns, else the text (as :func:`db_text` stores it)."""
    text = entry_text(path, episode_id, memory_kind)
    parts = (path, episode_id, memory_kind)
    if all(type(db_text(part)) is str for part in parts):
        derived = "".join(a + b for a, b in zip(_ENTRY_PARTS, parts, strict=True)) + _ENTRY_END
        if derived == text:
            return None
    return db_text(text)


def report_document(
    conn: sqlite3.Connection,
    prefix: str,
    limit: int | None = None,
    offset: int = 0,
    claims: Claims | None = None,
    in_sql: bool = True,
    path_prefix: str | None = None,
) -> tuple[dict[str, Any], int]:
    """The report's JSON value with both lists joined from stored entry text, and the unmerged
    count.

    Printed by :func:`printed_json.dumps` it is the same bytes as ``report(...).to_json()``,
    without an object per episode; that is what makes the CLI's ``--json`` on a 100k-episode
    root fast. The few entries a live claim holds are rendered again with the claim.
    ``in_sql``: see :func:`entry_lists`. ``path_prefix``: as :func:`report`.
    """
    limit, offset = check_paging(limit, offset)
    lo, hi = prefix_range(prefix)
    within = within_range(path_prefix)
    claims = claims_within(claims or {}, path_prefix)
    with snapshot(conn):
        totals = _totals(conn, lo, hi, within)
        if claims:
            columns = f"path, {ENTRY_SQL}"
            found = _lists(conn, lo, hi, limit, offset, columns, _path_and_entry, within)
            files, unmerged = found
            entries = _joined([entry for _, entry in files])
            marked = _joined([_with_claim(path, e, claims.get(path)) for path, e in unmerged])
        else:
            entries, marked = entry_lists(conn, lo, hi, limit, offset, in_sql, within)
        claimed = len(unmerged_among(conn, claims, prefix)) if claims else 0
    document = totals.report(prefix, limit, offset, claimed_count=claimed).to_json()
    document["episodic_files"] = entries
    document["unmerged"] = marked
    return document, totals.unmerged_count


_SEPARATOR = "," + _ITEM  # between two entries of a list


# Both whole lists, each as one value: SQLite joins the entries in report order (group_concat
# takes the rows in the order of the sorted subquery, which SQLite keeps for an aggregate over a
# single FROM-clause subquery). As BLOBs: an entry stored as UTF-8 with lone surrogates (a BLOB,
# see record.db_text) stays bytes, and the joined bytes decode as the entries would one by one.
def _joined_sql(within: Within) -> str:
    return (
        f"SELECT CAST(group_concat(e, {_sql_text(_SEPARATOR)}) AS BLOB),"
        f" CAST(group_concat(CASE WHEN done THEN NULL ELSE e END, {_sql_text(_SEPARATOR)})"
        " AS BLOB) FROM ("
        + _episodes(f"key, covered OR superseded AS done, {ENTRY_SQL} AS e", "", within)
        + " ORDER BY 1)"
    )


_JOINED_SQL = _joined_sql(None)


def entry_lists(
    conn: sqlite3.Connection,
    lo: bytes,
    hi: bytes,
    limit: int | None,
    offset: int,
    in_sql: bool = True,
    within: Within = None,
) -> tuple[RawJSON, RawJSON]:
    """The two lists as printed JSON of their entry text (:data:`ENTRY_SQL`), in report order,
    when no claim marks one.

    The whole report's lists are joined by SQLite, one value each (``in_sql``,
    ``Tuning.report_in_sql``): 100,000 episodes cost no Python string per row
    (``bench/fast_paths.py``, ``entries``). ``in_sql=False``: one Python string per row, the
    plain path. ``within``: only the episodes in that key range.
    """
    if limit is None and offset == 0 and in_sql:
        sql = _JOINED_SQL if within is None else _joined_sql(within)
        files, unmerged = conn.execute(sql, _bounds(lo, hi, within)).fetchone()
        return _bracketed(files), _bracketed(unmerged)
    files_text, unmerged_text = _entry_texts(conn, lo, hi, limit, offset, within)
    return _joined(files_text), _joined(unmerged_text)


def _bracketed(joined: bytes | None) -> RawJSON:
    """A list of entries joined by :data:`_SEPARATOR` (``None``: no entry), as printed JSON."""
    if joined is None:
        return RawJSON("[]")
    return RawJSON("[" + _ITEM + joined.decode("utf-8", "surrogatepass") + _LIST_END)


def _entry_texts(
    conn: sqlite3.Connection,
    lo: bytes,
    hi: bytes,
    limit: int | None,
    offset: int,
    within: Within = None,
) -> tuple[list[str], list[str]]:
    """The two lists' entry texts; unpaged, the rows' text is taken as SQLite gives it, without
    a call per row and without the paths."""
    if limit is not None:
        return _lists(conn, lo, hi, limit, offset, ENTRY_SQL, py_text, within)
    cols = f"key, covered OR superseded, {ENTRY_SQL}"
    sql = _episodes(cols, "", within) + " ORDER BY 1"
    rows = conn.execute(sql, _bounds(lo, hi, within)).fetchall()
    files = [row[2] for row in rows]
    unmerged = [row[2] for row in rows if not row[1]]
    if files and set(map(type, files)) != {str}:  # a lone surrogate's text is stored as bytes
        files = [py_text(entry) for entry in files]
        unmerged = [py_text(entry) for entry in unmerged]
    return files[offset:], unmerged[offset:]


def _joined(entries: list[str]) -> RawJSON:
    if not entries:
        return RawJSON("[]")
    return RawJSON("[" + _ITEM + _SEPARATOR.join(entries) + _LIST_END)


def _path_and_entry(path: str | bytes, entry: str | bytes) -> tuple[str, str]:
    return py_text(path), py_text(entry)


def _with_claim(path: str, entry: str, claim: ClaimMark | None) -> str:
    if claim is None:
        return entry
    item = json.loads(entry)
    item["claimed_by"] = claim.holder
    item["lease_expires"] = claim.lease_expires
    text = dumps(item, "surrogatepass")
    return text.decode("utf-8", "surrogatepass").replace("\n", _ITEM)


def unmerged_head(conn: sqlite3.Connection, prefix: str, count: int) -> list[EpisodicFile]:
    """The first ``count`` unmerged episodes in report order (what the queue hands out)."""
    lo, hi = prefix_range(prefix)
    with snapshot(conn):
        return _page(conn, lo, hi, f" AND {UNMERGED}", count, 0, EPISODE_COLUMNS, _episodic)


def unmerged_among(conn: sqlite3.Connection, paths: Iterable[str], prefix: str) -> set[str]:
    """Which of ``paths`` are unmerged episodes for ``prefix`` (one key lookup each)."""
    lo, hi = prefix_range(prefix)
    sql = (
        "SELECT 1 FROM files WHERE key = ? AND (kind_class = 1 OR (kind_class = 2"
        f" AND key >= ? AND key < ?)) AND {UNMERGED}"
    )
    found: set[str] = set()
    for path in paths:
        key = path_key(path)
        if key is not None and conn.execute(sql, (key, lo, hi)).fetchone() is not None:
            found.add(path)
    return found


def stored_facts(conn: sqlite3.Connection) -> Iterator[FileFacts]:
    """Every stored :class:`FileFacts`, in walk order (for proofs and debugging)."""
    rows = conn.execute(
        "SELECT path, memory_kind, episode_id, refs, id_keys, path_keys, warnings, unreadable,"
        " superseded FROM files ORDER BY key"
    )
    for path, kind, eid, refs, id_keys, path_keys, warnings, unreadable, gone in rows:
        yield FileFacts(
            path=py_text(path),
            memory_kind=py_text(kind),
            episode_id=py_text(eid),
            refs=refs,
            id_keys=stored_keys(id_keys),
            path_keys=stored_keys(path_keys),
            warnings=tuple(json.loads(warnings)) if warnings else (),
            unreadable=bool(unreadable),
            superseded=bool(gone),
        )
