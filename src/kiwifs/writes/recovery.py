"""Crash recovery: what ``kill -9`` (or a power cut) can leave behind, repaired at the next open.

A write is acknowledged only once it is on disk and committed (or, with ``--async-commit``, on
disk and named in the journal). A crash can strike between any two steps, so the next open
repairs, in this order:

1. **An interrupted bulk write** (``.kiwi/state/bulk.journal`` exists): rolled forward — every
   file given its new content, then one commit with the bulk's own author and message — or, if
   that cannot be done, rolled back to the previous contents. Never committed in part
   (:func:`kiwifs.writes.journal.finish`, which every write also runs first).
2. **Writes on disk but not in git** (paths in ``.kiwi/state/uncommitted.log``): committed as
   they are on disk, as ``kiwifs: recommit N file(s)``.
3. **Temporary files** (``.kiwi-write-*``) of writes killed before their rename: removed from
   the folders the journals name, and — when a server starts — from the whole root (a walk
   that one-shot commands skip; every walk ignores hidden files meanwhile).
4. **A git index file behind HEAD** (``.kiwi/state/git-index.stale``): reconciled with HEAD,
   so ``git status`` is clean and a user's ``git commit`` cannot undo acknowledged writes
   (:mod:`kiwifs.git.indexfile`).

Steps 1–3 hold the write lock, so they never race a live write of another process. Recovery
calls the pipeline; the pipeline never calls it (:meth:`kiwifs.knowledge.Knowledge.open` does).
"""

from __future__ import annotations

import contextlib
import logging

from kiwifs.errors import KiwiError
from kiwifs.files.atomic import remove_temp_files, temp_file_folders, temp_files, temp_files_in
from kiwifs.frontmatter.provenance import LIBRARY_ACTOR
from kiwifs.writes import journal
from kiwifs.writes.pipeline import JOURNAL, Pipeline

log = logging.getLogger(__name__)


def crash_left_work(pipeline: Pipeline) -> bool:
    """True when a bulk journal exists or the journal names paths (a few ``stat`` calls)."""
    if journal.exists(pipeline.state):
        return True
    try:
        return (pipeline.state / JOURNAL).stat().st_size > 0
    except FileNotFoundError:
        return False


def recover(pipeline: Pipeline, sweep: bool = False) -> list[str]:
    """Run the repairs above; returns the paths committed. ``sweep`` walks the whole root
    for temporary files; without it, only the folders the journals name are looked at.

    Takes no lock and writes nothing when there is nothing to do, so read-only roots open fine.
    """
    paths: list[str] = []
    if sweep or crash_left_work(pipeline):
        candidates = temp_files(pipeline.root) if sweep else []  # walked before taking the lock
        with pipeline.locked(settle=False):
            near = temp_file_folders(pipeline.root, journaled_paths(pipeline))
            candidates += temp_files_in({pipeline.state, *near})
            paths = _finish_bulk(pipeline) + recommit_journal(pipeline)
            for path in remove_temp_files(candidates):
                log.warning("removed %s, left by an interrupted write", path)
    if pipeline.git is not None:
        pipeline.git.recover_index()
    return sorted(set(paths))


def _finish_bulk(pipeline: Pipeline) -> list[str]:
    """Step 1 (:func:`kiwifs.writes.journal.finish`); a bulk that can be neither finished nor undone
    is left for later writes to retry (they fail meanwhile), so that the root still opens for
    reading."""
    try:
        return journal.finish(pipeline.state, pipeline.storage, pipeline.git, pipeline.index_hook)
    except KiwiError as exc:
        log.error("%s", exc)
        return []


def journaled_paths(pipeline: Pipeline) -> set[str]:
    """The paths an interrupted write may have been writing (both journals, lock held)."""
    paths: set[str] = set()
    with contextlib.suppress(journal.DamagedJournal):
        intent = journal.read(pipeline.state)
        paths.update(intent.paths if intent is not None else ())
    with contextlib.suppress(FileNotFoundError):
        text = (pipeline.state / JOURNAL).read_text(encoding="utf-8")
        paths.update(line for line in text.splitlines() if line.strip())
    return paths


def recommit_journal(pipeline: Pipeline) -> list[str]:
    """Commit the paths the journal names, as they are on disk, and empty it."""
    if pipeline.git is None:
        return []
    try:
        text = (pipeline.state / JOURNAL).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    paths = sorted({line for line in text.splitlines() if line.strip()})
    if paths:
        message = f"{LIBRARY_ACTOR}: recommit {len(paths)} file(s)"
        pipeline.git.commit(paths, LIBRARY_ACTOR, message)
        if pipeline.index_hook is not None:
            pipeline.index_hook(paths)
    pipeline.clear_journal()
    return paths
