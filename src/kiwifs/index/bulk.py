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
import os
import sqlite3
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from typing import Any

from kiwifs.forking import exit_with_parent, fork_is_safe, usable_cpus
from kiwifs.paths import open_regular, read_all

from .bodies import DICT_SAMPLES, Codec, save_dictionary, train
from .folders import abs_path
from .record import error_record, key_to_rel, read_record
from .rows import COVER_SQL, RowParts, row_parts

Progress = Callable[[int, int], None]

PARALLEL_THRESHOLD = 2000  # files below which forking costs more than it saves
CHUNK = 500  # files per job handed to a worker
IN_FLIGHT = 4  # jobs queued per worker: enough to keep it busy, little memory
LOAD_BATCH = 2000  # rows per executemany

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
            fd, st = open_regular(abs_path(root, key), real_root)
            samples.append(read_all(fd, st.st_size))
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
        pool = ProcessPoolExecutor(  # a killed reindex leaves no parser behind
            max_workers=workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=exit_with_parent,
            initargs=(os.getpid(),),
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
            _load(conn, rows, total, progress)
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
    finally:
        conn.execute("PRAGMA synchronous = NORMAL")


def _load(
    conn: sqlite3.Connection, rows: Iterable[Parts | None], total: int, progress: Progress | None
) -> None:
    deferred = conn.execute(DEFERRED_INDEXES).fetchall()
    for name, _, _ in deferred:
        conn.execute(f'DROP INDEX "{name}"')
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
    for _, sql, table in deferred:  # the cover lookups first: the coverage UPDATE uses them
        if table != "files":
            conn.execute(sql)
    conn.execute(COVER_SQL)
    for _, sql, table in deferred:
        if table == "files":
            conn.execute(sql)
    if progress:
        progress(total, total)


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
