"""The index's tables: what one database holds, and the version that says which tables those are.

The file rows (``files``, one per knowledge file, with the memory facts the report reads), the
``merged-from`` lookups (``cover_ids``, ``cover_paths``), the links between files (``links``,
resolved at query time against ``files``), each folder's last digest (``dirs``),
the text (``bodies``, ``body_dicts``, the contentless ``fts``), the change logs, the vector side's
tables, and beside them two families derived from elsewhere and kept across a rebuild of the
rows: the history replayed from git and the last ``memory check``. A change to any of them moves
:data:`SCHEMA_VERSION`; a database of another version is deleted and made afresh.
"""

from __future__ import annotations

import hashlib
import sqlite3
import zlib

from kiwifs.index.report import report_log_schema
from kiwifs.index.texts import LOG_SCHEMA
from kiwifs.index.vectorschema import VECTOR_SCHEMA, VECTORS_ENABLED, add_vector_upkeep

SCHEMA_VERSION = 19

# A path's file name, ASCII-lowercased, in SQL: what a link with no folder is resolved by
# (index/linkparse.py makes the same key in Python). rtrim strips the name's characters from the
# right, leaving the folder part, whose length is skipped.
LNAME_SQL = "lower(substr({path}, length(rtrim({path}, replace({path}, '/', ''))) + 1))"

# A link row's encoding (index/rows.py writes it, index/links.py reads it). Most links are
# wiki links to a page named as its lowercase path: such a row holds the key once and small
# numbers, the kind and the target as written are derived (:func:`link_kind`,
# :func:`link_target`: expressions in the queries, not generated columns, whose presence makes
# an INSERT of many rows open a statement journal, and that flushes FTS5's pending terms
# during a rebuild's load, each flush a segment to merge), and the one index
# is on a 23-bit hash of the key (the query checks the resolution itself, so a hash shared by
# two keys costs a row read, never a wrong answer). The rows are clustered by file (WITHOUT
# ROWID): a file's links need no index of their own.
KIND_CODES = {"wiki": 0, "merged-from": 1, "markdown": 2, "superseded-by": 3, "derived-from": 4}
KIND_SQL = (
    "CASE {t}.code "
    + " ".join(f"WHEN {n} THEN '{k}'" for k, n in KIND_CODES.items())
    + " ELSE {t}.code END"
)
# how & 3: 0 never resolves, 1 by path, 2 by path then file name, 3 by episode id (the key is
# the merged-from entry's ``type:id``); how >> 2: the target is ``written`` (0), the key less
# its ``.md`` (1), the key (2)
BY_NONE, BY_PATH, BY_NAME, BY_ID = 0, 1, 2, 3
WRITTEN, KEY_LESS_MD, KEY_ITSELF = 0, 4, 8
TARGET_SQL = (
    "CASE {t}.how >> 2 WHEN 0 THEN {t}.written"
    " WHEN 1 THEN substr({t}.key, 1, length({t}.key) - 3) ELSE {t}.key END"
)
KEY_BITS = 0x7FFFFF


def link_kind(t: str = "l") -> str:
    """The kind of the link row aliased ``t`` (``wiki``, ``typed:<field>``, ...), in SQL."""
    return "(" + KIND_SQL.format(t=t) + ")"


def link_target(t: str = "l") -> str:
    """The target as written of the link row aliased ``t``, in SQL."""
    return "(" + TARGET_SQL.format(t=t) + ")"


def key_hash(key: str | bytes) -> int:
    """The hash of a link key (its UTF-8 bytes, as stored), as the column ``h`` holds it."""
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogatepass")
    return zlib.crc32(key) & KEY_BITS


