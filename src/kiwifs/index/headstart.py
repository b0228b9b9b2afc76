"""A head start for a one-shot command's stat walk, begun before the command imports the core.

A command answered from the index first reconciles it with the files: a stat walk of the whole
root, run by forked workers while the answer is computed (:meth:`Index.reconcile_then`). Before
it can open the index, though, Python imports the core (~0.15 s on a 2-core machine, a third of
``kiwifs memory report`` on 100,000 episodes), and the workers need not wait for that.
:func:`begin` reads the stored folder digests with :mod:`sqlite3` alone and starts the walk as
the index would; the index :func:`take`\\ s it when it starts its own walk, provided it would
have started the same one (same root, same index file, same stored digests and entry counts),
and otherwise stops it and walks anew. Only a walk that forked is kept: in one process there is
nothing to run ahead.

The walk a head start gives is the walk the command would have made, begun a little earlier:
it still begins after the command did, so an edit made before the command sees its file read.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .walk import PendingWalk, start_walk, worker_count

# The A/B switch of ``bench/startup.py``: False leaves the walk to the index, as before.
ENABLED = True

# ``db.STATE_DIR / db.INDEX_FILE``, spelled out because importing ``db`` takes what this module
# exists to avoid (tests hold the two equal).
INDEX_PATH = os.path.join(".kiwi", "state", "index.db")

Folders = tuple[dict[bytes, bytes | None], dict[bytes, int]]


def stored_folders(conn: sqlite3.Connection) -> Folders:
    """Each folder's digest at its last reconcile, and the entry counts that split the walk."""
    stored = conn.execute("SELECT key, digest, entries FROM dirs").fetchall()
    expected = {key: digest for key, digest, _ in stored}
    sizes = {key: entries for key, _, entries in stored if entries}
    return expected, sizes


@dataclass
class _Early:
    real_root: str
    real_index: str
    folders: Folders
    walk: PendingWalk


_early: _Early | None = None


def begin(root: str | os.PathLike[str]) -> None:
    """Start the stat walk of ``root`` for its index, if the index exists and the walk forks.

    Never an error: a root or an index that cannot be read (missing, busy, another schema)
    just gets no head start, and the command finds out for itself what is wrong.
    """
    global _early
    if not ENABLED or _early is not None:
        return
    index = os.path.join(os.fspath(root), INDEX_PATH)
    try:
        if not os.path.isfile(index):
            return
        # mode=rw: never create the file (it may vanish meanwhile); only reads are made
        uri = Path(os.path.abspath(index)).as_uri() + "?mode=rw"
        conn = sqlite3.connect(uri, uri=True, timeout=0)
        try:
            folders = stored_folders(conn)
        finally:
            conn.close()
        # one worker fewer than the index's own walk: this process is busy meanwhile too
        # (importing the core, then answering), so on two CPUs one worker walks on the other
        # (bench/startup.py: two workers and this process shared two CPUs no faster)
        walk = start_walk(root, *folders, workers=max(worker_count() - 1, 0))
    except (OSError, sqlite3.Error):
        return
    if walk.forked:
        _early = _Early(os.path.realpath(root), os.path.realpath(index), folders, walk)
        atexit.register(discard)


def take(
    root: str | os.PathLike[str], index: str | os.PathLike[str], folders: Folders
) -> PendingWalk | None:
    """The walk begun early, if it is the one the index of ``root`` at ``index`` would start
    now from the stored ``folders``; ``None`` otherwise (the early walk, if any, is stopped)."""
    global _early
    early, _early = _early, None
    if early is None:
        return None
    if (early.real_root, early.real_index) == (
        os.path.realpath(root),
        os.path.realpath(index),
    ) and early.folders == folders:
        return early.walk
    early.walk.cancel()
    return None


def discard() -> None:
    """Stop a walk begun early that no index took (the command failed or did not need it)."""
    global _early
    early, _early = _early, None
    if early is not None:
        early.walk.cancel()
