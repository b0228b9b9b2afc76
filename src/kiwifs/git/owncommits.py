"""What the commits this process made changed, kept so the timeline need not diff their trees.

The timeline (:mod:`kiwifs.index.memory.timeline`) folds every commit's changed knowledge files into
its counts. Reading them back from git means loading both versions of every folder on the path of
each change and comparing their entries: on a busy server that replay took a fifth of the
interpreter's time per write (see docs/dev/benchmarks-log.md). Yet a commit kiwifs made itself
already knew, while building its trees, which entries it changed.
:class:`~kiwifs.git.repo.Git` records that here (:func:`record`), and
:class:`~kiwifs.git.replay.GitHistory` asks here first (:func:`lookup`).

A commit id names its tree and its parent, so the changes recorded for an id hold for that
commit in any root, for ever: nothing here is ever invalidated, only forgotten (the oldest go
once :data:`MAX_PATHS` paths are kept). A commit whose changes are not simple (a file became a
folder or a symbolic link, a folder was removed as a whole: what libgit2's diff reports in its
own way) is not recorded, and is read back from git as before.
A :class:`~kiwifs.git.replay.GitHistory` made with ``known=False`` (``Tuning.timeline_known``)
does not ask: the plain path, which reads every commit back from git.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

MAX_PATHS = 200_000  # changed paths kept, over all recorded commits (a few tens of MB at most)

# (path, new blob id as hex, or None when the file is gone), in path order
Changes = tuple[tuple[str, str | None], ...]


def is_knowledge_path(rel: str) -> bool:
    """The walk's rule for a path in a git tree: ``.md`` exactly, no hidden segment."""
    return rel.endswith(".md") and not any(seg.startswith(".") for seg in rel.split("/"))


@dataclass(frozen=True)
class MadeCommit:
    """A commit just made: its id, its first parent, and its knowledge files' changes relative
    to that parent (``None`` when they are not simple enough to record; see the module)."""

    id: str
    parent: str | None
    changes: Changes | None


_lock = threading.Lock()
_known: OrderedDict[str, tuple[str, Changes]] = OrderedDict()
_paths = 0


def record(made: MadeCommit) -> None:
    """Keep ``made``'s changes for :func:`lookup` (nothing for a first commit or unknown ones)."""
    global _paths
    if made.parent is None or made.changes is None:
        return
    with _lock:
        if made.id in _known:
            return
        _known[made.id] = (made.parent, made.changes)
        _paths += len(made.changes) + 1
        while _paths > MAX_PATHS and _known:
            _, (_, dropped) = _known.popitem(last=False)
            _paths -= len(dropped) + 1


def lookup(commit: str, parent: str | None) -> Changes | None:
    """The recorded changes of ``commit`` relative to ``parent``; ``None`` when not recorded
    (or recorded against another parent, which a commit id cannot have: checked anyway)."""
    with _lock:
        hit = _known.get(commit)
    if hit is None or hit[0] != parent:
        return None
    return hit[1]


def forget() -> None:
    """Drop every record (tests)."""
    global _paths
    with _lock:
        _known.clear()
        _paths = 0