SCHEMA = (
    """
CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    key BLOB NOT NULL UNIQUE,
    parent BLOB NOT NULL,
    path TEXT NOT NULL,
    sig INTEGER,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    etag TEXT NOT NULL,
    frontmatter NOT NULL,  -- JSON, compressed from 64 bytes (index/texts.py: FRONTMATTER_SQL)
    memory_kind TEXT NOT NULL,
    kind_class INTEGER NOT NULL,
    episode_id TEXT NOT NULL,
    eid TEXT,
    refs INTEGER NOT NULL,
    id_keys TEXT NOT NULL,
    path_keys TEXT NOT NULL,
    warnings TEXT,
    unreadable INTEGER NOT NULL,
    covered INTEGER NOT NULL DEFAULT 0,
    entry TEXT,
    created REAL,
    superseded INTEGER NOT NULL DEFAULT 0,  -- memory_status: superseded (index/rows.py)
    scope TEXT  -- the frontmatter's scope when it is a string
);
CREATE INDEX files_class ON files(kind_class, key, covered, superseded);
CREATE INDEX files_parent ON files(parent, sig);
CREATE INDEX files_noid ON files(kind_class, key)
    WHERE episode_id = '' AND covered = 0 AND superseded = 0;
CREATE INDEX files_eid ON files(eid, kind_class) WHERE eid IS NOT NULL;
CREATE INDEX files_warn ON files(key) WHERE warnings IS NOT NULL;
CREATE INDEX files_refs ON files(refs) WHERE refs > 0;
CREATE INDEX files_age ON files(kind_class, covered, created, key) WHERE created IS NOT NULL;
CREATE INDEX files_undated ON files(kind_class, key) WHERE created IS NULL AND covered = 0;
CREATE INDEX files_scoped ON files(scope) WHERE scope IS NOT NULL;  -- keyword search's scope
CREATE INDEX files_lpath ON files(lower(path));  -- a link resolved by path (index/links.py)
CREATE INDEX files_lname ON files("""
    + LNAME_SQL.format(path="path")
    + """);  -- a link resolved by file name
CREATE TABLE cover_ids (ident TEXT NOT NULL, file_id INTEGER NOT NULL);
CREATE INDEX cover_ids_ident ON cover_ids(ident);
CREATE INDEX cover_ids_file ON cover_ids(file_id);
CREATE TABLE cover_paths (target BLOB NOT NULL, file_id INTEGER NOT NULL);
CREATE INDEX cover_paths_target ON cover_paths(target);
CREATE INDEX cover_paths_file ON cover_paths(file_id);
CREATE TABLE links (
    file_id INTEGER NOT NULL,
    rowid INTEGER NOT NULL,  -- the link's place in its file (``ORDER BY l.rowid``: as written)
    code NOT NULL,  -- the kind: a KIND_CODES number, or the text (``typed:<field>``)
    key,  -- what it resolves by: the path (norm), or a merged-from ``type:id``; NULL: never
    how INTEGER NOT NULL,  -- resolution (bits 0-1) and where the target is (bits 2-3)
    h INTEGER,  -- KEY_HASH of key: what a backlink finds the link by
    written,  -- the target as written, NULL when it is the key (less ``.md``)
    heading NOT NULL,
    PRIMARY KEY (file_id, rowid)
) WITHOUT ROWID;
CREATE INDEX links_h ON links(h) WHERE h IS NOT NULL;
CREATE TABLE dirs (key BLOB PRIMARY KEY, digest BLOB, entries INTEGER) WITHOUT ROWID;
CREATE TABLE bodies (id INTEGER PRIMARY KEY, text BLOB NOT NULL);
CREATE TABLE body_dicts (id INTEGER PRIMARY KEY, data BLOB NOT NULL, kind INTEGER NOT NULL);
CREATE VIRTUAL TABLE fts USING fts5(
    body, content = '', tokenize = 'porter unicode61 remove_diacritics 1'
);
"""
    + LOG_SCHEMA
    + VECTOR_SCHEMA
)

# The history replayed from git (index/memory/timeline.py): derived from commits, not from the
# files, so a rebuild of the file rows keeps it.
TIMELINE_SCHEMA = """
CREATE TABLE IF NOT EXISTS timeline (
    seq INTEGER PRIMARY KEY,
    commit_id TEXT NOT NULL UNIQUE,
    time INTEGER NOT NULL,
    day TEXT NOT NULL,
    episodic INTEGER NOT NULL,
    unmerged INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS timeline_day ON timeline(day, seq);
CREATE TABLE IF NOT EXISTS timeline_added (h INTEGER PRIMARY KEY, time INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS timeline_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)
    WITHOUT ROWID;
"""
TIMELINE_TABLES = ("timeline", "timeline_added", "timeline_meta")


