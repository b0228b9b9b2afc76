"""Building the whole index at once (``kiwifs reindex``): parse in parallel, load in bulk.

A rebuild is a different job from keeping rows current. Nothing has to be compared or
cleared, so the work splits cleanly in two:

* **parsing** (read, YAML, JSON, the memory facts, the row's values) is pure per file and is
  most of the time: forked worker processes parse chunks of files while this process loads;
* **loading** goes into empty tables in one transaction with ``executemany``, row ids chosen
  here (no ``RETURNING`` round trip), and the secondary indexes dropped first and built once at
  the end: sorting 100k keys once is far cheaper than 100k B-tree inserts into nine indexes.
  ``covered`` is computed once, by one UPDATE, after every ``merged-from`` row is in.

One transaction means a rebuild is all or nothing: a crash leaves the empty tables the rebuild
started from, and the next reconcile fills them. The answer never depends on the number of
workers; without a safe way to fork (a threaded process, not Linux) parsing stays here.
"""

from __future__ import annotations

import gc
import multiprocessing
import sqlite3
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from itertools import islice
from typing import Any

from kiwifs.forking import fork_is_safe, usable_cpus
from kiwifs.paths import open_regular, read_all

from .bodies import DICT_SAMPLES, Codec, save_dictionary, train
from .folders import abs_path
from .record import error_record, key_to_rel, read_record
from .rows import COVER_LOADED_SQL, COVER_SQL, RowParts, row_parts
from .vectorschema import QUEUE_TRIGGERS, VECTORS_ENABLED

Progress = Callable[[int, int], None]

PARALLEL_THRESHOLD = 2000  # files below which forking costs more than it saves
CHUNK = 500  # files per job handed to a worker
IN_FLIGHT = 4  # jobs queued per worker: enough to keep it busy, little memory
LOAD_BATCH = 2000  # rows per executemany
# FTS5 keeps the terms of the rows inserted since its last flush in a hash and writes them out as
# a new segment when the hash holds this many bytes; every segment is merged again later. With
# FTS5's default (1 MiB: a segment every ~400 texts) the load spends a sixth of its text-index
# time merging; with a large hash it writes a few big segments. Only the rebuild's connection
# uses it, for the load's transaction (``None``: FTS5's default).
FTS_HASH_BYTES: int | None = 64 << 20
FTS_DEFAULT_HASH_BYTES = 1 << 20  # FTS5's own value, set back once the load is done
DROP_IDLE_TRIGGERS = True  # False: the benchmark's baseline (see _idle_triggers_dropped)
COVER_ONLY_CITED = True  # False: the benchmark's baseline (rows.COVER_LOADED_SQL)

INSERT_FILE = (
    "INSERT INTO files (id, key, parent, path, sig, size, mtime_ns, etag, frontmatter,"
    " memory_kind, kind_class, episode_id, eid, refs, id_keys, path_keys, warnings, unreadable,"
    " entry, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DEFERRED_INDEXES = (
    "SELECT name, sql, tbl_name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL"
    " AND tbl_name IN ('files', 'cover_ids', 'cover_paths')"
)

Job = tuple[str, str, list[tuple[bytes, str | None]], bytes | None]
# a row's parts plus its text compressed (in the worker: compressing is parsing's cost too)
Parts = tuple[tuple[Any, ...], list[str | bytes], list[bytes], str | None, bytes | None]


