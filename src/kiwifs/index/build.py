"""Building the whole index at once (``kiwifs reindex``): parse in parallel, load in bulk.

A rebuild is a different job from keeping rows current. Nothing has to be compared or
cleared, so the work splits cleanly in two:

* **parsing** (read, YAML, JSON, the memory facts, the row's values) is pure per file and is
  most of the time: forked worker processes parse chunks of files while this process loads;
* **loading** goes into empty tables in one transaction with ``executemany``, row ids chosen
  here (no ``RETURNING`` round trip), and the secondary indexes dropped first and built once at
  the end: sorting 100k keys once is far cheaper than 100k B-tree inserts into nine indexes.
  ``covered`` is worked out as the rows go in (:class:`_Batch`).

One transaction means a rebuild is all or nothing: a crash leaves the empty tables the rebuild
started from, and the next reconcile fills them. The answer never depends on the number of
workers; without a safe way to fork (a threaded process, not Linux) parsing stays here.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import multiprocessing
import os
import sqlite3
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from typing import Any

from kiwifs.base.forking import exit_with_parent, fork_is_safe, usable_cpus
from kiwifs.base.limits import MAX_READ_BYTES
from kiwifs.base.paths import open_regular, read_all
from kiwifs.index.folders import abs_path
from kiwifs.index.linkparse import DEFAULT_TYPED_FIELDS
from kiwifs.index.record import error_record, key_to_rel, read_record, record_of_bytes
from kiwifs.index.rows import COVER_SQL, LINK_COLUMNS, RowParts, packed_values, row_parts
from kiwifs.index.schema import printed_schema
from kiwifs.index.search.storedcolumns import ColumnBuilder, Counted, counted_rows
from kiwifs.index.search.storedcolumns import clear as forget_columns
from kiwifs.index.search.storedcolumns import stamp as stamp_columns
from kiwifs.index.search.wordcounts import WordCounter, common_words
from kiwifs.index.texts import (
    DICT_SAMPLES,
    NO_DICTIONARIES,
    Codecs,
    Dictionaries,
    save_dictionaries,
    train_both,
)

Progress = Callable[[int, int], None]

PARALLEL_THRESHOLD = 2000  # files below which forking costs more than it saves
CHUNK = 500  # files per job handed to a worker
IN_FLIGHT = 4  # jobs queued per worker: enough to keep it busy, little memory
# Jobs per worker handed out at most, parsed or not: enough to keep the workers busy while a
# rebuild drops the old tables, before the first row is asked for. After that, new jobs go out
# only while fewer than IN_FLIGHT per worker are unparsed: the parsed rows waiting for the
# loader stay few, and the loader does not trail the workers by much at the end.
AHEAD = 16
LOAD_BATCH = 2000  # files per flush of the loaded rows
# Link rows a statement inserts (:func:`insert_rows`): a file has several, so a batch of 2000
# files holds some 10,000 at 5 links a page.
ROWS_PER_INSERT = 50
# FTS5's hash of pending terms during a load (its default: 1 MiB): see :func:`_fts_hash`.
FTS_HASH = 64 << 20
FTS_DEFAULT_HASH = 1 << 20

INSERT_FILE = (
    "INSERT INTO files (id, key, parent, path, sig, size, mtime_ns, etag, frontmatter,"
    " memory_kind, kind_class, episode_id, eid, refs, id_keys, path_keys, warnings, unreadable,"
    " entry, created, superseded, scope, covered)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DEFERRED_INDEXES = (
    "SELECT name, sql, tbl_name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL"
    " AND tbl_name IN ('files', 'cover_ids', 'cover_paths', 'links')"
)

# root, its real path, the keys, the walk's errors among them, the typed link fields
Job = tuple[str, str, list[bytes], dict[bytes, str], tuple[str, ...]]
# a row's parts plus its text compressed (in the worker: compressing is parsing's cost too)
# and the counts of the words whose columns the rebuild makes (None: no text, or no words)
Parts = tuple[
    tuple[Any, ...],
    list[str | bytes],
    list[bytes],
    str | None,
    list[tuple[Any, ...]],
    bytes | None,
    Counted | None,
]
# The words a rebuild makes term columns of (index/search/storedcolumns.py): those in at least
# COLUMN_SHARE of the sampled files, the COLUMN_WORDS most common, none that begins with a digit
# (numbers, pieces of dates and times: rarely asked), once the root has COLUMN_FILES files
# (below that, a server makes a word's column in under ~20 ms). A word in 5 % of a million
# files not kept costs its first search 50-300 ms; a kept one costs the index ~100-200 kB and
# a server 1 MB of memory (and a rebuild a byte a file while it loads: 200 MB at a million files).
COLUMN_FILES = 20_000
COLUMN_SHARE = 0.05
COLUMN_WORDS = 200


class Samples:
    """Files spread evenly over a root, read once for what a rebuild learns from them."""

    def __init__(self, root: str, real_root: str, keys: list[bytes]) -> None:
        self.files = len(keys)
        self.texts = _read_samples(root, real_root, keys)

    def dictionaries(self) -> Dictionaries:
        """The compression dictionaries of the texts and of the frontmatter JSON
        (:func:`kiwifs.index.texts.train_both`)."""
        frontmatter = [
            record_of_bytes(b"", "", text, None).frontmatter.encode("utf-8", "surrogatepass")
            for text in self.texts
        ]
        return train_both(self.texts, frontmatter)

    def column_words(self) -> tuple[str, ...]:
        """The words to make term columns of (see :data:`COLUMN_SHARE`); none below
        :data:`COLUMN_FILES` files."""
        if self.files < COLUMN_FILES:
            return ()
        texts = [t.decode("utf-8", "replace") for t in self.texts]
        return tuple(common_words(texts, COLUMN_SHARE, COLUMN_WORDS, numbers=False))


def _read_samples(root: str, real_root: str, keys: list[bytes]) -> list[bytes]:
    step = max(1, len(keys) // DICT_SAMPLES)
    samples: list[bytes] = []
    for key in keys[::step]:
        try:
            fd, st = open_regular(abs_path(root, key), real_root)
        except OSError:
            continue
        if st.st_size > MAX_READ_BYTES:  # not indexed, so no sample of the texts either
            os.close(fd)
            continue
        try:
            samples.append(read_all(fd, st.st_size))
        except OSError:
            continue
    return samples


def _parts_of(
    root: str,
    real_root: str,
    key: bytes,
    error: str | None,
    codecs: Codecs,
    typed: tuple[str, ...] = DEFAULT_TYPED_FIELDS,
) -> tuple[Any, ...] | None:
    """The row of one walked file; ``None`` when it vanished since the walk."""
    rel = key_to_rel(key)
    if error is not None:
        return _with_packed(row_parts(error_record(key, rel, error), typed), codecs)
    record = read_record(key, rel, abs_path(root, key), real_root)
    return None if record is None else _with_packed(row_parts(record, typed), codecs)


def _with_packed(parts: RowParts, codecs: Codecs) -> tuple[Any, ...]:
    """The parts with the frontmatter compressed, and the text compressed beside them."""
    values, idents, targets, text, links = parts
    packed = None if text is None else codecs.text.pack(text)
    return packed_values(values, codecs.frontmatter), idents, targets, text, links, packed


_codecs: dict[Dictionaries, Codecs] = {}


def _codecs_of(dictionaries: Dictionaries) -> Codecs:
    """One pair of codecs per pair of dictionaries in this process (building one digests its
    dictionary)."""
    codecs = _codecs.get(dictionaries)
    if codecs is None:
        _codecs.clear()
        codecs = _codecs[dictionaries] = Codecs.of(dictionaries)
    return codecs


def _parts_of_job(job: Job, codecs: Codecs, counter: WordCounter | None) -> list[Parts | None]:
    """A job's rows, each with its text's word counts when ``counter`` counts them (all of the
    job's texts at once: a few array operations)."""
    root, real_root, keys, errors, typed = job
    rows = [_parts_of(root, real_root, key, errors.get(key), codecs, typed) for key in keys]
    texts = [row[3] for row in rows if row is not None and row[3] is not None]
    counted = iter(counted_rows(counter, texts) if counter is not None and texts else ())
    out: list[Parts | None] = []
    for row in rows:
        if row is None:
            out.append(None)
        else:
            out.append((*row, next(counted) if row[3] is not None and counter else None))
    return out


# A worker's codecs, made once by :func:`_start_worker` from the dictionaries it inherited at the
# fork: sent with every job, a 64 KiB dictionary was 14 MB of pipe traffic per 100k files.
_worker_codecs: Codecs | None = None
_worker_counter: WordCounter | None = None  # and its counter of the columns' words


def _start_worker(parent: int, dictionaries: Dictionaries, words: tuple[str, ...]) -> None:
    global _worker_codecs, _worker_counter
    exit_with_parent(parent)
    _worker_codecs = _codecs_of(dictionaries)
    _worker_counter = WordCounter(words) if words else None


def _parse_in_worker(job: Job) -> bytes:
    """A job's rows, marshalled: they are tuples, lists, texts, bytes and numbers, which
    :mod:`marshal` reads back four times faster than :mod:`pickle` (1.8 against 7.8 µs a
    file, in the parent, which reads them all). Both ends run the same interpreter (a fork)."""
    assert _worker_codecs is not None, "the pool's initializer made them"
    return marshal.dumps(_parts_of_job(job, _worker_codecs, _worker_counter))


def parsed(
    root: str,
    real_root: str,
    keys: list[bytes],
    errors: dict[bytes, str],
    workers: int | None = None,
    threshold: int = PARALLEL_THRESHOLD,
    dictionaries: Dictionaries = NO_DICTIONARIES,
    typed: tuple[str, ...] = DEFAULT_TYPED_FIELDS,
    words: tuple[str, ...] = (),
) -> ParsedRows:
    """The rows of ``keys``, in order, parsed by forked workers when that is safe and pays
    (``threshold`` files or more), compressed with ``dictionaries`` and ``words``
    counted in them (the term columns the load keeps).

    The workers start now, before the first row is asked for: a rebuild empties the tables
    meanwhile (see :class:`ParsedRows`). The jobs hold the keys from now on, each job's
    dropped once its rows are taken: a caller that lets go of ``keys`` frees them as the load
    goes (a million keys are ~90 MB of a rebuild's peak memory)."""
    jobs: deque[Job] = deque()
    for i in range(0, len(keys), CHUNK):
        chunk = keys[i : i + CHUNK]
        found = {key: errors[key] for key in chunk if key in errors} if errors else {}
        jobs.append((root, real_root, chunk, found, typed))
    count = usable_cpus() if workers is None else workers
    parallel = count > 1 and len(keys) >= threshold and fork_is_safe()
    return ParsedRows(_drained(jobs), dictionaries, count if parallel else 0, words)


def _drained(jobs: deque[Job]) -> Iterator[Job]:
    """``jobs`` in order, each removed as it is handed out (so it lives only until parsed)."""
    while jobs:
        yield jobs.popleft()


class ParsedRows:
    """Rows parsed ahead, in key order: an iterator, closed once exhausted (or by
    :meth:`close`, which a caller that stops early must call: it ends the workers).

    With ``workers``, a pool of forked processes starts at once and takes the first jobs, so
    it parses while the caller empties the old tables (about a second at 100k files, which
    otherwise left a CPU idle). A job whose worker failed, or every job without workers, is
    parsed in this process when its turn comes.
    """

    def __init__(
        self,
        jobs: Iterable[Job],
        dictionaries: Dictionaries,
        workers: int,
        words: tuple[str, ...] = (),
    ) -> None:
        self.dictionaries = dictionaries  # the texts' and the frontmatter's
        self.words = words  # the words counted in the texts
        self._counter: WordCounter | None = None  # this process's, made if a job is parsed here
        self._todo = iter(jobs)
        self._rows: deque[Parts | None] = deque()
        self._pool: ProcessPoolExecutor | None = None
        self._pending: deque[tuple[Job, Future[bytes] | None]] = deque()
        self._in_flight = self._ahead = 1  # jobs: unparsed, and in all (see AHEAD)
        # Forked workers share this heap until they write to it; a collection pass writes to
        # every object it visits, frozen ones are not visited. The first submit forks.
        frozen = gc.get_freeze_count() == 0
        if frozen:
            gc.freeze()
        try:
            if workers:
                self._pool = _start_pool(workers, dictionaries, words)
            if self._pool is not None:
                self._in_flight, self._ahead = workers * IN_FLIGHT, workers * AHEAD
            for job in islice(self._todo, self._ahead):
                self._pending.append((job, self._submit(job)))
        finally:
            if frozen:
                gc.unfreeze()

    def __iter__(self) -> ParsedRows:
        return self

    def __next__(self) -> Parts | None:
        while not self._rows:
            if not self._pending:
                self.close()
                raise StopIteration
            job, future = self._pending.popleft()
            self._refill()
            self._rows.extend(self._collect(job, future))
        return self._rows.popleft()

    def _refill(self) -> None:
        """Hand out jobs while the workers have fewer than :data:`IN_FLIGHT` each to parse."""
        unparsed = sum(1 for _, f in self._pending if f is not None and not f.done())
        while len(self._pending) < self._ahead and unparsed < self._in_flight:
            job = next(self._todo, None)
            if job is None:
                return
            self._pending.append((job, self._submit(job)))
            unparsed += 1

    def close(self) -> None:
        pool, self._pool = self._pool, None
        self._pending.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ParsedRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, job: Job) -> Future[bytes] | None:
        if self._pool is None:
            return None
        try:
            return self._pool.submit(_parse_in_worker, job)
        except (BrokenProcessPool, RuntimeError, OSError):
            return None

    def _collect(self, job: Job, future: Future[bytes] | None) -> list[Parts | None]:
        """A worker's answer, or the job parsed here (no pool, or a worker was killed)."""
        try:
            if future is not None:
                parts: list[Parts | None] = marshal.loads(future.result())
                return parts
        except (BrokenProcessPool, OSError):
            pass
        if self.words and self._counter is None:
            self._counter = WordCounter(self.words)
        return _parts_of_job(job, _codecs_of(self.dictionaries), self._counter)