def added_hash(key: bytes) -> int:
    """The row id of a file's first commit time in ``timeline_added``: a 64-bit hash of its key.

    Keyed by the path's text, that table took 49 MB of a served 1M-file root's index, enough
    to make the index larger than the markdown; keyed by the hash it takes 20 MB (22 MB when
    inserted in commit order). Two of a million paths share a hash with odds under one in thirty
    million, and the cost would be one episode's age read from the other file's first commit."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big", signed=True)


# The term columns a rebuild made, kept for a server's first searches
# (index/search/storedcolumns.py): derived from the texts, emptied by every rebuild. Statements
# of their own (``IF NOT EXISTS``), so a rebuild can make them inside its transaction in an
# index made before they existed.
COLUMN_TABLES = (
    "CREATE TABLE IF NOT EXISTS column_words"
    " (word TEXT PRIMARY KEY, counts BLOB NOT NULL, over BLOB)",
    "CREATE TABLE IF NOT EXISTS column_meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
)

# The change monitor's epoch and position the file rows are current at (index/monitor.py,
# Index.monitor_position), and the whole memory report as last printed (index/memory/printed.py),
# which triggers on ``files`` delete in the transaction of any row change but a stat-only one.
# Made with the rest by ``recreate`` (an index made before them gets them when first used:
# see storedcolumns.keeping_stamp); both go with ``files`` when a rebuild drops it.
POSITION_TABLE = (
    "CREATE TABLE IF NOT EXISTS monitor_position (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
    " WITHOUT ROWID"
)
PRINTED_TABLE = (
    "CREATE TABLE IF NOT EXISTS printed_reports (prefix TEXT NOT NULL, form TEXT NOT NULL,"
    " body BLOB NOT NULL, aside BLOB NOT NULL, unmerged INTEGER NOT NULL,"
    " PRIMARY KEY (prefix, form)) WITHOUT ROWID"
)
_PRINTED_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS printed_reports_{name} AFTER {event} ON files"
    " BEGIN DELETE FROM printed_reports; END"
)
# A row's stat alone (a reconcile that found a file holding its row's bytes, ``Index._restat``)
# is no part of the report: updating only these leaves a kept report kept.
STAT_ONLY = frozenset({"sig", "mtime_ns"})


def printed_schema(conn: sqlite3.Connection) -> list[str]:
    """The kept reports' table, and the triggers that empty it: any row inserted or deleted,
    any column of a row updated but its stat; then the report log (:func:`report_log_schema`),
    made at the same moments for the same reason.

    ``recreate`` makes the table alone: a trigger on ``files`` during a rebuild's load would
    make each of its multi-row INSERTs one that may abort half done, and FTS5 then writes its
    pending words out as a segment at each. A load makes them at its end (``build.load``); a
    report is never kept before they exist (``printed.keep`` makes them first)."""
    columns = [row[1] for row in conn.execute("PRAGMA table_info(files)")]
    watched = ", ".join(c for c in columns if c not in STAT_ONLY)
    return [
        PRINTED_TABLE,
        _PRINTED_TRIGGER.format(name="insert", event="INSERT"),
        _PRINTED_TRIGGER.format(name="delete", event="DELETE"),
        _PRINTED_TRIGGER.format(name="update", event=f"UPDATE OF {watched}"),
        *report_log_schema(),
    ]


# The last ``memory check`` (index/memory/checkcache.py): its problems, one row each, and when it
# ran. Derived from the file rows by a background loop, never on a request.
CHECK_SCHEMA = """
CREATE TABLE IF NOT EXISTS check_problems (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    message TEXT NOT NULL,
    related TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS check_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""


# FTS5's merge settings for the text index (``fts_config``), against its defaults (4 and 16).
#
# FTS5 writes the words of each transaction out as a new segment of level 0 and merges the
# segments of a level into one of the next once ``automerge`` of them pile up (all at once
# past ``crisismerge``). A reindex leaves the whole text index as one or two big segments of
# level 0 (68 MB at 100k files), so each of the first merges rewrote all of it (0.8 s): with
# the defaults, after 4, 16, 64 and 256 rounds of writes, most of what indexing a write cost
# on a big root. At 64 the big segments are rewritten once, after 64 rounds, and then not
# before some 4,000 more; searches with up to 64 segments a level measured as fast.
# ``Tuning.fts_merge`` off keeps FTS5's defaults (the benchmarks' plain side).
FTS_MERGING = {"automerge": 64, "crisismerge": 64}
FTS_MERGE_DEFAULTS = {"automerge": 4, "crisismerge": 16}


def tune_merging(conn: sqlite3.Connection, merging: bool = True) -> None:
    """Give the text index :data:`FTS_MERGING` (or FTS5's defaults, ``merging`` off) unless it
    has them; a database made before the settings existed gets them when next opened."""
    wanted = FTS_MERGING if merging else {}
    keys = "('automerge', 'crisismerge')"
    found = dict(conn.execute(f"SELECT k, v FROM fts_config WHERE k IN {keys}"))
    if found == wanted:
        return
    for key, value in (wanted or FTS_MERGE_DEFAULTS).items():
        conn.execute("INSERT INTO fts (fts, rank) VALUES (?, ?)", (key, value))
    if not wanted:
        conn.execute(f"DELETE FROM fts_config WHERE k IN {keys}")
    conn.commit()


def recreate(conn: sqlite3.Connection, merging: bool = True) -> None:
    """Create the schema, dropping our tables first (the file may be shared by open readers);
    ``merging``: see :func:`tune_merging`."""
    tables = (
        "fts",
        "bodies",
        "body_dicts",
        "dirs",
        "links",
        "cover_paths",
        "cover_ids",
        "files",
        "fts_log",
        "column_words",
        "column_meta",
        "monitor_position",
        "printed_reports",
        "report_log",
    )
    for table in tables:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.executescript(SCHEMA)
    conn.execute(POSITION_TABLE)
    conn.execute(PRINTED_TABLE)
    conn.executescript(TIMELINE_SCHEMA)
    conn.executescript(CHECK_SCHEMA)
    for statement in COLUMN_TABLES:
        conn.execute(statement)
    tune_merging(conn, merging)
    if conn.execute(VECTORS_ENABLED).fetchone() is not None:  # vectors kept across a rebuild
        add_vector_upkeep(conn)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.commit()


# Every instance of every token in the text index, by (token, document), for a reader: made in
# each read connection's temporary schema (nothing is stored), queried by the term columns to
# count a word's instances per document (index/search/termcolumns.py, TermColumns._counted)
INSTANCE_TABLE = "kiwi_instances"
INSTANCES = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{INSTANCE_TABLE} USING fts5vocab(main, fts, instance)"
)
