"""The SQLite index of a knowledge root: derived from the files, disposable, rebuilt on any doubt.

One database per root (``.kiwi/state/index.db``, WAL; its tables: :mod:`index.schema`). It holds,
per file, the stat signature, ETag, frontmatter as JSON, the full text in a contentless FTS5 table
with the text itself stored once, compressed, in ``bodies`` (:mod:`index.texts`: a rewritten or
deleted file really loses its old words, unlike KiwiFS's, because its old text is there to
delete) and the memory facts, with the ``merged-from`` keys split into two lookup tables so that
"is this episode covered?" is kept in a ``covered`` column and the memory report is a handful of
indexed queries (rows: :mod:`index.rows`). The ``dirs`` table keeps, per folder, the digest it
was last reconciled against and its entry count, so a reconcile compares rows only where the
files moved (walk: :mod:`index.walk`).

The schema version lives in ``PRAGMA user_version``; a different version, a corrupt file or a
deleted one means: drop, recreate and fill again from the files. Writes go through one writer
connection under a lock; reads borrow a connection from a small pool, so they never wait for a
write (WAL).

Three layers make :class:`Index`: the connections (:mod:`index.connections`), the rows stored by
record or by path (:mod:`index.store`), and here the whole root made equal to the files, by a
walk (a reconcile) or from nothing (a rebuild).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kiwifs.base.forking import usable_cpus
from kiwifs.index.folders import WalkState, abs_path
from kiwifs.index.record import FileRecord, raw_sig, same_bytes_stat
from kiwifs.index.report import snapshot
from kiwifs.index.rows import COVER_SQL, Touched, delete_row, full_cover, upsert_row
from kiwifs.index.schema import POSITION_TABLE, printed_schema, recreate
from kiwifs.index.search.storedcolumns import keeping_stamp
from kiwifs.index.store import RowStore, content_changes, stored_etags
from kiwifs.index.walk import FolderJobs, FolderWalk, PendingWalk, folder_key, start_walk

if TYPE_CHECKING:
    from kiwifs.index.build import ParsedRows
    from kiwifs.index.monitor import Changes

BATCH = 1000

Progress = Callable[[int, int], None]
# Called by a reconcile with the keys of each batch once their files are read, before the
# writer lock is taken to store them: the window the store's checks are for (tests land a
# write there)
AfterRead = Callable[[list[bytes]], None]
T = TypeVar("T")

FOLDER_ROWS = "SELECT key, sig FROM files WHERE parent = ?"
RACY_ROW = "SELECT 1 FROM files WHERE parent = ? AND sig IS NULL LIMIT 1"


@dataclass(frozen=True)
class ReconcileStats:
    """What a reconcile found: files (re)indexed, rows removed, files walked, seconds taken,
    and ``missed``: the changes no event could still have been on its way for (see
    :meth:`Index.reconcile`), which tell a watcher whether its events are being lost."""

    updated: int
    removed: int
    files: int
    seconds: float
    missed: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {
            "updated": self.updated,
            "removed": self.removed,
            "files": self.files,
            "seconds": round(self.seconds, 3),
        }


class Index(RowStore):
    """The index database of one root, its rows kept equal to the files: stored by path (the
    write pipeline's hook, the watcher), by a reconcile's walk, or all at once (a rebuild).
    Thread-safe; close it when done."""

    def rebuild(
        self, progress: Progress | None = None, bulk: bool = True, workers: int | None = None
    ) -> int:
        """Drop everything and index every file again; returns the number of entries.

        ``bulk`` (the default) parses in ``workers`` forked processes and loads in one
        transaction (:mod:`index.build`); ``bulk=False`` is the row-by-row path a reconcile
        uses, kept as the benchmark's baseline.
        """
        # the walk split between worker processes by the folder sizes the last walk stored
        sizes = self._folder_sizes()
        # a monitor's position before the walk: what changes during the rebuild it tells later
        answer = self._ask_monitor(sum(sizes.values()))
        walked = start_walk(self.root, sizes=sizes, cap=self.tuning.workers).result()
        keys = sorted(walked.state.sigs)
        total = len(keys)
        rows: ParsedRows | None = None
        if bulk:  # the workers parse while the old tables are dropped
            rows = self._parse(keys, walked.state, workers)
            # From here the parser's jobs hold the keys, each dropped once loaded, and the
            # signatures are not needed (a load signs each row from the file it reads): at a
            # million files the two were ~150 MB of the rebuild's peak memory.
            keys.clear()
            walked.state.sigs.clear()
        try:
            with self._lock:
                self._echo.clear()
                self.columns.clear()
                recreate(self._writer, self.tuning.fts_merge)
                self.generation += 1
                self.rows_generation += 1
                if rows is not None:
                    self._load(rows, total, progress)
        finally:
            if rows is not None:
                rows.close()
        if not bulk:
            self._fill(keys, walked.state, progress, full=True, fresh=True)
            with self._transaction(rows=False) as conn, keeping_stamp(conn):
                for statement in printed_schema(conn):  # after the rows, as a load makes them
                    conn.execute(statement)
        self._store_digests(walked, ())
        if answer is not None:
            self._store_position(answer)
        elif self._monitored(walked.files):
            # a first rebuild of a large root: start its monitor, and walk once more after
            # its position, so the next command can ask it (a few seconds of a long rebuild)
            self.reconcile_then(lambda: None)
        return total

    def reconcile(
        self,
        progress: Progress | None = None,
        after_read: AfterRead | None = None,
        monitored: bool = False,
    ) -> ReconcileStats:
        """Compare the index with a stat walk; re-read only what changed, drop what vanished.

        Only the folders whose digest differs from the one stored at their last reconcile have
        their rows compared; a folder whose rows changed since (a write, the watcher) has no
        stored digest, and neither has a folder holding a record too recent to trust.

        Its :attr:`ReconcileStats.missed` counts the rows removed and the files whose new
        content was found here although it is old enough to trust (its stat is outside the
        racy window): a change that recent may still have its event on the way to a watcher,
        an older one had its event lost.

        ``monitored``: on a large root, the walk narrowed by the root's change monitor when it
        can vouch for the rest (see :meth:`reconcile_then`). A server's watcher reconciles so:
        its first reconcile, before it reports ready, then stats only what changed since the
        index was last brought up to date instead of every file (at a million files, most of
        the time to ready), and a periodic one finds a lost event by the monitor's account.
        """
        pending, answer = self._walk_after(monitored)
        stats = self._apply_walk(pending, progress, after_read=after_read)
        self._store_position(answer)
        return stats

    def reconcile_then(self, action: Callable[[], T]) -> T:
        """``action()`` on the index once reconciled with the files.

        When the walk runs in worker processes, ``action`` runs meanwhile on the index as it
        was, and runs again only if the reconcile changed a row: the usual one-shot command
        finds nothing changed and pays for the walk and the answer at once, not one after the
        other.

        On a large root (``Tuning.monitor_files``) the root's change monitor is asked first
        (:mod:`index.monitor`, started here when none answers): when it can vouch for the
        folders that did not change since the position stored with the rows, only the others
        are walked, and its new position is stored once the rows hold what they hold.
        """
        started = time.perf_counter()
        pending, answer = self._walk_after(monitored=True)
        if not pending.forked:
            self._apply_walk(pending, None, started)
            self._store_position(answer)
            return action()
        try:
            early = action()
        except BaseException:
            pending.cancel()
            raise
        stats = self._apply_walk(pending, None, started)
        self._store_position(answer)
        return action() if stats.updated or stats.removed else early

    def _folder_sizes(self) -> dict[bytes, int]:
        """Entries per folder as the last walk counted them, which split a large walk between
        worker processes (0.34 → 0.24 s at 100k files); none from a new or damaged index."""
        try:
            with self.reader() as conn:
                rows = conn.execute("SELECT key, entries FROM dirs").fetchall()
        except sqlite3.Error:
            return {}
        return {key: entries for key, entries in rows if entries}

    def _walk_after(self, monitored: bool) -> tuple[PendingWalk | FolderJobs, Changes | None]:
        """The walk to reconcile with, and the change monitor's answer it follows
        (``monitored``: asked, for a large root): of the whole root, or, after an answer that
        is not ``full``, of the folders it named alone. The stored folders are read once, for
        the root's size, the walk's split and the digests it compares."""
        with self.reader() as conn:
            stored = conn.execute("SELECT key, digest, entries FROM dirs").fetchall()
        expected = {key: digest for key, digest, _ in stored}
        sizes = {key: entries for key, _, entries in stored if entries}
        answer = self._ask_monitor(sum(sizes.values())) if monitored else None
        if answer is not None and not answer.full:
            flat = [folder_key(rel) for rel in answer.flat]
            trees = [folder_key(rel) for rel in answer.trees]
            jobs = FolderJobs(self.root, flat, trees, expected, sizes, self.tuning.workers)
            return jobs, answer
        return start_walk(self.root, expected, sizes, cap=self.tuning.workers), answer

    # -- the change monitor (index/monitor.py) ----------------------------------------------

    def _monitored(self, files: int) -> bool:
        """Whether a root of ``files`` files gets a change monitor (``Tuning.monitor_files``)."""
        wanted = self.tuning.monitor_files
        return 0 < wanted <= files and sys.platform.startswith("linux")

    def _ask_monitor(self, files: int) -> Changes | None:
        """The root's monitor's answer since the stored position, a monitor started first when
        none answers; ``None`` for a small root or when no monitor can run."""
        if not self._monitored(files):
            return None
        # imported here: its sockets and processes are for large roots only
        from kiwifs.index import monitor

        epoch, position = self.monitor_position()
        answer = monitor.sync(self.root, epoch, position)
        if answer is None and monitor.start(self.root):
            answer = monitor.sync(self.root, None, None)
        return answer

    def monitor_position(self) -> tuple[str | None, int | None]:
        """The change monitor's epoch and position the rows were last brought up to (``None``:
        none stored, the next monitored walk is a full one)."""
        try:
            with self.reader() as conn:
                found = dict(conn.execute("SELECT key, value FROM monitor_position"))
        except sqlite3.OperationalError:  # no such table: an index made before the monitor
            return None, None
        position = found.get("position")
        return found.get("epoch"), int(position) if position is not None else None

    def _store_position(self, answer: Changes | None) -> None:
        """Record that the rows hold every change the monitor had heard of at its answer (called
        once the walk that followed it is applied)."""
        if answer is None or self.monitor_position() == (answer.epoch, answer.position):
            return  # nothing new: no transaction for the usual command on a quiet root
        with self._transaction(rows=False) as conn:
            with keeping_stamp(conn):  # an index made before the table: made now
                conn.execute(POSITION_TABLE)
            conn.executemany(
                "INSERT OR REPLACE INTO monitor_position (key, value) VALUES (?, ?)",
                (("epoch", answer.epoch), ("position", str(answer.position))),
            )

    def _apply_walk(
        self,
        pending: PendingWalk | FolderJobs,
        progress: Progress | None,
        started: float | None = None,
        after_read: AfterRead | None = None,
    ) -> ReconcileStats:
        start = time.perf_counter() if started is None else started
        walked = pending.result()
        expected = pending.expected  # after the result: a narrowed walk may have widened
        gone = [k for k in expected if k not in walked.digests]
        known: dict[bytes, int | None] = {}
        if walked.changed or gone:
            with self.reader() as conn, snapshot(conn):
                for folder in [*walked.changed, *gone]:
                    known.update(conn.execute(FOLDER_ROWS, (folder,)))
        sigs = walked.state.sigs
        changed = [k for k, s in sigs.items() if known.get(k) != s]
        removed = [k for k in known if k not in sigs]
        missed = len(removed)
        if removed:
            self.apply((), removed)
        if changed:
            changed.sort()
            if known or expected or not self._bulk_into_empty(changed, walked.state, progress):
                with self.reader() as conn:
                    full = full_cover(conn, len(changed))
                with self._order.reading() as mark:  # before the first file is read
                    missed += self._fill(
                        changed, walked.state, progress, full, mark=mark, after_read=after_read
                    )
        if walked.changed or gone:
            self._store_digests(walked, gone)
        seconds = time.perf_counter() - start
        return ReconcileStats(len(changed), len(removed), walked.files, seconds, missed)

    def _bulk_into_empty(
        self, keys: list[bytes], walked: WalkState, progress: Progress | None
    ) -> bool:
        """Fill a new, empty index the way a rebuild does (a first start, a schema change);
        False, doing nothing, when some row exists (a write got in first)."""
        with self._lock:
            if self._writer.execute("SELECT 1 FROM files LIMIT 1").fetchone() is not None:
                return False
            self._echo.clear()
            self._bulk_load(keys, walked, progress)
        return True

    def _bulk_load(self, keys: list[bytes], walked: WalkState, progress: Progress | None) -> None:
        """Parse ``keys`` in parallel and load them into the empty tables (lock held)."""
        with self._parse(keys, walked) as rows:
            self._load(rows, len(keys), progress)

    def _parse(
        self, keys: list[bytes], walked: WalkState, workers: int | None = None
    ) -> ParsedRows:
        """The rows of ``keys``, parsed from now on by worker processes (:mod:`index.build`)."""
        from kiwifs.index.build import (  # process pools: only bulk needs them
            Samples,
            parsed,
        )

        root = os.fspath(self.root)
        samples = Samples(root, self.real_root, keys)
        words = samples.column_words() if self.tuning.stored_columns else ()
        count = usable_cpus(self.tuning.workers) if workers is None else workers
        return parsed(
            root,
            self.real_root,
            keys,
            walked.errors,
            count,
            dictionaries=samples.dictionaries(),
            typed=self.link_fields,
            words=words,
        )

    def _load(self, rows: ParsedRows, total: int, progress: Progress | None) -> None:
        from kiwifs.index.build import load

        cover, optimize = self.tuning.cover_while_loading, self.tuning.fts_optimize
        load(self._writer, rows, total, progress, rows.dictionaries, cover, rows.words, optimize)
        self.generation += 1
        self.rows_generation += 1

    def _same_bytes(
        self, keys: list[bytes], walked: WalkState
    ) -> tuple[list[bytes], list[tuple[bytes, str, os.stat_result, int | None]]]:
        """``keys`` split into those to read in full and those whose file holds the bytes its
        row holds (with the file's stat): for these only the stat is new.

        A reconcile meets such files all the time: a row stored within the racy window has no
        signature, and every reconcile reads its file again until it is old enough to trust.
        Parsing it and storing the whole row again (its words out of FTS5 and back in, its text
        compressed, nine indexes) cost about 1 ms a file, as much as indexing the write itself.
        """
        with self.reader() as conn:
            etags = stored_etags(conn, keys)
        full: list[bytes] = []
        same: list[tuple[bytes, str, os.stat_result, int | None]] = []
        for key in keys:
            etag = etags.get(key)
            if etag is not None and key not in walked.errors:
                found = same_bytes_stat(abs_path(self.root, key), self.real_root, etag)
                if found is not None:
                    same.append((key, etag, *found))
                    continue
            full.append(key)
        return full, same

    def _restat(
        self, conn: sqlite3.Connection, same: list[tuple[bytes, str, os.stat_result, int | None]]
    ) -> list[tuple[bytes, FileRecord | None]]:
        """Store the new stat of files found holding their row's bytes (writer lock held).
        Returns the files read in full instead, because the file or its row changed since (a
        write got in): each key with its record as the file is now, ``None`` when it is gone."""
        again: list[bytes] = []
        moved: list[tuple[int | None, int, bytes]] = []
        etags = stored_etags(conn, [key for key, _, _, _ in same])
        for key, etag, st, sig in same:
            try:
                now = raw_sig(os.stat(abs_path(self.root, key)))
            except OSError:
                now = None
            if etags.get(key) != etag or now != raw_sig(st):
                again.append(key)
            else:
                moved.append((sig, st.st_mtime_ns, key))
        conn.executemany(
            "UPDATE files SET sig = ?, mtime_ns = ? WHERE key = ?"
            " AND (sig IS NOT ? OR mtime_ns IS NOT ?)",
            [(sig, mtime, key, sig, mtime) for sig, mtime, key in moved],
        )
        return [(key, self._read_now(key)) for key in again]

    def _store_digests(self, walked: FolderWalk, gone: Iterable[bytes]) -> None:
        """Record what the changed folders looked like when their rows were made to match.

        A folder with a racy row (``sig`` NULL) gets no digest, so it is compared again.
        """
        with self._transaction(rows=False) as conn:
            conn.executemany("DELETE FROM dirs WHERE key = ?", ((k,) for k in gone))
            rows = []
            for folder in walked.changed:
                racy = conn.execute(RACY_ROW, (folder,)).fetchone() is not None
                digest = None if racy else walked.digests[folder]
                rows.append((folder, digest, walked.counts[folder]))
            conn.executemany(
                "INSERT OR REPLACE INTO dirs (key, digest, entries) VALUES (?, ?, ?)", rows
            )

    def _fill(
        self,
        keys: list[bytes],
        walked: WalkState,
        progress: Progress | None,
        full: bool,
        fresh: bool = False,
        mark: int | None = None,
        after_read: AfterRead | None = None,
    ) -> int:
        """Read and store ``keys`` in batches; ``full`` recomputes all coverage at the end and
        ``fresh`` says the tables are empty (a rebuild), so no old rows need clearing.

        ``mark`` is a reconcile's count of refresh stores taken before its first read (see
        :mod:`~kiwifs.index.storeorder`): a path a refresh stored since keeps that row.
        ``after_read`` is called with each batch's keys between its reads and its store.

        Returns how many rows went or took new content although their file's stat is old
        enough to trust (:attr:`ReconcileStats.missed`; 0 when ``fresh``)."""
        total = len(keys)
        done = 0
        missed = 0
        for start in range(0, total, BATCH):
            chunk = keys[start : start + BATCH]
            same: list[tuple[bytes, str, os.stat_result, int | None]] = []
            read = chunk
            if not fresh and self.tuning.stat_only:  # else parsed, the whole row stored again
                read, same = self._same_bytes(chunk, walked)
            records = [self._record(k, walked.errors.get(k)) for k in read]
            gone = [k for k, r in zip(read, records, strict=True) if r is None]
            if after_read is not None:
                after_read(chunk)
            self._forget_echoes(records, bool(gone))
            with self._transaction(rows=False) as conn:
                if mark is not None and (newer := self._order.stored_since(mark)):
                    # a refresh read these after their write and stored them since: its rows
                    # are at least as new as what this batch read
                    same = [entry for entry in same if entry[0] not in newer]
                    records = [r for r in records if r is None or r.key not in newer]
                    gone = [key for key in gone if key not in newer]
                again = self._restat(conn, same)
                self._forget_echoes((r for _, r in again), any(r is None for _, r in again))
                records += [r for _, r in again]
                gone += [key for key, r in again if r is None]
                kept = [r for r in records if r is not None]
                moved = fresh
                if not fresh:
                    kept, gone = self._settled(kept, gone)
                    news = list(content_changes(conn, kept))
                    moved = bool(gone or news)
                    missed += len(gone) + sum(r.sig is not None for r in news)
                touched = Touched(full, self.tuning.texts_last, self.link_fields)
                for key in gone:
                    delete_row(conn, key, touched)
                for record in kept:
                    upsert_row(conn, record, touched, fresh)
                touched.finish(conn)
            self.rows_generation += moved
            done += len(chunk)
            if progress:
                progress(done, total)
        if full:
            with self._transaction() as conn:
                conn.execute(COVER_SQL)
        return missed
