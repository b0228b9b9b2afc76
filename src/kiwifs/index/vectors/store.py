"""The embedding store beside the index: what is queued, how it is embedded, what it holds.

The triggers of :mod:`index.vectorschema` queue a file's content whenever its row is written;
:meth:`VectorStore.embed_ready` takes due queue entries, cuts each page into chunks
(:mod:`index.vectors.chunking`), embeds them and stores the vectors in one transaction. A failure
leaves the entry queued with its attempt count, error and a next try (backoff doubling from
:data:`RETRY_FIRST` to :data:`RETRY_MAX`); nothing is dropped. The server runs these rounds in
a background worker (:mod:`index.vectors.worker`); one-shot commands run them before answering.

The store checks, each round, that the database holds vectors of *its* embedder and chunking
(``vec_meta.identity``); vectors made another way are thrown away and every page is queued again.
A reset index (a corrupt file rebuilt) is found the same way and filled again.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.config import ChunkConfig
from kiwifs.index.core import Index, Progress
from kiwifs.index.texts import unpack
from kiwifs.index.vectors.chunking import Chunk, chunk_text
from kiwifs.index.vectors.embedders import Embedder, _numpy, chunk_words
from kiwifs.index.vectorschema import (
    NEW_GENERATION,
    QUEUE_MISSING,
    add_vector_upkeep,
    has_vector_upkeep,
    log_changed,
)

if TYPE_CHECKING:
    from kiwifs.index.vectors.embedders import Matrix

log = logging.getLogger(__name__)

ROUND_PAGES = 64
RETRY_FIRST = 2.0
RETRY_MAX = 600.0
ERROR_CHARS = 500

DUE = (
    "SELECT q.etag, (SELECT b.text FROM files f JOIN bodies b ON b.id = f.id"
    " WHERE f.etag = q.etag AND f.unreadable = 0 LIMIT 1)"
    " FROM vec_queue q WHERE q.next_try <= ? ORDER BY q.next_try, q.etag LIMIT ?"
)
FAIL = (
    "UPDATE vec_queue SET attempts = attempts + 1, error = ?,"
    " next_try = ? + min(?, ? * (1 << min(attempts, 20))) WHERE etag = ?"
)
COUNT_FAILURE = (
    "INSERT INTO vec_meta (key, value) VALUES ('failures', '1') ON CONFLICT (key)"
    " DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
)


@dataclass(frozen=True)
class VectorStatus:
    """What ``/health`` shows: pages with vectors, waiting, failing; failed attempts ever."""

    enabled: bool
    embedder: str = ""
    embedded: int = 0
    pending: int = 0
    failed: int = 0
    chunks: int = 0
    failures: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if not self.enabled:
            return {"enabled": False}
        return {
            "enabled": True,
            "embedder": self.embedder,
            "embedded": self.embedded,
            "pending": self.pending,
            "failed": self.failed,
            "chunks": self.chunks,
            "failures": self.failures,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class EmbedRound:
    """One round's outcome: pages embedded, pages that failed (still queued), entries dropped
    because no file has that content any more."""

    embedded: int = 0
    failed: int = 0
    dropped: int = 0

    @property
    def attempted(self) -> int:
        return self.embedded + self.failed + self.dropped

    def __add__(self, other: EmbedRound) -> EmbedRound:
        return EmbedRound(
            self.embedded + other.embedded, self.failed + other.failed, self.dropped + other.dropped
        )


class VectorStore:
    """Embeddings of one index made by one embedder with one chunking."""

    def __init__(
        self,
        index: Index,
        embedder: Embedder,
        chunk: ChunkConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.index = index
        self.embedder = embedder
        # a chunk no longer than the model reads (the identity below notes the cap)
        self.chunk = ChunkConfig(*chunk_words(chunk.size, chunk.overlap, embedder.window_words))
        self.clock = clock
        self.identity = f"{embedder.name}|words={self.chunk.size}/{self.chunk.overlap}"

    # -- keeping the tables right -----------------------------------------------------------

    def ensure_ready(self) -> None:
        """Make the database hold vectors of this embedder, queueing whatever lacks them."""
        with self.index.reader() as conn:
            found = dict(conn.execute("SELECT key, value FROM vec_meta"))
            indexed = has_vector_upkeep(conn)
        if found.get("identity") == self.identity and found.get("enabled") == "1" and indexed:
            return
        with self.index.transaction() as conn:
            add_vector_upkeep(conn)
            found = dict(conn.execute("SELECT key, value FROM vec_meta"))
            if found.get("identity") != self.identity:
                _wipe(conn)
            conn.executemany(
                "INSERT OR REPLACE INTO vec_meta (key, value) VALUES (?, ?)",
                [("identity", self.identity), ("enabled", "1")],
            )
            conn.execute(QUEUE_MISSING)

    def rebuild(self, progress: Progress | None = None) -> EmbedRound:
        """Throw every vector away and embed every page again (``kiwifs reindex --vector``)."""
        self.ensure_ready()
        with self.index.transaction() as conn:
            _wipe(conn)
            conn.execute(QUEUE_MISSING)
        done = self.embed_all(progress)
        self.collect_garbage()
        return done

    def collect_garbage(self) -> int:
        """Drop vectors of content no file has any more; returns the chunks removed."""
        with self.index.transaction() as conn:
            gone = "etag NOT IN (SELECT etag FROM files)"
            etags = [
                e for (e,) in conn.execute(f"SELECT DISTINCT etag FROM vec_chunks WHERE {gone}")
            ]
            removed = conn.execute(f"DELETE FROM vec_chunks WHERE {gone}").rowcount
            conn.execute(f"DELETE FROM vec_done WHERE {gone}")
            conn.execute(f"DELETE FROM vec_queue WHERE {gone}")
            log_changed(conn, etags)
        return removed

    # -- embedding --------------------------------------------------------------------------

    def embed_all(self, progress: Progress | None = None) -> EmbedRound:
        """Run rounds until every entry due when the call began is embedded or has failed.

        Entries that fail get a next try after the start, so the loop ends even while an
        embedder keeps failing; they wait for the worker or the next command.
        """
        self.ensure_ready()
        start = self.clock()
        total = self.due_count(start)
        done = EmbedRound()
        if progress:
            progress(0, total)
        while True:
            step = self.embed_ready(due_by=start)
            done += step
            if progress:
                progress(min(done.attempted, total), max(total, done.attempted))
            if not step.attempted:
                return done

    def due_count(self, due_by: float | None = None) -> int:
        when = self.clock() if due_by is None else due_by
        with self.index.reader() as conn:
            row = conn.execute("SELECT count(*) FROM vec_queue WHERE next_try <= ?", (when,))
            row = row.fetchone()
        return int(row[0])

    def next_due(self) -> float | None:
        """When the earliest queued entry is due (``None``: the queue is empty)."""
        with self.index.reader() as conn:
            row = conn.execute("SELECT min(next_try) FROM vec_queue").fetchone()
        return None if row[0] is None else float(row[0])

    def embed_ready(self, limit: int = ROUND_PAGES, due_by: float | None = None) -> EmbedRound:
        """Embed up to ``limit`` pages due by ``due_by`` (default: now); failures stay queued
        with a later next try."""
        self.ensure_ready()
        now = self.clock() if due_by is None else due_by
        with self.index.reader() as conn:
            due = [(etag, unpack(conn, b)) for etag, b in conn.execute(DUE, (now, limit))]
        if not due:
            return EmbedRound()
        orphans = [etag for etag, body in due if body is None]
        pages = [
            (etag, chunk_text(body, self.chunk.size, self.chunk.overlap))
            for etag, body in due
            if body is not None
        ]
        stored, failures = self._embed_pages(pages)
        with self.index.transaction() as conn:
            conn.executemany("DELETE FROM vec_queue WHERE etag = ?", ((e,) for e in orphans))
            self._store(conn, stored)
            when = self.clock()
            for etag, error in failures:
                conn.execute(FAIL, (error[:ERROR_CHARS], when, RETRY_MAX, RETRY_FIRST, etag))
                conn.execute(COUNT_FAILURE)
        for etag, error in failures:
            log.warning("embedding %s failed (it stays queued): %s", etag, error)
        return EmbedRound(len(stored), len(failures), len(orphans))

    def _embed_pages(
        self, pages: list[tuple[str, list[Chunk]]]
    ) -> tuple[list[tuple[str, list[Chunk], Matrix | None]], list[tuple[str, str]]]:
        """Embed the pages' chunks in one call; if it fails, page by page to find the culprit."""
        try:
            return self._embed_together(pages), []
        except Exception as exc:  # noqa: BLE001 - any failure of a provider is retried later
            if len(pages) == 1:
                return [], [(pages[0][0], _error_text(exc))]
        stored: list[tuple[str, list[Chunk], Matrix | None]] = []
        failures: list[tuple[str, str]] = []
        for page in pages:
            ok, bad = self._embed_pages([page])
            stored += ok
            failures += bad
        return stored, failures

    def _embed_together(
        self, pages: list[tuple[str, list[Chunk]]]
    ) -> list[tuple[str, list[Chunk], Matrix | None]]:
        texts = [c.text for _, chunks in pages for c in chunks]
        if not texts:
            return [(etag, chunks, None) for etag, chunks in pages]
        matrix = self.embed_texts(texts)
        out: list[tuple[str, list[Chunk], Matrix | None]] = []
        row = 0
        for etag, chunks in pages:
            out.append((etag, chunks, matrix[row : row + len(chunks)] if chunks else None))
            row += len(chunks)
        return out

    def embed_texts(self, texts: Sequence[str]) -> Matrix:
        """Embed passages (chunks) and L2-normalise (so a dot product is the cosine)."""
        return self._normalised(self.embedder.embed(texts), texts)

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        """Embed queries as the model wants them (e5: ``query: ``), L2-normalised."""
        return self._normalised(self.embedder.embed_query(texts), texts)

    def _normalised(self, matrix: Matrix, texts: Sequence[str]) -> Matrix:
        np = _numpy()
        if matrix.shape[0] != len(texts):
            raise ValueError(f"embedder returned {matrix.shape[0]} vectors for {len(texts)} texts")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return (matrix / np.maximum(norms, 1e-12)).astype("<f4")  # type: ignore[no-any-return]

    def _store(
        self, conn: sqlite3.Connection, stored: list[tuple[str, list[Chunk], Matrix | None]]
    ) -> None:
        if not stored:
            return
        for etag, chunks, matrix in stored:
            conn.execute("DELETE FROM vec_chunks WHERE etag = ?", (etag,))
            if matrix is not None:
                conn.executemany(
                    "INSERT INTO vec_chunks (etag, seq, start, end, vector) VALUES (?, ?, ?, ?, ?)",
                    (
                        (etag, c.seq, c.start, c.end, matrix[i].tobytes())
                        for i, c in enumerate(chunks)
                    ),
                )
            conn.execute(
                "INSERT OR REPLACE INTO vec_done (etag, chunks) VALUES (?, ?)", (etag, len(chunks))
            )
            conn.execute("DELETE FROM vec_queue WHERE etag = ?", (etag,))
        log_changed(conn, [etag for etag, _, _ in stored])

    # -- reporting --------------------------------------------------------------------------

    def status(self) -> VectorStatus:
        self.ensure_ready()
        with self.index.reader() as conn:
            pending, failed = conn.execute(
                "SELECT count(*), coalesce(sum(q.attempts > 0), 0) FROM files f"
                " JOIN vec_queue q ON q.etag = f.etag WHERE f.unreadable = 0"
            ).fetchone()
            embedded = conn.execute(
                "SELECT count(*) FROM files f JOIN vec_done d ON d.etag = f.etag"
            ).fetchone()[0]
            chunks = conn.execute(
                "SELECT count(*) FROM vec_chunks WHERE etag IN (SELECT etag FROM files)"
            ).fetchone()[0]
            meta = dict(conn.execute("SELECT key, value FROM vec_meta"))
            last = conn.execute(
                "SELECT error FROM vec_queue WHERE attempts > 0 ORDER BY next_try DESC LIMIT 1"
            ).fetchone()
        return VectorStatus(
            enabled=True,
            embedder=self.embedder.name,
            embedded=int(embedded),
            pending=int(pending),
            failed=int(failed),
            chunks=int(chunks),
            failures=int(meta.get("failures", 0)),
            last_error=last[0] if last else None,
        )


def _wipe(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM vec_chunks")
    conn.execute("DELETE FROM vec_done")
    conn.execute("DELETE FROM vec_queue")
    conn.execute("DELETE FROM vec_log")
    conn.execute(NEW_GENERATION)


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
