"""The whole memory report as last printed, kept in the index until a file row changes.

A one-shot ``kiwifs memory report`` on a root of a million episodes prints 195 MB of JSON (every
episodic file, then the unmerged ones) or 20 MB of text, and making either from the rows takes
SQLite 1.4–2 s however few files changed: most of the command once the change monitor spares it
the walk (:mod:`index.monitor`). The printed bytes of the whole report (no page, no path prefix,
no live claim: those are made each time) are kept here, compressed, per episodes prefix and form
(``json``; ``text`` with its warnings beside it), and read back in a fraction of that. A report
of under a megabyte (:data:`MIN_BYTES`) is not kept: made again in milliseconds.

**Never stale.** Triggers on ``files`` delete every kept report in the same transaction as any
row inserted, changed (but for its stat alone, no part of a report) or deleted, so no writer
(this process, a server, an older kiwifs) can leave one behind. A report made from a snapshot
is kept only if no other connection committed since that snapshot began (``PRAGMA
data_version`` on the connection it was read on, checked under the write lock, which the
keeping transaction holds until it commits).

The table and triggers are made with the schema (:mod:`index.schema`), or, in an index made
before them, the first time a report is kept; they go with ``files`` when a rebuild drops it.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from kiwifs.index.schema import printed_schema
from kiwifs.index.search.storedcolumns import keeping_stamp

if TYPE_CHECKING:
    from kiwifs.index.core import Index

# The forms kept, each with the version of how kiwifs prints it: a release that prints the report
# otherwise moves its number, and a report an older kiwifs kept is then never read back.
JSON, TEXT = "json/1", "text/1"
LEVEL = 1  # zstd: the report's text is repetitive (~10x at level 1), and reads back at ~1 GB/s
# A report printed in fewer bytes is not kept: it is made again in milliseconds, and a one-shot
# command on a small root then loads no compressor (zstandard: 11 ms of its start)
MIN_BYTES = 1 << 20


def version(conn: sqlite3.Connection) -> int:
    """What ``conn`` knows of the commits of other connections (read before a snapshot)."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def read(conn: sqlite3.Connection, prefix: str, form: str) -> tuple[bytes, bytes, int] | None:
    """The kept report's printed body, its aside (the text form's warnings) and its unmerged
    count; ``None`` when none is kept (or the table does not exist yet)."""
    try:
        row = conn.execute(
            "SELECT body, aside, unmerged FROM printed_reports WHERE prefix = ? AND form = ?",
            (prefix, form),
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None:
        return None
    body, aside, unmerged = row
    import zstandard  # a kept report exists: a large root (see MIN_BYTES)

    unpack = zstandard.ZstdDecompressor()
    return unpack.decompress(body), unpack.decompress(aside), int(unmerged)


def keep(
    index: Index,
    conn: sqlite3.Connection,
    seen: int,
    prefix: str,
    form: str,
    printed: tuple[bytes, bytes, int],
) -> bool:
    """Keep ``printed`` (body, aside, unmerged count), made from a snapshot of ``conn`` begun
    when its data version was ``seen``, unless another connection committed since, or it is
    smaller than :data:`MIN_BYTES`; True when kept."""
    body, aside, unmerged = printed
    if len(body) + len(aside) < MIN_BYTES:
        return False
    import zstandard

    pack = zstandard.ZstdCompressor(level=LEVEL)
    packed = (pack.compress(body), pack.compress(aside))
    try:
        with index.transaction() as writer:
            if version(conn) != seen:
                return False  # a commit since the snapshot: the report may be older than it
            with keeping_stamp(writer):  # an index made before the table: made now
                for statement in printed_schema(writer):
                    writer.execute(statement)
            writer.execute(
                "INSERT OR REPLACE INTO printed_reports (prefix, form, body, aside, unmerged)"
                " VALUES (?, ?, ?, ?, ?)",
                (prefix, form, *packed, unmerged),
            )
    except sqlite3.OperationalError:  # busy, or read-only: the next report makes it again
        return False
    return True
