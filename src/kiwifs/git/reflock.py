"""The ref lock a commit killed midway leaves behind, told apart from a running git's.

Moving HEAD, git (libgit2 for kiwifs) creates ``.git/refs/heads/<branch>.lock``, writes the new
commit id into it and renames it over the ref. ``kill -9`` between the two leaves the lock file,
and every later commit then fails with "failed to lock file" — for kiwifs, whose restart commits
what the crash left, and for the user's ``git commit``. git never removes such a lock itself,
because it cannot tell it from one a running ``git`` holds.

kiwifs can, for its own: every kiwifs commit creates :data:`MARKER` before it moves HEAD and
removes it after, while holding the git lock that all kiwifs commits in all processes share. A
marker found by the next commit, holding that lock, therefore belongs to a kiwifs commit that
died; the ref locks then present are its, and are removed. Without the marker a lock is left
alone (a user's ``git`` at work), and the commit fails with git's message until it is gone.

The marker is not fsynced: it serves process crashes, which the page cache survives, like the
write journal; a power cut that loses it also loses the unsynced lock file in most cases.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

MARKER = ".kiwi/state/git-ref.writing"


@contextlib.contextmanager
def moving_head(root: Path) -> Iterator[None]:
    """Around the step that moves HEAD (git lock held): the marker exists while it runs."""
    marker = root / MARKER
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    except OSError:
        yield  # no state folder (a read-only .kiwi): no recovery, as before the marker
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(marker)


def clear_abandoned(root: Path) -> list[str]:
    """Remove the ref locks of a kiwifs commit that died (git lock held); returns their paths.

    One ``stat`` when no commit died, which is what every commit pays.
    """
    marker = root / MARKER
    if not marker.exists():
        return []
    removed = []
    for rel in _ref_locks(root):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(root / ".git" / rel)
            removed.append(f".git/{rel}")
    if removed:
        log.warning("removed %s, left by a kiwifs commit that was killed", ", ".join(removed))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker)
    return removed


def _ref_locks(root: Path) -> list[str]:
    """The lock files (relative to ``.git``) a commit moving HEAD may hold: HEAD's, the
    branch's it names, and their reflogs'."""
    locks = ["HEAD.lock", "logs/HEAD.lock"]
    branch = _head_branch(root)
    if branch is not None:
        locks += [f"{branch}.lock", f"logs/{branch}.lock"]
    return locks


def _head_branch(root: Path) -> str | None:
    """The ref HEAD points at (``refs/heads/main``); ``None`` for a detached or odd HEAD.

    The root is not trusted: a name that could leave ``.git/refs`` is not used.
    """
    try:
        text = (root / ".git" / "HEAD").read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("ref: "):
        return None
    ref = text[len("ref: ") :]
    parts = ref.split("/")
    if parts[0] != "refs" or len(parts) < 3 or any(p in ("", ".", "..") for p in parts):
        return None
    return ref