def _start_pool(
    workers: int, dictionaries: Dictionaries, words: tuple[str, ...]
) -> ProcessPoolExecutor | None:
    """Forked workers, each with the dictionaries' codecs; ``None`` when they cannot start."""
    try:
        return ProcessPoolExecutor(  # a killed reindex leaves no parser behind
            max_workers=workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(os.getpid(), dictionaries, words),
        )
    except OSError:
        return None


def load(
    conn: sqlite3.Connection,
    rows: Iterable[Parts | None],
    total: int,
    progress: Progress | None = None,
    dictionaries: Dictionaries = NO_DICTIONARIES,
    cover_while_loading: bool = True,
    words: tuple[str, ...] = (),
    optimize: bool = True,
) -> None:
    """Fill the empty tables from ``rows`` (compressed with ``dictionaries``) in one
    transaction (see the module docstring). ``cover_while_loading`` (``Tuning``): coverage
    worked out while loading (see :class:`_Batch`); False runs the one UPDATE of every row
    after the load instead, the plain path. ``words``: the words counted in the rows, whose
    term columns are kept when every text was counted as FTS5 counted it. ``optimize``
    (``Tuning.fts_optimize``): the text index merged into one segment before the commit."""
    conn.execute("PRAGMA synchronous = OFF")  # one commit at the end; a crash rebuilds anyway
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            save_dictionaries(conn, dictionaries)
            with _fts_hash(conn, FTS_HASH):
                _load(conn, rows, total, progress, cover_while_loading, words)
            if optimize:
                conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        _drop_load_wal(conn)
    finally:
        conn.execute("PRAGMA synchronous = NORMAL")