def sample_dictionary(root: str, real_root: str, keys: list[bytes]) -> bytes | None:
    """A compression dictionary for the texts (:mod:`index.bodies`), trained on files spread
    evenly over ``keys``."""
    step = max(1, len(keys) // DICT_SAMPLES)
    samples: list[bytes] = []
    for key in keys[::step]:
        try:
            fd, _ = open_regular(abs_path(root, key), real_root)
            samples.append(read_all(fd))
        except OSError:
            continue
    return train(samples)


def _parts_of(
    root: str, real_root: str, key: bytes, error: str | None, codec: Codec
) -> Parts | None:
    """The row of one walked file; ``None`` when it vanished since the walk."""
    rel = key_to_rel(key)
    if error is not None:
        return _with_packed(row_parts(error_record(key, rel, error)), codec)
    record = read_record(key, rel, abs_path(root, key), real_root)
    return None if record is None else _with_packed(row_parts(record), codec)


def _with_packed(parts: RowParts, codec: Codec) -> Parts:
    text = parts[3]
    return (*parts, None if text is None else codec.pack(text))


_codecs: dict[bytes | None, Codec] = {}


def _codec_of(dictionary: bytes | None) -> Codec:
    """One codec per dictionary in this process (building one digests the dictionary)."""
    codec = _codecs.get(dictionary)
    if codec is None:
        _codecs.clear()
        codec = _codecs[dictionary] = Codec(dictionary)
    return codec


def _parts_of_job(job: Job) -> list[Parts | None]:
    root, real_root, entries, dictionary = job
    codec = _codec_of(dictionary)
    return [_parts_of(root, real_root, key, error, codec) for key, error in entries]


def parsed(
    root: str,
    real_root: str,
    keys: list[bytes],
    errors: dict[bytes, str],
    workers: int | None = None,
    threshold: int = PARALLEL_THRESHOLD,
    dictionary: bytes | None = None,
) -> Iterator[Parts | None]:
    """The rows of ``keys``, in order, parsed by forked workers when that is safe and pays
    (``threshold`` files or more), their texts compressed with ``dictionary``."""
    entries = [(key, errors.get(key)) for key in keys]
    count = usable_cpus() if workers is None else workers
    if count <= 1 or len(entries) < threshold or not fork_is_safe():
        codec = _codec_of(dictionary)
        return (_parts_of(root, real_root, k, e, codec) for k, e in entries)
    jobs = [
        (root, real_root, entries[i : i + CHUNK], dictionary) for i in range(0, len(entries), CHUNK)
    ]
    return _parallel(jobs, count)


def _parallel(jobs: list[Job], workers: int) -> Iterator[Parts | None]:
    # Forked workers share this heap until they write to it; a collection pass writes to every
    # object it visits, frozen ones are not visited.
    frozen = gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    try:
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("fork")
        )
        todo = iter(jobs)
        pending: deque[tuple[Job, Future[list[Parts | None]] | None]] = deque(
            (job, _submit(pool, job)) for job in islice(todo, workers * IN_FLIGHT)
        )
    except OSError:
        yield from (p for job in jobs for p in _parts_of_job(job))
        return
    finally:
        if frozen:
            gc.unfreeze()
    try:
        while pending:
            job, future = pending.popleft()
            yield from _collect(job, future)
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, _submit(pool, nxt)))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _submit(pool: ProcessPoolExecutor, job: Job) -> Future[list[Parts | None]] | None:
    try:
        return pool.submit(_parts_of_job, job)
    except (BrokenProcessPool, RuntimeError, OSError):
        return None


def _collect(job: Job, future: Future[list[Parts | None]] | None) -> list[Parts | None]:
    """A worker's answer, or the job parsed here when the pool broke (a worker killed)."""
    try:
        if future is not None:
            return future.result()
    except (BrokenProcessPool, OSError):
        pass
    return _parts_of_job(job)


def load(
    conn: sqlite3.Connection,
    rows: Iterable[Parts | None],
    total: int,
    progress: Progress | None = None,
    dictionary: bytes | None = None,
) -> None:
    """Fill the empty tables from ``rows`` (texts compressed with ``dictionary``) in one
    transaction (see the module docstring)."""
    conn.execute("PRAGMA synchronous = OFF")  # one commit at the end; a crash rebuilds anyway
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            save_dictionary(conn, dictionary)
            with _fts_hash(conn):
                _load(conn, rows, total, progress)
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
    finally:
        conn.execute("PRAGMA synchronous = NORMAL")


