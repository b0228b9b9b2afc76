"""Term columns made by a rebuild and kept in the index, so a server's first searches find
them made (:mod:`index.search.termcolumns`).

Making a word's column in a server asks FTS5 to rank the word over every document holding it:
about a microsecond a match, over a second for a common word at a million documents, which an
agent's first questions after a start would wait for, one new word at a time. A rebuild reads
every text anyway, so it counts the root's most common words there (:mod:`index.search.wordcounts`,
a few array operations a batch of texts, in the parsing workers), and keeps the columns, and every
document's number of words, in two tables:

* ``column_words (word, counts, over)``: a word's count in every document by row id, one byte
  each (255 at most), compressed (zstd); ``over``, the documents holding it more than 255 times
  (a consolidation page citing hundreds of runs) with their counts, or NULL;
* ``column_meta (key, value)``: ``lengths``, each document's number of words (``-1``: no text),
  compressed, and ``log``, the text log's last entry when they were made (``fts_log``).

**Checked before kept.** A rebuild keeps them only when its count of words in every document
equals FTS5's own (``fts_docsize``), so the texts were split as FTS5 split them; each form of a
word was stemmed by FTS5 itself.

**Current when read.** A server reads them once (before it reports ready) and catches them up
with the documents logged since (:mod:`index.changelog`), as it does its own columns; when the log
no longer reaches back to them, or the totals disagree with FTS5's, they are not used and
columns are made on demand. A rebuild empties both tables first, so no column outlives the
index it was made from.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.index import changelog
from kiwifs.index.schema import COLUMN_TABLES
from kiwifs.index.search import bm25

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from kiwifs.index.search.wordcounts import WordCounter

# zstd: a column of small counts compresses ~2.2x at level 1, 10 % better than at the default
# level 3 (whose matcher finds nothing to gain in such noise), and reads back at ~1 GB/s
LEVEL = 1

# A counted row: the words' counts in one text (one byte each, 255 at most), its number of
# words, and the (word index, count) of each word counted more than 255 times in it.
Counted = tuple[bytes, int, tuple[tuple[int, int], ...]]


@dataclass
class Stored:
    """Columns read back: each document's length (``-1``: not in the text index), the log
    entry they are current at, and the columns by word."""

    lengths: Any  # NDArray[np.int64]
    log: int
    columns: dict[str, Any]  # word -> NDArray[np.uint8]


class ColumnBuilder:
    """The columns of a rebuild's load, filled as its rows get their ids."""

    def __init__(self, words: Sequence[str], capacity: int) -> None:
        import numpy

        self.np = numpy
        self.words = list(words)
        self._counts = numpy.zeros((len(self.words), capacity + 1), dtype=numpy.uint8)
        self._lengths = numpy.full(capacity + 1, -1, dtype=numpy.int64)
        self._big: dict[int, dict[int, int]] = {}  # word -> file id -> a count over 255
        self._ids: list[int] = []
        self._rows: list[bytes] = []

    def add(self, file_id: int, counted: Counted) -> None:
        row, length, big = counted
        if file_id >= len(self._lengths):
            self._grow(file_id + 1)
        self._ids.append(file_id)
        self._rows.append(row)
        self._lengths[file_id] = length
        for word, count in big:
            self._big.setdefault(word, {})[file_id] = count

    def flush(self) -> None:
        """Put the rows added since the last flush into the columns (one array operation)."""
        if not self._ids:
            return
        np = self.np
        rows = np.frombuffer(b"".join(self._rows), dtype=np.uint8)
        self._counts[:, self._ids] = rows.reshape(len(self._ids), len(self.words)).T
        self._ids, self._rows = [], []

    def _grow(self, size: int) -> None:
        np = self.np
        size = max(size, len(self._lengths) * 5 // 4)
        more = size - len(self._lengths)
        self._counts = np.concatenate(
            [self._counts, np.zeros((len(self.words), more), dtype=np.uint8)], axis=1
        )
        self._lengths = np.concatenate([self._lengths, np.full(more, -1, dtype=np.int64)])

    def save(self, conn: sqlite3.Connection) -> bool:
        """Keep the columns in the index (inside the load's transaction), if every document's
        number of words is FTS5's; False: they disagree, nothing kept."""
        self.flush()
        clear(conn)
        if not self._agrees(conn):
            return False
        pack = packer()
        rows = (
            (word, pack.compress(self._counts[i].tobytes()), self._over(pack, i))
            for i, word in enumerate(self.words)
        )
        lengths = pack.compress(self._lengths.astype(self.np.int32).tobytes())
        _write(conn, rows, lengths, changelog.last(conn, "fts_log"))
        return True

    def _over(self, packer: Any, word: int) -> bytes | None:
        """The documents holding ``word`` over 255 times and their counts (int32 pairs,
        compressed), or ``None``."""
        big = self._big.get(word)
        if not big:
            return None
        pairs = self.np.array(sorted(big.items()), dtype=self.np.int32)
        return bytes(packer.compress(pairs.tobytes()))

    def _agrees(self, conn: sqlite3.Connection) -> bool:
        """Whether every document's number of words, as counted, is FTS5's."""
        fts = bm25.document_lengths(self.np, conn)
        if len(fts) > len(self._lengths):
            return False
        beyond = self._lengths[len(fts) :]  # past FTS5's last document: none counted either
        return bool(self.np.array_equal(fts, self._lengths[: len(fts)]) and (beyond < 0).all())


def stamp(conn: sqlite3.Connection) -> None:
    """Note the schema the rebuild leaves (SQLite's ``schema_version``, once its last index is
    made): any later change of the schema (a rebuild by any version of kiwifs, even one that
    does not know these tables and leaves them) makes :func:`restore` refuse the columns."""
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute(
        "INSERT OR REPLACE INTO column_meta (key, value) VALUES ('schema', ?)",
        (str(version).encode(),),
    )


@contextlib.contextmanager
def keeping_stamp(conn: sqlite3.Connection) -> Iterator[None]:
    """Run schema statements of kiwifs's own that leave the texts alone (a table made for an
    index built before it existed) without making the kept columns look stale: when the stamp
    was current before them, it is moved to the schema they leave. Inside the caller's write
    transaction. A statement that changes nothing (``IF NOT EXISTS``) moves nothing."""
    before = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    yield
    if int(conn.execute("PRAGMA schema_version").fetchone()[0]) == before:
        return
    with contextlib.suppress(sqlite3.OperationalError):  # no column tables: nothing to keep
        found = conn.execute("SELECT value FROM column_meta WHERE key = 'schema'").fetchone()
        if found is not None and int(found[0]) == before:
            stamp(conn)


def restore(conn: sqlite3.Connection) -> Stored | None:
    """The columns a rebuild kept, as made (not yet caught up); ``None`` when there are none
    (a root too small, an index made before they were kept), when the schema changed since
    (:func:`stamp`), or when they do not read back whole."""
    try:
        meta = dict(conn.execute("SELECT key, value FROM column_meta"))
        if not {"lengths", "log", "schema"} <= meta.keys():
            return None
        if int(meta["schema"]) != int(conn.execute("PRAGMA schema_version").fetchone()[0]):
            return None
        words = conn.execute("SELECT word, counts, over FROM column_words").fetchall()
    except (sqlite3.OperationalError, ValueError):  # an index made before these tables
        return None
    try:
        return _unpacked(meta, words)
    except (ValueError, TypeError):  # a blob that does not read back: made on demand instead
        return None


def _unpacked(meta: dict[str, Any], words: list[tuple[Any, ...]]) -> Stored | None:
    import numpy as np
    import zstandard

    unpacker = zstandard.ZstdDecompressor()
    try:
        lengths = np.frombuffer(unpacker.decompress(meta["lengths"]), dtype=np.int32)
    except zstandard.ZstdError:
        return None
    columns: dict[str, NDArray[Any]] = {}
    for word, blob, over in words:
        column: NDArray[Any]
        try:
            column = np.frombuffer(unpacker.decompress(blob), dtype=np.uint8)
            pairs = None
            if over is not None:
                pairs = np.frombuffer(unpacker.decompress(over), dtype=np.int32).reshape(-1, 2)
        except zstandard.ZstdError:
            return None
        if len(column) != len(lengths):
            return None
        if pairs is None:
            column = column.copy()  # writable: writes are counted into it
        else:
            if len(pairs) and (pairs.min() < 0 or pairs[:, 0].max() >= len(column)):
                return None
            top = int(pairs[:, 1].max()) if len(pairs) else 0
            column = column.astype(np.int16 if top <= 32767 else np.int32)
            column[pairs[:, 0]] = pairs[:, 1]
        columns[str(word)] = column
    return Stored(lengths.astype(np.int64), int(meta["log"]), columns)


@dataclass
class Packed:
    """Columns packed to be kept again (:mod:`index.search.columnkeeping`): the schema version
    and log entry they are current at, every document's length and each word's column, as
    :func:`restore` reads them."""

    schema: int
    log: int
    lengths: bytes
    words: list[tuple[str, bytes, bytes | None]]  # (word, counts, over)


def packer() -> Any:
    import zstandard

    return zstandard.ZstdCompressor(level=LEVEL)


def pack_column(np: Any, pack: Any, column: Any) -> tuple[bytes, bytes | None]:
    """A column (counts by row id, any integer type) as kept: one byte a document, and the
    documents holding the word over 255 times with their counts (int32 pairs, by row id)."""
    if column.dtype == np.uint8:
        return bytes(pack.compress(column.tobytes())), None
    over = np.flatnonzero(column > 255)
    small = np.minimum(column, 255).astype(np.uint8)
    if not len(over):
        return bytes(pack.compress(small.tobytes())), None
    pairs = np.column_stack([over, column[over]]).astype(np.int32)
    return bytes(pack.compress(small.tobytes())), bytes(pack.compress(pairs.tobytes()))


def due(conn: sqlite3.Connection, behind: int) -> list[str]:
    """The words of the kept columns when they should be kept again: they cannot be restored
    (made for another schema, their log entry missing, past the log's end or trimmed from it),
    or they are ``behind`` log entries or more behind it, so that a server's next start would
    catch up that many documents (past ``changelog.KEEP``, not use them at all). Empty: none
    kept, or current enough."""
    try:
        meta = dict(conn.execute("SELECT key, value FROM column_meta"))
        words = [str(w) for (w,) in conn.execute("SELECT word FROM column_words ORDER BY word")]
    except sqlite3.OperationalError:  # an index made before these tables
        return []
    if not words:
        return []
    last = changelog.last(conn, "fts_log")
    schema = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    try:
        log, stamped = int(meta["log"]), int(meta["schema"])
    except (KeyError, ValueError):
        return words
    first = conn.execute("SELECT min(seq) FROM fts_log").fetchone()[0]
    cut = first is not None and int(first) > log + 1  # the log no longer reaches back to them
    return words if stamped != schema or cut or log > last or last - log >= behind else []


def replace(conn: sqlite3.Connection, packed: Packed) -> bool:
    """Keep ``packed`` in place of the kept columns (inside the writer's transaction); False,
    keeping nothing, when the schema moved since they were packed (a rebuild came between)."""
    if int(conn.execute("PRAGMA schema_version").fetchone()[0]) != packed.schema:
        return False
    clear(conn)
    _write(conn, packed.words, packed.lengths, packed.log)
    stamp(conn)
    return True


def _write(
    conn: sqlite3.Connection,
    rows: Iterable[tuple[str, bytes, bytes | None]],
    lengths: bytes,
    log: int,
) -> None:
    """Store packed columns ``(word, counts, over)``, the packed lengths and the log entry they
    are current at, in emptied tables (inside the caller's transaction)."""
    conn.executemany("INSERT INTO column_words (word, counts, over) VALUES (?, ?, ?)", rows)
    conn.executemany(
        "INSERT INTO column_meta (key, value) VALUES (?, ?)",
        [("lengths", lengths), ("log", str(log).encode())],
    )


def clear(conn: sqlite3.Connection) -> None:
    """Forget the kept columns, making their tables if the index predates them (inside the
    caller's transaction)."""
    for statement in COLUMN_TABLES:
        conn.execute(statement)
    conn.execute("DELETE FROM column_words")
    conn.execute("DELETE FROM column_meta")


def counted_rows(counter: WordCounter, texts: Sequence[str]) -> list[Counted]:
    """Each text's counts of the counter's words, as a rebuild's worker sends them."""
    import numpy as np

    counts, lengths = counter.count(texts)
    small = np.minimum(counts, 255).astype(np.uint8)
    big: dict[int, list[tuple[int, int]]] = {}
    for row, word in np.argwhere(counts > 255).tolist():
        big.setdefault(row, []).append((word, int(counts[row, word])))
    return [(small[i].tobytes(), int(lengths[i]), tuple(big.get(i, ()))) for i in range(len(texts))]