def _drop_load_wal(conn: sqlite3.Connection) -> None:
    """Empty the load's WAL before anything syncs it.

    The load's commit leaves a WAL as large as the index (230 MB at 100k files), already
    copied into the database by the commit's checkpoint but never synced. The next checkpoint
    at ``synchronous = NORMAL`` (the folder digests' commit, or closing) would sync that WAL
    first, writing it all to disk only to delete it. Emptied here, while syncs are still off,
    its pages are dropped unwritten; that checkpoint then syncs only its own frames, and the
    database file as before. A reader still on an older snapshot keeps the WAL from being
    emptied, and nothing waits for it (no busy timeout): the WAL is then synced later, as
    before. (The database file is never opened here: closing a descriptor of it would drop
    SQLite's own locks on it.)
    """
    timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")


@contextlib.contextmanager
def _fts_hash(conn: sqlite3.Connection, size: int) -> Iterator[None]:
    """FTS5's hash of pending terms at ``size`` bytes for the load, then its default again.

    FTS5 writes its pending terms out as a new segment each time the hash fills, and merges
    segments as they pile up: at the default 1 MiB the texts of 100k files made hundreds of
    segments and every term was rewritten by several rounds of merging. The setting lives in
    ``fts_config``; afterwards its row is removed, so later writes and any other connection use
    FTS5's default, and the table is the one a row-by-row build leaves.
    """
    if size <= FTS_DEFAULT_HASH:
        yield
        return
    conn.execute("INSERT INTO fts (fts, rank) VALUES ('hashsize', ?)", (size,))
    try:
        yield
    finally:
        conn.execute("INSERT INTO fts (fts, rank) VALUES ('hashsize', ?)", (FTS_DEFAULT_HASH,))
        conn.execute("DELETE FROM fts_config WHERE k = 'hashsize'")