@contextmanager
def _fts_hash(conn: sqlite3.Connection) -> Iterator[None]:
    """:data:`FTS_HASH_BYTES` as FTS5's hash size inside the load's transaction. Setting it is
    an FTS5 command that stores the value in ``fts_config``; afterwards the default is set the
    same way (so every connection reloads it) and the stored row removed, leaving the table's
    configuration as the schema made it."""
    if FTS_HASH_BYTES is None:
        yield
        return
    command = "INSERT INTO fts (fts, rank) VALUES ('hashsize', ?)"
    conn.execute(command, (FTS_HASH_BYTES,))
    yield
    conn.execute(command, (FTS_DEFAULT_HASH_BYTES,))
    conn.execute("DELETE FROM fts_config WHERE k = 'hashsize'")


def _load(
    conn: sqlite3.Connection, rows: Iterable[Parts | None], total: int, progress: Progress | None
) -> None:
    deferred = conn.execute(DEFERRED_INDEXES).fetchall()
    for name, _, _ in deferred:
        conn.execute(f'DROP INDEX "{name}"')
    with _idle_triggers_dropped(conn):
        _fill(conn, rows, total, progress)
    if COVER_ONLY_CITED:
        for _, sql, _ in deferred:  # the coverage UPDATE finds its rows through them
            conn.execute(sql)
        conn.execute(COVER_LOADED_SQL)
    else:
        for _, sql, table in deferred:  # the cover lookups first: the coverage UPDATE uses them
            if table != "files":
                conn.execute(sql)
        conn.execute(COVER_SQL)
        for _, sql, table in deferred:
            if table == "files":
                conn.execute(sql)
    if progress:
        progress(total, total)


@contextmanager
def _idle_triggers_dropped(conn: sqlite3.Connection) -> Iterator[None]:
    """Without vectors, the embedding queue's triggers do nothing but test their condition
    for every row (a fifth of the file rows' insert): dropped for the load, made again from
    their own stored definition after it, in the same transaction."""
    idle: list[tuple[str, str]] = []
    if DROP_IDLE_TRIGGERS and conn.execute(VECTORS_ENABLED).fetchone() is None:
        marks = ",".join("?" * len(QUEUE_TRIGGERS))
        sql = f"SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND name IN ({marks})"
        idle = conn.execute(sql, QUEUE_TRIGGERS).fetchall()
    for name, _ in idle:
        conn.execute(f'DROP TRIGGER "{name}"')
    yield
    for _, sql in idle:
        conn.execute(sql)


def _fill(
    conn: sqlite3.Connection, rows: Iterable[Parts | None], total: int, progress: Progress | None
) -> None:
    batch = _Batch()
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


class _Batch:
    """Rows waiting for one ``executemany`` per table."""

    def __init__(self) -> None:
        self.next_id = 1
        self.files: list[tuple[object, ...]] = []
        self.idents: list[tuple[str | bytes, int]] = []
        self.targets: list[tuple[bytes, int]] = []
        self.texts: list[tuple[int, str]] = []
        self.packed: list[tuple[int, bytes]] = []

    def add(self, parts: Parts) -> None:
        values, idents, targets, text, packed = parts
        file_id = self.next_id
        self.next_id += 1
        self.files.append((file_id, *values))
        self.idents.extend((i, file_id) for i in idents)
        self.targets.extend((t, file_id) for t in targets)
        if text is not None and packed is not None:
            self.texts.append((file_id, text))
            self.packed.append((file_id, packed))

    def flush(self, conn: sqlite3.Connection) -> None:
        conn.executemany(INSERT_FILE, self.files)
        conn.executemany("INSERT INTO cover_ids (ident, file_id) VALUES (?, ?)", self.idents)
        conn.executemany("INSERT INTO cover_paths (target, file_id) VALUES (?, ?)", self.targets)
        conn.executemany("INSERT INTO fts (rowid, body) VALUES (?, ?)", self.texts)
        conn.executemany("INSERT INTO bodies (id, text) VALUES (?, ?)", self.packed)
        self.files, self.idents, self.targets, self.texts, self.packed = [], [], [], [], []
