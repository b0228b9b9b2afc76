"""How many pages hold a word, counted up to a cap and kept across writes (the feedback's counts).

Feedback (:mod:`index.search.feedback`) weighs each word of a question's best pages by how many
pages hold it, and leaves out a word in more than ``cap`` pages: so it asks for the capped count
``min(pages holding it, cap + 1)``. FTS5 answers that by reading the word's matches up to
``cap + 1``: ~0.3 ms for a common word at a million pages, and the best pages' words are mostly
common ones (frontmatter, names, dates), some 150 counts a question. Kept while the text index
stood still, the counts were all lost at each write, so under ~25 writes a second every
question counted them again: 60–100 ms a search at 1M, against ~15 ms without writes.

**Kept across writes, still exact.** Every change of a page's words logs its id in ``fts_log``
in the same transaction (:mod:`index.changelog`), one entry a page, whatever process made it,
and a rebuild changes the schema version. So between two log positions ``a`` and ``b`` at most
``|b − a|`` pages changed their words, and a word's count moved by at most that much. A count
kept as ``(n, a)`` (at least ``n`` pages held the word at ``a``; exactly ``n`` when ``n`` is
under the reach it was counted to) answers at ``b``:

* ``b = a``: ``min(n, cap + 1)``, the count itself;
* ``n − |b − a| > cap``: ``cap + 1``, the word is still too common, whatever changed;
* otherwise FTS5 counts it again, this time up to ``cap + 1 +`` :data:`RECOUNT_SLACK`, so a
  common word asked again under writes is counted once per :data:`RECOUNT_SLACK` changes
  instead of once a change (counting 2,000 matches costs ~1.4× counting 200).

A word first met is counted to ``cap + 1`` only, as before (a server's first questions pay no
more). The counts the term columns know exactly (:meth:`note`) are kept whole, so the columns'
words stay refused across many writes. The counts are kept per database file and schema
version, at most :data:`MAX_COUNTS` words (then started afresh).
"""

from __future__ import annotations

import re
import sqlite3
import threading

MAX_COUNTS = 100_000  # words kept per database (then forgotten)
RECOUNT_SLACK = 1800  # a word counted again is counted this far past its cap
_COUNT_SQL = "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)"
_POSITION_SQL = (
    "SELECT (SELECT file FROM pragma_database_list), (SELECT schema_version FROM"
    " pragma_schema_version), (SELECT coalesce(max(seq), 0) FROM fts_log)"
)
_INDEXED = re.compile(r"[^\W_]+")


def document_count(conn: sqlite3.Connection, word: str, cap: int) -> int:
    """How many pages hold ``word``, counted up to ``cap + 1`` (enough to refuse it): the
    plain count, FTS5 asked every time."""
    if not _INDEXED.fullmatch(word):
        return 0  # not a token FTS5 can be asked for as a bareword string
    return int(conn.execute(_COUNT_SQL, (f'"{word}"', cap + 1)).fetchone()[0])


class _Book:
    """The counts kept for one database file in one schema: word → (count, log position)."""

    __slots__ = ("schema", "counts")

    def __init__(self, schema: int) -> None:
        self.schema = schema
        self.counts: dict[str, tuple[int, int]] = {}


_books: dict[str, _Book] = {}
_lock = threading.Lock()


class DocumentCounts:
    """The capped document counts of one read snapshot (make it inside the read transaction
    the counts are asked in, so the log position read is the snapshot's)."""

    def __init__(self, conn: sqlite3.Connection, cap: int) -> None:
        name, schema, seq = conn.execute(_POSITION_SQL).fetchone()
        self._conn = conn
        self.cap = cap
        self._seq = int(seq)
        with _lock:
            book = _books.get(name)
            if book is None or book.schema != schema or len(book.counts) > MAX_COUNTS:
                book = _books[name] = _Book(schema)
        self._book = book

    def of(self, word: str) -> int:
        """``min(pages holding word, cap + 1)`` in this snapshot."""
        cap = self.cap
        kept = self._book.counts.get(word)
        reach = cap + 1
        if kept is not None:
            count, at = kept
            moved = abs(self._seq - at)
            if not moved:
                return min(count, cap + 1)
            if count - moved > cap:
                return cap + 1
            reach += RECOUNT_SLACK  # asked again under writes: count further this time
        if not _INDEXED.fullmatch(word):
            return 0
        count = document_count(self._conn, word, reach - 1)
        self._book.counts[word] = (count, self._seq)
        return min(count, cap + 1)

    def note(self, counts: dict[str, int]) -> None:
        """Keep ``counts`` (words' exact numbers of pages in this snapshot) as if counted."""
        seq, kept = self._seq, self._book.counts
        for word, count in counts.items():
            kept[word] = (count, seq)