def _load(
    conn: sqlite3.Connection,
    rows: Iterable[Parts | None],
    total: int,
    progress: Progress | None,
    cover_while_loading: bool,
    words: tuple[str, ...] = (),
) -> None:
    deferred = conn.execute(DEFERRED_INDEXES).fetchall()
    for name, _, _ in deferred:
        conn.execute(f'DROP INDEX "{name}"')
    batch = _Batch(cover_while_loading, ColumnBuilder(words, total) if words else None)
    seen = 0
    for parts in rows:
        seen += 1
        if parts is not None:
            batch.add(parts)
        if len(batch.files) >= LOAD_BATCH:
            batch.flush(conn)
            if progress:
                progress(seen, total)
    batch.flush(conn)
    if batch.columns is not None:
        batch.columns.save(conn)
    else:
        forget_columns(conn)
    if cover_while_loading:
        batch.cover_the_rest(conn)
    for _, sql, table in deferred:  # the cover lookups first: the coverage UPDATE uses them
        if table != "files":
            conn.execute(sql)
    if not cover_while_loading:
        conn.execute(COVER_SQL)
    for _, sql, table in deferred:
        if table == "files":
            conn.execute(sql)
    for statement in printed_schema(conn):  # after the rows: see schema.printed_schema
        conn.execute(statement)
    if batch.columns is not None:
        stamp_columns(conn)  # the schema as the load leaves it: see storedcolumns.stamp
    if progress:
        progress(total, total)


