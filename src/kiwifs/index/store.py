"""The file rows stored: records applied in one transaction, each checked against its file
first; paths refreshed (the write pipeline's hook, the watcher); the watcher's echo of a write
the index already holds recognised by its blob id without SQL.

Files are read outside the writer lock, so whoever stores a record checks, under the lock, that
its file still has the stat it was read with (:meth:`RowStore._settled`): no row is ever older
than a write whose refresh already ran. A whole root is stored by a walk
(:class:`~kiwifs.index.core.Index`), through the same checks, and a reconcile stores nothing for
a path a refresh stored since it began reading (:mod:`~kiwifs.index.storeorder`), which holds
even where a stat signature proves nothing.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.forking import usable_cpus
from kiwifs.base.limits import MAX_READ_BYTES
from kiwifs.base.paths import open_regular, read_all
from kiwifs.git.repo import blob_id
from kiwifs.index.connections import BUSY_TIMEOUT, Database
from kiwifs.index.folders import abs_path, probe
from kiwifs.index.linkparse import DEFAULT_TYPED_FIELDS
from kiwifs.index.record import FileRecord, error_record, key_to_rel, path_key, raw_sig, read_record
from kiwifs.index.rows import Touched, delete_row, upsert_row
from kiwifs.index.search import columnkeeping, feedback
from kiwifs.index.search.answers import AnswerCache
from kiwifs.index.search.termcolumns import TermColumns
from kiwifs.index.storeorder import StoreOrder
from kiwifs.tuning import Tuning

if TYPE_CHECKING:
    from kiwifs.index.search.keyword import SearchResults

ECHO_MEMORY = 4096  # recently indexed paths whose blob id the watcher can check without SQL
CONTENT_CHUNK = 500  # keys per lookup when comparing records with their rows


class RowStore(Database):
    """The index database with its file rows stored by record or by path. Thread-safe."""

    def __init__(
        self,
        root: Path,
        path: Path | None = None,
        busy_timeout: float = BUSY_TIMEOUT,
        tuning: Tuning | None = None,
    ) -> None:
        super().__init__(root, path, busy_timeout, tuning)
        self.real_root = os.path.realpath(self.root)  # what every read is checked against
        # keyword search's in-memory word counts, summed by up to one thread a usable CPU
        self.columns = TermColumns(usable_cpus(self.tuning.workers))
        # a server's recent keyword search answers, dropped at any change of the index
        self.answers: AnswerCache[SearchResults] = AnswerCache(self.tuning.search_cache)
        self._echo: dict[str, str] = {}
        self._order = StoreOrder()  # which paths refreshes stored while a reconcile reads
        # the frontmatter fields read as typed links (``[links] typed_fields``, set by the
        # keeper from the config); a change is seen by the rows stored after it (a reindex)
        self.link_fields: tuple[str, ...] = DEFAULT_TYPED_FIELDS

    def close(self) -> None:
        self.columns.close()
        self.answers.clear()
        super().close()

    def file_count(self) -> int:
        """How many file rows the index holds (how large the root is)."""
        with self.reader() as conn:
            return int(conn.execute("SELECT count(*) FROM files").fetchone()[0])

    def warm_search(self) -> None:
        """Load what keyword search keeps in memory for every query (each document's length,
        the columns a rebuild kept), and give the feedback the document counts of the column
        words: done by a server before it reports ready, so its first searches do not pay it
        (a question's feedback counted a third of its words' documents anew, the common words
        of its best pages)."""
        with self.reader() as conn:
            conn.execute("BEGIN")  # one snapshot: the log, the totals and the lengths agree
            try:
                feedback.note_counts(conn, self.columns.load(conn))
            finally:
                conn.rollback()

    def keep_columns(self, behind: int | None = None) -> bool:
        """Keep this process's term columns in the index in place of the kept ones, when
        those are ``behind`` (default :data:`~kiwifs.index.search.columnkeeping.KEEP_BEHIND`)
        log entries or more behind or cannot be used (a server, now and then:
        :mod:`index.search.columnkeeping`); True when kept."""
        writer = functools.partial(self._transaction, rows=False)
        if behind is None:
            behind = columnkeeping.KEEP_BEHIND
        return columnkeeping.keep_again(self.columns, self.reader, writer, behind)

    def _forget(self) -> None:
        self._echo.clear()
        self.columns.clear()  # a new file: its row ids mean other documents
        self.answers.clear()

    # -- storing rows -----------------------------------------------------------------------

    def apply(self, records: Iterable[FileRecord], removed: Iterable[bytes] = ()) -> None:
        """Store ``records`` and drop the rows of ``removed`` keys in one transaction."""
        records = list(records)
        removed = list(removed)
        self._forget_echoes(records, bool(removed))
        with self._lock:  # counted once committed, before any reconcile can store again
            with self._transaction(rows=False) as conn:
                records, removed = self._settled(records, removed)
                moved = content_moved(conn, records, removed)
                touched = Touched(texts_last=self.tuning.texts_last, typed_fields=self.link_fields)
                for key in removed:
                    delete_row(conn, key, touched)
                for record in records:
                    upsert_row(conn, record, touched, fresh=False)
                touched.finish(conn)
            self._order.stored([*(r.key for r in records), *removed])
        self.rows_generation += moved

    def _settled(
        self, records: list[FileRecord], removed: list[bytes]
    ) -> tuple[list[FileRecord], list[bytes]]:
        """The rows to store, checked against the files as they are now (writer lock held).

        Files are read before the lock is taken, so a reconcile (or a slower refresh) may hold
        a record read just before a write whose own refresh has stored the newer row since.
        Storing the older record after it would leave the index stale until the next
        reconcile. Every file write is followed by its refresh, so it is enough that no store
        puts down a record the file no longer matches: a record whose file's stat moved since
        it was read is read again here, and a removal whose file is back becomes its record.
        Costs one ``stat`` per record; the re-reads happen only in a race.
        """
        kept: list[FileRecord] = []
        gone: list[bytes] = []
        for record in records:
            if record.stamp is None or self._still(record):
                kept.append(record)
            elif (again := self._read_now(record.key)) is not None:
                kept.append(again)
            else:
                gone.append(record.key)
        for key in removed:
            if (back := self._read_now(key)) is not None:
                kept.append(back)
            else:
                gone.append(key)
        return kept, gone

    def _still(self, record: FileRecord) -> bool:
        """True when the file of ``record`` has the stat it had when it was read."""
        try:
            return raw_sig(os.stat(abs_path(self.root, record.key))) == record.stamp
        except OSError:
            return False

    def _read_now(self, key: bytes) -> FileRecord | None:
        """The record of the file at ``key`` as it is now; ``None`` when it is no knowledge
        file any more (gone, under a symlinked folder, a folder now)."""
        found = probe(self.root, key_to_rel(key))
        if found is None or not found.exists:
            return None
        if found.error is not None:
            return error_record(found.key, found.rel, found.error)
        return read_record(found.key, found.rel, abs_path(self.root, found.key), self.real_root)

    def _record(self, key: bytes, error: str | None) -> FileRecord | None:
        rel = key_to_rel(key)
        if error is not None:
            return error_record(key, rel, error)
        return read_record(key, rel, abs_path(self.root, key), self.real_root)

    def refresh(self, rels: Iterable[str]) -> int:
        """Bring the rows of these paths up to date (the pipeline hook and the watcher)."""
        records: list[FileRecord] = []
        removed: list[bytes] = []
        for rel in rels:
            key = path_key(rel)
            if key is None:
                continue
            record = self._read_now(key)
            if record is None:
                removed.append(key)
            else:
                records.append(record)
        if records or removed:
            self.apply(records, removed)
        for record in records:
            self._remember_echo(record.facts.path, record.etag)
        return len(records) + len(removed)

    def _forget_echoes(self, records: Iterable[FileRecord | None], removals: bool) -> None:
        """Rows about to change: their remembered blob ids no longer say what the index holds."""
        if removals:
            self._echo.clear()
            return
        for record in records:
            if record is not None:
                self._echo.pop(record.facts.path, None)

    def _remember_echo(self, rel: str, etag: str) -> None:
        """Note the bytes just indexed for ``rel``, so the watcher's echo costs one read."""
        if len(self._echo) >= ECHO_MEMORY:
            self._echo.clear()
        if etag:
            self._echo[rel] = etag

    def refresh_if_changed(self, rels: Iterable[str]) -> int:
        """The watcher's refresh: skip files whose bytes the index already holds.

        Every write through the pipeline is indexed in the same step and then echoes back as a
        filesystem event; re-parsing and re-writing those rows would double the cost of a
        write. The check is by content (the git blob id), so an edit that keeps size and mtime
        is still seen.
        """
        wanted = list(rels)
        stored: dict[str, str] = {r: e for r in wanted if (e := self._echo.get(r)) is not None}
        unknown = [r for r in wanted if r not in stored]
        with self.reader() as conn:
            for start in range(0, len(unknown), 500):
                chunk = unknown[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(f"SELECT path, etag FROM files WHERE path IN ({marks})", chunk)
                stored.update((path, etag) for path, etag in rows)
        changed = [rel for rel in wanted if not self._holds(rel, stored.get(rel))]
        return self.refresh(changed) if changed else 0

    def _holds(self, rel: str, etag: str | None) -> bool:
        """True when the file at ``rel`` is a regular file whose bytes have blob id ``etag``."""
        if not etag:
            return False
        try:
            fd, st = open_regular(self.root / rel, self.real_root)
        except OSError:
            return False
        if st.st_size > MAX_READ_BYTES:  # grown past the limit: not read, its row changes
            os.close(fd)
            return False
        try:
            return blob_id(read_all(fd, st.st_size)) == etag
        except OSError:
            return False


def content_moved(
    conn: sqlite3.Connection, records: Sequence[FileRecord], removed: Sequence[bytes]
) -> bool:
    """False when every record holds the content its row already holds and nothing goes: a
    racy row read again once it is old enough to trust changes no answer derived from the rows
    (see :attr:`~kiwifs.index.connections.Database.rows_generation`)."""
    return bool(removed) or next(content_changes(conn, records), None) is not None


def content_changes(
    conn: sqlite3.Connection, records: Sequence[FileRecord]
) -> Iterator[FileRecord]:
    """The records whose content their row does not hold yet (a new file, or new bytes),
    looked up a chunk at a time, so that stopping at the first one costs one query."""
    for start in range(0, len(records), CONTENT_CHUNK):
        chunk = records[start : start + CONTENT_CHUNK]
        stored = stored_etags(conn, [r.key for r in chunk])
        yield from (r for r in chunk if not r.etag or stored.get(r.key) != r.etag)


def stored_etags(conn: sqlite3.Connection, keys: Sequence[bytes]) -> dict[bytes, str]:
    """The blob id each row of ``keys`` holds (rows that hold none, unreadable files, left
    out), looked up :data:`CONTENT_CHUNK` keys a query."""
    found: dict[bytes, str] = {}
    for start in range(0, len(keys), CONTENT_CHUNK):
        chunk = keys[start : start + CONTENT_CHUNK]
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT key, etag FROM files WHERE key IN ({marks})"
        found.update((key, etag) for key, etag in conn.execute(sql, chunk) if etag)
    return found
