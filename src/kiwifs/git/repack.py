"""The packing of a repository's loose objects, run as ``python -m kiwifs.git.repack ROOT``.

Started by :class:`kiwifs.git.packing.Packer` (which says when, and why) at a lowered priority,
it takes the repository's packing lock (:data:`kiwifs.git.packing.LOCK`; held by another
packing: nothing to do) and runs:

1. ``git repack -d``: the loose objects reachable from the refs, the reflogs and the git index
   file written into one new pack, the objects of each path next to each other so that each tree
   is stored as a delta of its last version; then the loose copies of what was packed deleted.
   Once :data:`PACKS_AT` packs pile up, ``git repack -A -d`` instead: everything into one pack
   (deltas already found are reused), the old packs deleted, an unreachable object in them
   written out loose again rather than lost. (``--geometric``, which rolls small packs up,
   packs loose objects with no path to group them by: measured 80x larger than ``-d``.)
2. ``git commit-graph write --reachable --changed-paths``: the commits' graph with the paths each
   changed, which ``git log -- PATH`` (a file's versions) reads instead of the commits' trees.

Safe beside commits: git deletes a loose object only once a pack holds it; an object written
meanwhile, not yet reachable, stays loose until the next time; libgit2 looks through the packs
again when a loose object it expected is gone. Nothing is pruned. The one race is a folder of
objects that git deletes once it has emptied it just as libgit2 moves a new object into it: the
commit fails and is made again (``COMMIT_ATTEMPTS`` in :mod:`kiwifs.git.repo`).

The commands start no program that a repository or a user's configuration names: the options
of :mod:`kiwifs.git.remote`, no transport allowed.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from kiwifs.base.forking import yield_the_cpu
from kiwifs.git.packing import LOCK
from kiwifs.git.remote import GitFailed, run

PACKS_AT = 50  # packs that make the next packing one of everything: git's gc.autoPackLimit
TIMEOUT = 24 * 3600.0  # a git command of the packing that runs longer is stopped
REPACK = ("repack", "-d", "-q")
REPACK_ALL = ("repack", "-A", "-d", "-q")
COMMIT_GRAPH = ("commit-graph", "write", "--reachable", "--changed-paths", "--no-progress")


def packs(root: Path) -> int:
    """The packs of ``root``'s repository."""
    try:
        with os.scandir(root / ".git" / "objects" / "pack") as entries:
            return sum(1 for e in entries if e.name.endswith(".pack"))
    except OSError:
        return 0


def pack(root: Path) -> None:
    """Pack ``root``'s loose objects and write its commit graph (see the module docstring);
    :class:`GitFailed` when git fails."""
    run(REPACK_ALL if packs(root) >= PACKS_AT else REPACK, (), TIMEOUT, cwd=root)
    run(COMMIT_GRAPH, (), TIMEOUT, cwd=root)


def main(argv: list[str] | None = None) -> int:
    """Take the repository's packing lock and pack; 0 also when another packing holds it."""
    args = argv if argv is not None else sys.argv[1:]
    root = Path(args[0])
    if argv is None:  # the child process, not a test calling it in its own
        yield_the_cpu()
    try:
        fd = os.open(root / ".git" / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        print(f"cannot open the packing lock: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another process packs this repository now
        pack(root)
    except GitFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