class _Batch:
    """Rows waiting for one ``executemany`` per table, and their coverage.

    A row is covered when some row's ``merged-from`` names its episode id (``cover_ids``) or
    its path (``cover_paths``): the rule of :data:`rows.COVER_SQL`, with the same equality
    (values are the same ``str``/``bytes`` the tables get). Worked out here, with the sets of
    every ident and target loaded so far, a row goes in covered when a row before it (or itself)
    covers it; the few covered only by a later row are set by :meth:`cover_the_rest`. One
    UPDATE of every row after the load cost more: it rewrites each row.
    """

    def __init__(self, cover: bool = True, columns: ColumnBuilder | None = None) -> None:
        self.cover = cover  # coverage worked out here (False: by one UPDATE after the load)
        self.columns = columns  # the term columns filled as the rows get their ids
        self.next_id = 1
        self.files: list[tuple[object, ...]] = []
        self.idents: list[tuple[str | bytes, int]] = []
        self.targets: list[tuple[bytes, int]] = []
        self.links: list[Any] = []  # flat: the values of every link row, one after another
        self.texts: list[tuple[int, str]] = []
        self.packed: list[tuple[int, bytes]] = []
        self.cover_ids: set[str | bytes] = set()
        self.cover_paths: set[bytes] = set()
        self.uncovered: list[tuple[int, str | bytes | None, bytes]] = []

    def add(self, parts: Parts) -> None:
        values, idents, targets, text, links, packed, counted = parts
        file_id = self.next_id
        self.next_id += 1
        for link in links:
            self.links.append(file_id)
            self.links.extend(link)
        self.idents.extend((i, file_id) for i in idents)
        self.targets.extend((t, file_id) for t in targets)
        covered = 0
        if self.cover:
            self.cover_ids.update(idents)
            self.cover_paths.update(targets)
            eid, key = values[11], values[0]
            if self._covers(eid, key):
                covered = 1
            else:
                self.uncovered.append((file_id, eid, key))
        self.files.append((file_id, *values, covered))
        if text is not None and packed is not None:
            self.texts.append((file_id, text))
            self.packed.append((file_id, packed))
            if self.columns is not None and counted is not None:
                self.columns.add(file_id, counted)

    def cover_the_rest(self, conn: sqlite3.Connection) -> None:
        """Mark the rows that only a row loaded after them covers (every row is in)."""
        late = [(file_id,) for file_id, eid, key in self.uncovered if self._covers(eid, key)]
        conn.executemany("UPDATE files SET covered = 1 WHERE id = ?", late)
        self.uncovered = []

    def _covers(self, eid: str | bytes | None, key: bytes) -> bool:
        """Whether a row loaded so far covers the episode ``eid`` at ``key``."""
        return (eid is not None and eid in self.cover_ids) or key in self.cover_paths

    def flush(self, conn: sqlite3.Connection) -> None:
        conn.executemany(INSERT_FILE, self.files)
        conn.executemany("INSERT INTO cover_ids (ident, file_id) VALUES (?, ?)", self.idents)
        conn.executemany("INSERT INTO cover_paths (target, file_id) VALUES (?, ?)", self.targets)
        insert_rows(conn, "links", LINK_COLUMNS, self.links)
        conn.executemany("INSERT INTO fts (rowid, body) VALUES (?, ?)", self.texts)
        conn.executemany("INSERT INTO bodies (id, text) VALUES (?, ?)", self.packed)
        self.files, self.idents, self.targets, self.texts, self.packed = [], [], [], [], []
        self.links = []
        if self.columns is not None:
            self.columns.flush()


