"""The term columns a rebuild kept in the index, kept again by a server as writes go on.

A rebuild keeps the columns of the root's most common words in the index, current at the text
log's last entry (:mod:`index.search.storedcolumns`), and each server start reads them and
catches them up with the documents logged since. The log keeps ``changelog.KEEP`` (50,000)
entries: past that many changes since the rebuild, a start can no longer catch the columns up
and makes each word's column again on demand, and a served million-file root's first questions
cost seconds again (found on a root that had taken ~53,000 writes since its rebuild: first
searches of 5.6 s p50, one of 34 s). Well before that, each start catches up more documents.

So a server keeps its own columns, current in memory, in the index again once the kept ones
are :data:`KEEP_BEHIND` log entries behind (:func:`keep_again`, after a periodic reconcile):
~1–2 s of a core at a million documents (the columns compressed), every 10,000 changes. A kept
word whose column the server does not hold (the kept ones could not be used at all: the log
was cut past them, another schema; or it was dropped as least recently used) is made from
FTS5's instances of it for the copy alone, outside the columns' lock (searches go on; up to
seconds a word at a million documents), so a root left behind heals by itself.

**One position for all.** The kept columns must be what a single log entry ``P`` saw: the
next start recounts exactly the documents logged after ``P``. The columns are copied one at a
time, letting searches (which may catch them up) run between two copies, so a column copied
later may hold a newer count for some document; every such document changed after ``P``, is
logged after it, and is therefore recounted by that start, whatever was kept for it. The
lengths are taken at ``P`` itself, and every column cut to the documents that existed then (a
document made later is logged later). A rebuild meanwhile (the columns' generation or the
schema moved) throws the copy away.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from kiwifs.base.heap import release_free_memory
from kiwifs.index.report import snapshot
from kiwifs.index.search import storedcolumns, termcolumns

log = logging.getLogger(__name__)

KEEP_BEHIND = 10_000  # log entries the kept columns may fall behind before they are kept again

Connect = Callable[[], AbstractContextManager[sqlite3.Connection]]


def keep_again(
    columns: termcolumns.TermColumns, reader: Connect, writer: Connect, behind: int = KEEP_BEHIND
) -> bool:
    """Keep ``columns`` in the index in place of the kept ones when those are ``behind`` log
    entries or more behind, or cannot be used; True when they were kept. ``reader`` lends a
    read connection, ``writer`` opens the writer's transaction."""
    with reader() as conn:
        words = storedcolumns.due(conn, behind)
    if not words:
        return False
    began = time.perf_counter()
    try:
        packed = _packed(columns, reader, words)
        if packed is None or not packed.words:
            return False
        with writer() as conn:
            if not storedcolumns.replace(conn, packed):
                return False
        log.info(
            "kept %d term columns in the index again, current at text log entry %d (%.1f s)",
            len(packed.words),
            packed.log,
            time.perf_counter() - began,
        )
        return True
    finally:
        release_free_memory()  # the packed copy (~55 MB at a million documents) is gone


def _packed(
    columns: termcolumns.TermColumns, reader: Connect, words: list[str]
) -> storedcolumns.Packed | None:
    """``words``' columns packed as kept, at one log position (see the module's docstring)."""
    import numpy as np

    with reader() as conn, snapshot(conn):
        base = columns.keeping_base(conn)
    if base is None:
        return None
    generation, schema, position, lengths = base
    pack = storedcolumns.packer()
    packed = storedcolumns.Packed(schema, position, bytes(pack.compress(lengths.tobytes())), [])
    for word in words:
        with reader() as conn, snapshot(conn):
            same, column = columns.kept_column(conn, word, generation, len(lengths))
            if same and column is None:  # not held: made from FTS5, outside the columns' lock
                column = termcolumns.made_column(np, conn, word, len(lengths))
        if not same:
            return None
        if column is not None:
            packed.words.append((word, *storedcolumns.pack_column(np, pack, column)))
    return packed