def insert_rows(
    conn: sqlite3.Connection, table: str, columns: tuple[str, ...], flat: list[Any]
) -> None:
    """Insert into the empty ``table`` the rows given as one flat list of their ``columns``'
    values, :data:`ROWS_PER_INSERT` rows a statement.

    A statement of many rows binds and steps once for all of them: the loader, a rebuild's
    critical path, inserted 546k link rows (100k pages, 5 links each) in 0.6 s instead of
    0.9 s with ``executemany`` of one row a statement. ``OR IGNORE``: an INSERT of many rows
    that may abort half done opens a statement journal, and each one flushes FTS5's pending
    terms into a new segment (a larger, slower text index). No row is ignored here: the
    loader numbers the files and each file's links, so no key repeats, and no value it
    passes is NULL where the schema forbids it (the test of the bulk rebuild against the
    row-by-row one compares the links too).
    """
    width = len(columns)
    one = "(" + ", ".join("?" * width) + ")"
    head = f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES "
    step = ROWS_PER_INSERT * width
    full = len(flat) - len(flat) % step
    if full:
        many = head + ", ".join([one] * ROWS_PER_INSERT)
        conn.executemany(many, (flat[i : i + step] for i in range(0, full, step)))
    if full < len(flat):
        rest = flat[full:]
        conn.executemany(head + one, (rest[i : i + width] for i in range(0, len(rest), width)))
